"""``make_vec``: a vector env from registered ids."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.registry import EnvSpec, Registry, WrapperRef, build
from gem_core.vector.async_vector import AsyncVectorEnv, SyncEnvs
from gem_core.vector.base import AutoresetMode, OnError, VectorEnv
from gem_core.vector.process import ProcessEnv
from gem_core.vector.sync import SyncVectorEnv

__all__ = ["build_env", "make_vec"]


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


def make_vec(
    id_or_ids: str | Sequence[str],
    num_envs: int | None = None,
    *,
    vectorization: Literal["sync", "async"] = "sync",
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    on_error: OnError = "raise",
    wrappers: Sequence[WrapperRef] | None = None,
    processes: bool | None = None,
    sync_envs: SyncEnvs = "thread",
    max_threads: int | None = None,
    max_processes: int | None = None,
    registry: Registry | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """Build a vector env of registered envs.

    Args:
        id_or_ids: One id (repeated ``num_envs`` times) or a list of ids; env ``i`` gets
            ``ids[i % len(ids)]``, so ``make_vec(["a", "b"], 4)`` is ``a, b, a, b``.
        num_envs: Number of sub-envs; defaults to 1 for one id, ``len(ids)`` for a list.
        vectorization: ``"sync"`` (:class:`SyncVectorEnv`) or ``"async"`` (:class:`AsyncVectorEnv`).
        autoreset_mode: ``"next_step"``, ``"same_step"`` or ``"disabled"``; see :class:`AutoresetMode`.
        on_error: ``"raise"`` or ``"reset"``; see :class:`VectorEnv`.
        wrappers: Wrappers applied to every sub-env, outside the spec's own.
        processes: ``async`` only. ``None`` runs specs with ``cpu_bound=True`` in worker
            processes; ``True``/``False`` forces every env in or out of processes. Envs in
            processes are built there from their spec, so wrappers must be given by name
            (or as picklable callables) and resolve in the process-wide registry.
        sync_envs: ``async`` only: run sync envs in threads (``"thread"``) or on the loop (``"inline"``).
        max_threads: ``async`` only: thread-pool size.
        max_processes: ``async`` only: number of worker processes.
        registry: Where to look ids up; the process-wide registry by default.
        **kwargs: Constructor kwargs for every sub-env (over each spec's defaults).

    Raises:
        EnvNotFound: an id is unknown.
        ConfigError: a bad argument (the message names it).
    """
    if registry is None:
        from gem_core.plugins import get_registry

        registry = get_registry()
    ids = [id_or_ids] if isinstance(id_or_ids, str) else list(id_or_ids)
    if not ids:
        raise ConfigError("make_vec needs at least one env id")
    n = num_envs if num_envs is not None else len(ids)
    if n < 1:
        raise ConfigError(f"num_envs must be >= 1, got {n}")
    specs: dict[str, EnvSpec] = {}
    for env_id in dict.fromkeys(ids):
        spec, alias = registry.resolve(env_id)
        if alias is not None and alias.deprecated:
            note = f" {alias.message}" if alias.message else ""
            message = f"env id {env_id!r} is deprecated; use {alias.target!r}.{note}"
            warnings.warn(message, DeprecationWarning, stacklevel=2)
        specs[env_id] = spec
    refs = tuple(wrappers or ())
    if vectorization == "sync":
        if processes:
            raise ConfigError("processes=True needs vectorization='async'")
        fns: list[Callable[[], Env | AsyncEnv]] = [
            functools.partial(build_env, specs[ids[i % len(ids)]], kwargs, refs, registry) for i in range(n)
        ]
        return SyncVectorEnv(fns, autoreset_mode=autoreset_mode, on_error=on_error)
    if vectorization != "async":
        raise ConfigError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    sources: list[Callable[[], Env | AsyncEnv] | ProcessEnv] = []
    for i in range(n):
        spec = specs[ids[i % len(ids)]]
        if processes or (processes is None and spec.cpu_bound):
            # no registry object: it does not pickle; the worker uses its process-wide one
            sources.append(ProcessEnv(functools.partial(build_env, spec, kwargs, refs)))
        else:
            sources.append(functools.partial(build_env, spec, kwargs, refs, registry))
    return AsyncVectorEnv(
        sources,
        autoreset_mode=autoreset_mode,
        on_error=on_error,
        sync_envs=sync_envs,
        max_threads=max_threads,
        max_processes=max_processes,
    )
