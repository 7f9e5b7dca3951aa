"""gem <-> OpenEnv 0.10, both ways (docs/interop.md).

* :mod:`gem_openenv.server`: any gem id as an OpenEnv environment, built with OpenEnv's ``create_app``
  (``gem serve ID``).
* :mod:`gem_openenv.export`: an OpenEnv package for a gem id (``gem export openenv ID``).
* :mod:`gem_openenv.client`: any OpenEnv server as a gem env (``gem_core.make("openenv:Remote-v0",
  base_url=...)``; :mod:`gem_openenv.plugin` registers the ``openenv:*`` ids).

Importing this package imports no OpenEnv code; each module imports it when used.
"""
