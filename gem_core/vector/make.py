"""``make_vec``: a vector env from registered ids (``build_env`` lives in :mod:`gem_core.vector.building`)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.registry import EnvSpec, Registry, WrapperRef
from gem_core.vector.async_vector import AsyncVectorEnv, SyncEnvs
from gem_core.vector.base import AutoresetMode, OnError, VectorEnv
from gem_core.vector.building import build_env
from gem_core.vector.process import ProcessEnv, ProcessVectorEnv
from gem_core.vector.sync import SyncVectorEnv

__all__ = ["BACKENDS", "Backend", "build_env", "make_vec"]

Backend = Literal["sync", "async", "process", "ray"]
#: Where ``make_vec`` can run envs.
BACKENDS: tuple[Backend, ...] = ("sync", "async", "process", "ray")


def make_vec(
    id_or_ids: str | Sequence[str],
    num_envs: int | None = None,
    *,
    backend: Backend | None = None,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    on_error: OnError = "raise",
    wrappers: Sequence[WrapperRef] | None = None,
    sync_envs: SyncEnvs = "thread",
    max_threads: int | None = None,
    max_processes: int | None = None,
    num_cpus: float | None = None,
    envs_per_actor: int | None = None,
    step_timeout: float | None = None,
    placement_timeout: float | None = 120.0,
    registry: Registry | None = None,
    vectorization: Literal["sync", "async"] | None = None,
    processes: bool | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """Build a vector env of registered envs.

    Args:
        id_or_ids: One id (repeated ``num_envs`` times) or a list of ids; env ``i`` gets
            ``ids[i % len(ids)]``, so ``make_vec(["a", "b"], 4)`` is ``a, b, a, b``.
        num_envs: Number of sub-envs; defaults to 1 for one id, ``len(ids)`` for a list.
        backend: Where the envs run. ``"sync"`` (default): a loop in the calling thread
            (:class:`SyncVectorEnv`). ``"async"``: async envs on an event loop, sync envs in
            threads, specs with ``cpu_bound=True`` in worker processes (:class:`AsyncVectorEnv`).
            ``"process"``: every env in worker processes (:class:`ProcessVectorEnv`).
            ``"ray"``: every env in Ray actors, on the cluster ``ray.init`` connects to
            (:class:`~gem_core.vector.ray.RayVectorEnv`; needs ``gem-core[ray]``). Envs in
            processes or actors are built there from their spec, so wrappers must be given
            by name (or as picklable callables) and resolve in the remote side's registry.
        autoreset_mode: ``"next_step"``, ``"same_step"`` or ``"disabled"``; see :class:`AutoresetMode`.
        on_error: ``"raise"`` or ``"reset"``; see :class:`VectorEnv`.
        wrappers: Wrappers applied to every sub-env, outside the spec's own.
        sync_envs: ``async`` only: run sync envs in threads (``"thread"``) or inline (``"inline"``).
        max_threads: ``async`` only: thread-pool size.
        max_processes: ``async`` and ``process``: number of worker processes.
        num_cpus: ``ray`` only: CPUs per env; default each spec's ``num_cpus``.
        envs_per_actor: ``ray`` only: envs sharing one actor; default: packed by the cluster's free CPUs.
        step_timeout: Seconds an env's ``step``/``reset`` may take before it fails with
            :class:`~gem_core.errors.EnvStepTimeout` (``None``: no limit); what each backend can
            interrupt is in docs/wrappers-vector.md, "Faults".
        placement_timeout: ``ray`` only: seconds to wait for the actors before
            :class:`~gem_core.errors.PlacementError`.
        registry: Where to look ids up; the process-wide registry by default.
        vectorization: Deprecated: ``backend`` replaces it.
        processes: Deprecated: ``True`` is ``backend="process"``; ``False`` keeps
            ``cpu_bound`` specs of the ``async`` backend in-process.
        **kwargs: Constructor kwargs for every sub-env (over each spec's defaults).

    Raises:
        EnvNotFound: an id is unknown.
        ConfigError: a bad argument (the message names it).
    """
    backend, cpu_bound_in_processes = _pick_backend(backend, vectorization, processes)
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
    spec_of = [specs[ids[i % len(ids)]] for i in range(n)]
    common: dict[str, Any] = {"autoreset_mode": autoreset_mode, "on_error": on_error, "step_timeout": step_timeout}

    def local(spec: EnvSpec) -> Callable[[], Env | AsyncEnv]:
        return functools.partial(build_env, spec, kwargs, refs, registry)

    def remote(spec: EnvSpec) -> Callable[[], Env | AsyncEnv]:
        # no registry object: it does not pickle; the worker uses its process-wide one
        return functools.partial(build_env, spec, kwargs, refs)

    if backend == "sync":
        return SyncVectorEnv([local(s) for s in spec_of], **common)
    if backend == "async":
        sources: list[Callable[[], Env | AsyncEnv] | ProcessEnv] = [
            ProcessEnv(remote(s)) if s.cpu_bound and cpu_bound_in_processes else local(s) for s in spec_of
        ]
        return AsyncVectorEnv(
            sources, sync_envs=sync_envs, max_threads=max_threads, max_processes=max_processes, **common
        )
    if backend == "process":
        return ProcessVectorEnv([remote(s) for s in spec_of], max_processes=max_processes, **common)
    from gem_core.vector.ray import RayVectorEnv

    cpus = [s.num_cpus if num_cpus is None else num_cpus for s in spec_of]
    return RayVectorEnv(
        [remote(s) for s in spec_of],
        num_cpus=cpus,
        envs_per_actor=envs_per_actor,
        placement_timeout=placement_timeout,
        **common,
    )


def _pick_backend(backend: str | None, vectorization: str | None, processes: bool | None) -> tuple[Backend, bool]:
    """The backend, from ``backend`` or the deprecated ``vectorization``/``processes``.

    Also whether the async backend puts ``cpu_bound`` specs in processes.
    """
    if vectorization is not None or processes is not None:
        old = ", ".join(
            f"{k}={v!r}" for k, v in (("vectorization", vectorization), ("processes", processes)) if v is not None
        )
        if backend is not None:
            raise ConfigError(f"make_vec: pass backend= alone; {old} is its deprecated spelling")
        if vectorization not in (None, "sync", "async"):
            raise ConfigError(f"vectorization must be 'sync' or 'async', got {vectorization!r}; use backend= instead")
        if processes and vectorization != "async":
            raise ConfigError("processes=True needs vectorization='async'; use backend='process' instead")
        new: Backend = "process" if processes else ("async" if vectorization == "async" else "sync")
        warnings.warn(
            f"make_vec({old}) is deprecated; use make_vec(..., backend={new!r})", DeprecationWarning, stacklevel=3
        )
        return new, processes is None
    if backend is None:
        return "sync", True
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    return backend, True
