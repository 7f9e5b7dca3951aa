"""Building one env from its spec where it runs: in the caller, a worker process or a Ray actor.

Its own module so that every backend can import it without importing ``make_vec``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_core.core import AsyncEnv, Env
from gem_core.registry import EnvSpec, Registry, WrapperRef, build

__all__ = ["build_env"]


def build_env(
    spec: EnvSpec,
    kwargs: dict[str, Any],
    wrappers: Sequence[WrapperRef],
    registry: Registry | None = None,
) -> Env | AsyncEnv:
    """Build one env from its spec, then apply the spec's and the caller's wrappers.

    Module-level and driven by picklable arguments, so a worker process can run it.
    Wrapper names resolve in ``registry`` (the process-wide one when ``None``).
    """
    if registry is None:
        from gem_core.plugins import get_registry

        registry = get_registry()
    env = build(spec, kwargs)
    for ref in (*spec.wrappers, *wrappers):
        env = registry.apply_wrapper(env, ref)
    return env  # type: ignore[no-any-return]
