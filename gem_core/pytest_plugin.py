"""gem_core's pytest plugin (entry point ``pytest11``): run the env checker in an env package's tests.

Installed with gem-core and active in every pytest run (``-p no:gem_core`` turns it off).
It imports nothing from gem_core until a test uses it.

Example::

    import pytest

    @pytest.mark.gem_envs(namespace="mygames")      # or ids=["mygames:Maze-v0"]
    def test_env_contract(gem_env_id, gem_check_env):
        gem_check_env(gem_env_id)

``gem_envs`` parametrizes ``gem_env_id`` over the ids (collection fails when a namespace
has none, so an uninstalled package cannot pass by checking nothing); ``gem_check_env(id,
**kwargs)`` builds the env with ``gem_core.make`` and runs
:func:`gem_core.testing.check_env` on it, with a second instance for the determinism check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

__all__ = ["gem_check_env", "gem_env_id", "pytest_configure", "pytest_generate_tests"]

_MARKER = "gem_envs"


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``gem_envs`` marker."""
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(namespace=None, ids=None): run the test once per gem env id (as the gem_env_id argument)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``gem_env_id`` from the test's ``gem_envs`` marker."""
    marker = metafunc.definition.get_closest_marker(_MARKER)
    if marker is None or "gem_env_id" not in metafunc.fixturenames:
        return
    namespace: str | None = marker.kwargs.get("namespace", marker.args[0] if marker.args else None)
    ids: list[str] | None = marker.kwargs.get("ids")
    if ids is None:
        if namespace is None:
            raise pytest.UsageError(f"@pytest.mark.{_MARKER} needs namespace='...' or ids=[...]")
        from gem_core.api import list_envs

        ids = list_envs(namespace=namespace)
        if not ids:
            raise pytest.UsageError(
                f"@pytest.mark.{_MARKER}: no env ids in namespace {namespace!r}. Is the package installed "
                "(pip install -e .) and does its plugin declare ids there? 'gem list' shows what is registered."
            )
    metafunc.parametrize("gem_env_id", ids, ids=ids)


@pytest.fixture
def gem_env_id() -> str:
    """The env id of a test marked ``@pytest.mark.gem_envs`` (this fallback runs only without the marker)."""
    pytest.fail(f"gem_env_id is set by @pytest.mark.{_MARKER}(namespace=...) or (ids=[...]); the test has neither")


@pytest.fixture
def gem_check_env() -> Callable[..., None]:
    """A function ``check(env_id, *, seed=0, **kwargs)`` running the env checker on a registered id."""
    import functools

    from gem_core.api import make
    from gem_core.testing import check_env

    def check(env_id: str, *, seed: int = 0, **kwargs: Any) -> None:
        env = make(env_id, **kwargs)
        try:
            check_env(env, seed=seed, env_factory=functools.partial(make, env_id, **kwargs))
        finally:
            env.close()

    return check
