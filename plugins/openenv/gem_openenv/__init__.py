"""gem <-> OpenEnv 0.10, both ways, over OpenEnv's wire protocol spoken by gem's own code (docs/interop.md).

* :mod:`gem_openenv.server`: any gem id as an OpenEnv env server (``gem serve ID``; the app is
  :mod:`gem_openenv.app`).
* :mod:`gem_openenv.export`: an OpenEnv package for a gem id (``gem export openenv ID``).
* :mod:`gem_openenv.client`: any OpenEnv server as a gem env (``gem_core.make("openenv:Remote-v0",
  base_url=...)``; :mod:`gem_openenv.plugin` registers the ``openenv:*`` ids).

No module here imports OpenEnv: gem-openenv does not depend on it (its ``openenv`` extra is for tests
and the export's typed client).
"""
