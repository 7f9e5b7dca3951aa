"""The Ray backend: sub-envs in Ray actors, on a Ray cluster or a local Ray instance.

Needs the ``ray`` extra (``pip install 'gem-core[ray]'``). Envs are placed wherever
``ray.init`` connects: an existing cluster (``ray.init(address="ray://head:10001")``, or
``RAY_ADDRESS``), or a local instance that Ray starts. An actor serves its envs one after
another, so it reserves the most any of its envs needs (``num_cpus`` per env, from the spec);
by default envs are packed into as many actors as the cluster's free CPUs hold, and placement
that does not happen within ``placement_timeout`` raises
:class:`~gem_core.errors.PlacementError` naming what was needed and what the cluster has.
A batch costs one remote call per actor.
An actor that dies (``ray.kill``, a crash, a lost node) is replaced and only its envs lose
their episodes (see :mod:`gem_core.vector.hosted`).

:class:`RayEnv` is a single env in an actor behind the :class:`~gem_core.AsyncEnv`
interface, for code that takes envs rather than vector envs, such as the episode runner:
``EpisodeRunner(ray_env_factory("game:Sudoku-v0-easy"), policy=...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import mmap
import os
import pickle
import struct
import tempfile
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, to_sync
from gem_core.errors import ConfigError, EnvResultError, EnvStepTimeout, EnvWorkerCrashed, PlacementError
from gem_core.registry import EnvSpec
from gem_core.vector.base import VectorEnv, check_timeout
from gem_core.vector.hosted import HOST_TAG, Host, HostDied, HostedGroup, MemberHost, kill_tagged
from gem_core.vector.member import AutoresetMode, OnError, portable, reset_result_problem, step_result_problem
from gem_core.vector.process import split_evenly

__all__ = ["RayEnv", "RayVectorEnv", "pack_envs", "ray_env_factory"]


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("the Ray backend needs Ray: pip install 'gem-core[ray]'") from exc
    return ray


def _ensure_ray(address: str | None) -> Any:
    """Connect to Ray: ``address``, else ``RAY_ADDRESS``, else a local instance (unless already connected)."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address)
    return ray


class _EnvActor:
    """Runs inside a Ray actor: the members of a vector env, or one raw env for :class:`RayEnv`.

    Args:
        token: Tags the processes the envs start (see :func:`~gem_core.vector.hosted.kill_tagged`).
        marker: A file of the driver's, where the actor notes the env it is serving, so the
            driver can name it if the actor dies; ignored when the actor runs on another node.
    """

    def __init__(self, token: str | None = None, marker: str | None = None) -> None:
        self.host = MemberHost()
        self.env: Env | None = None
        self.token = token
        if token is not None:
            os.environ[HOST_TAG] = token
        self._marks: mmap.mmap | None = None
        if marker is not None and os.path.exists(marker):  # the driver's node
            with open(marker, "r+b") as f:
                self._marks = mmap.mmap(f.fileno(), _MARK.size)

    def _mark(self, index: int) -> None:
        if self._marks is not None:
            _MARK.pack_into(self._marks, 0, index)

    def serve(self, op: str, data: bytes) -> bytes:
        try:
            return self.host.serve(op, data, self._mark)
        finally:
            self._mark(-1)

    def shutdown(self, _: Any = None) -> list[BaseException]:
        errors = self.host.close()
        if self.env is not None:
            try:
                self.env.close()
            except Exception as exc:
                errors.append(portable(exc))
        if self.token is not None:
            with contextlib.suppress(Exception):
                kill_tagged(self.token)
        return errors

    def open(self, factory: Callable[[], Env | AsyncEnv]) -> None:
        self.env = to_sync(factory())

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> bytes:
        env = self.env
        assert env is not None
        return _frame(lambda: env.reset(seed=seed, options=options))

    def step(self, action: str) -> bytes:
        env = self.env
        assert env is not None
        return _frame(lambda: env.step(action))


@functools.cache
def _actor_class() -> Any:
    return _ray().remote(_EnvActor)


def _new_actor(num_cpus: float, options: dict[str, Any] | None, *args: Any) -> Any:
    # max_restarts=0: a dead actor is replaced by us, with its envs rebuilt from their factories
    return _actor_class().options(**{"num_cpus": num_cpus, "max_restarts": 0, **(options or {})}).remote(*args)


_MARK = struct.Struct("<q")  # the env index an actor is serving, -1 between calls


def _cluster_cpus() -> tuple[float, float]:
    """``(total, available)`` CPUs of the cluster Ray is connected to."""
    ray = _ray()
    return float(ray.cluster_resources().get("CPU", 0.0)), float(ray.available_resources().get("CPU", 0.0))


def _kill(actor: Any) -> None:
    with contextlib.suppress(Exception):
        _ray().kill(actor, no_restart=True)


class ActorHost(Host):
    """One Ray actor holding some envs of a vector env.

    Args:
        indices: The env indices it holds.
        num_cpus: CPUs the actor reserves.
        options: More ``ray.remote`` options.
        layout: How the vector env's envs are spread, for a :class:`~gem_core.errors.PlacementError`.
    """

    def __init__(
        self, indices: Sequence[int], num_cpus: float, options: dict[str, Any] | None = None, layout: str = ""
    ) -> None:
        super().__init__(indices)
        self.num_cpus = num_cpus
        self.options = options
        self.layout = layout
        self.token = uuid.uuid4().hex
        fd, self.marker = tempfile.mkstemp(prefix="gem-ray-actor-")
        os.write(fd, _MARK.pack(-1))
        os.close(fd)
        self.actor = _new_actor(num_cpus, options, self.token, self.marker)
        self._ref: Any = None
        self.placed = False  # an actor that never answered may be waiting for CPUs: close() does not wait on it

    def describe(self) -> str:
        actor_id = getattr(self.actor, "_actor_id", None)  # not public API: the id only helps to find logs
        return f"Ray actor {actor_id.hex()[:12]}" if actor_id is not None else "Ray actor"

    def dumps(self, payload: Any) -> bytes:
        # cloudpickle: factories sent to actors may be closures (results come back with plain pickle)
        return _ray().cloudpickle.dumps(payload)  # type: ignore[no-any-return]

    def send(self, op: str, data: bytes) -> None:
        self._ref = self.actor.serve.remote(op, data)

    def _culprit(self) -> int | None:
        if len(self.indices) == 1:
            return self.indices[0]
        with contextlib.suppress(OSError, struct.error), open(self.marker, "rb") as f:
            index: int = _MARK.unpack(f.read(_MARK.size))[0]
            return index if index >= 0 else None
        return None

    def receive(self, timeout: float | None = None) -> bytes:
        ray = _ray()
        try:
            frame: bytes = ray.get(self._ref, timeout=timeout)
            self.placed = True
            return frame
        except ray.exceptions.GetTimeoutError:
            raise HostDied(self._culprit(), f"no reply within {timeout:g}s", timed_out=True) from None
        except ray.exceptions.RayActorError as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HostDied(self._culprit(), detail) from None
        except ray.exceptions.RayTaskError as exc:  # serve() never raises; Ray itself failed the call
            return pickle.dumps(("err", portable(exc.as_instanceof_cause())))

    def build_timeout_error(self, timeout: float) -> Exception:
        total, available = _cluster_cpus()
        return PlacementError(
            f"Ray did not place {self.describe()} (envs {self.indices}, {self.num_cpus:g} CPUs) within "
            f"{timeout:g}s: the vector env needs {self.layout}; the cluster has {total:g} CPUs, "
            f"{available:g} free now. Lower num_cpus (make_vec(..., num_cpus=0.25) for light envs), "
            "leave envs_per_actor to pack envs by the free CPUs, free the cluster, add nodes, "
            "or raise placement_timeout"
        )

    def restart(self) -> None:
        _kill(self.actor)
        self._reap()
        with open(self.marker, "r+b") as f:
            f.write(_MARK.pack(-1))
        self.actor = _new_actor(self.num_cpus, self.options, self.token, self.marker)
        self.placed = False

    def _reap(self) -> None:
        with contextlib.suppress(Exception):  # what the envs started, on this node (the actor's own node does it too)
            kill_tagged(self.token)

    def close(self) -> list[BaseException]:
        errors: list[BaseException] = []
        if self.placed:
            with contextlib.suppress(Exception):
                errors = list(_ray().get(self.actor.shutdown.remote(None), timeout=30))
        _kill(self.actor)
        self._reap()
        with contextlib.suppress(OSError):
            os.unlink(self.marker)
        return errors


def _per_env(num_cpus: float | Sequence[float], n: int) -> list[float]:
    cpus = [float(num_cpus)] * n if isinstance(num_cpus, (int, float)) else [float(c) for c in num_cpus]
    if len(cpus) != n or any(c < 0 for c in cpus):
        raise ConfigError(f"num_cpus must be one non-negative number or one per env ({n}), got {num_cpus!r}")
    return cpus


def pack_envs(cpus: Sequence[float], free_cpus: float, envs_per_actor: int | None) -> list[list[int]]:
    """Env indices per actor: ``envs_per_actor`` each, or (``None``) as many actors as ``free_cpus`` hold.

    An actor serves its envs one after another, so it needs the most any of them needs, not the sum.
    """
    n = len(cpus)
    if envs_per_actor is None:
        need = max(cpus)
        actors = n if need == 0 else max(1, min(n, int(free_cpus / need + 1e-9)))
    else:
        actors = -(-n // envs_per_actor)
    return split_evenly(range(n), actors)


class RayVectorEnv(VectorEnv):
    """Runs every sub-env in Ray actors (``backend="ray"``).

    Connects to Ray first if needed (``address``, else ``RAY_ADDRESS``, else a local
    instance); the instance is left running at ``close()``, which kills only this vector
    env's actors. Seeds and autoreset are those of every other backend: the same root seed
    and actions replay the same episodes. See :class:`~gem_core.vector.VectorEnv`.

    Args:
        env_fns: One callable per sub-env; Ray serializes it (cloudpickle), so closures work,
            but the modules it uses must be importable on the cluster's nodes.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``.
        num_cpus: CPUs each env needs (one number, or one per env); ``make_vec`` takes it
            from the spec. An actor serves its envs one after another, so it reserves the
            most any of its envs needs.
        envs_per_actor: Envs sharing one actor: fewer remote calls per batch, but an actor's
            death costs all its envs their episodes. Default ``None``: as many actors as the
            cluster's free CPUs hold (at most one per env), the envs spread evenly over them.
        step_timeout: Seconds a ``step``/``reset`` may take; an actor that misses it is
            replaced and its envs fail with :class:`~gem_core.errors.EnvStepTimeout` (the one
            that was running) or :class:`~gem_core.errors.EnvWorkerCrashed`. ``None``: no limit.
        placement_timeout: Seconds to wait for the actors to be placed and built before
            :class:`~gem_core.errors.PlacementError`; ``None`` waits forever.
        actor_options: More ``ray.remote`` options for every actor (``resources``,
            ``runtime_env``, ``scheduling_strategy``...).
        address: Passed to ``ray.init`` when Ray is not initialized yet.

    Raises:
        ConfigError: Ray is not installed, or a bad argument.
        PlacementError: the actors were not placed within ``placement_timeout``.
        EnvWorkerCrashed: an actor died while building its envs.
        Exception: an env's constructor raised; the exception is raised as itself.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env | AsyncEnv]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        on_error: OnError = "raise",
        num_cpus: float | Sequence[float] = 1.0,
        envs_per_actor: int | None = None,
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
        step_timeout: float | None = None,
        placement_timeout: float | None = 120.0,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        if envs_per_actor is not None and envs_per_actor < 1:
            raise ConfigError(f"envs_per_actor must be >= 1, got {envs_per_actor}")
        check_timeout("step_timeout", step_timeout)
        check_timeout("placement_timeout", placement_timeout)
        cpus = _per_env(num_cpus, self.num_envs)
        _ensure_ray(address)
        parts = pack_envs(cpus, _cluster_cpus()[1], envs_per_actor)
        needs = [max(cpus[i] for i in part) for part in parts]
        layout = (
            f"{len(parts)} actors of {'/'.join(f'{c:g}' for c in sorted(set(needs)))} CPUs, {sum(needs):g} CPUs in all"
        )
        hosts: list[Host] = []
        try:
            for part, need in zip(parts, needs, strict=True):
                hosts.append(ActorHost(part, need, actor_options, layout))
        except BaseException:
            for host in hosts:
                host.close()
            raise
        group = HostedGroup(
            hosts,
            dict(enumerate(env_fns)),
            self.autoreset_mode,
            on_error,
            step_timeout=step_timeout,
            build_timeout=placement_timeout,
        )
        self._set_groups([group])
        self.actors = group.hosts


class RayEnv(AsyncEnv):
    """One env living in a Ray actor, driven as an :class:`~gem_core.AsyncEnv`.

    The actor starts at once; the env is built there, and a constructor error is raised by
    the first ``reset`` (the next ``reset`` builds the env again, in a new actor). Every
    result arrives correct or as a typed error whose message names the env id, the seed
    and the call:

    * the env raised: that exception, as itself;
    * its result breaks the ``reset``/``step`` contract, or does not pickle in the actor or
      unpickle here: :class:`~gem_core.errors.EnvResultError` (the actor is kept: it answered);
    * no reply within ``step_timeout``: :class:`~gem_core.errors.EnvStepTimeout`;
    * the actor died: :class:`~gem_core.errors.EnvWorkerCrashed`;
    * the awaiting task was cancelled (an ``asyncio`` timeout, a runner closing): the
      ``CancelledError`` goes on.

    In the last three cases the actor's state is unknown, so it is killed, never reused: a
    late reply of the abandoned call cannot be taken for a later call's. ``step`` then raises
    :class:`~gem_core.errors.EnvWorkerCrashed` until ``reset`` starts a new actor.

    Args:
        factory: Builds the env inside the actor.
        num_cpus: CPUs the actor reserves.
        actor_options: More ``ray.remote`` options.
        address: Passed to ``ray.init`` when Ray is not initialized yet.
        spec: The env's spec, if it came from the registry (for names in records and errors).
        step_timeout: Seconds a ``reset``/``step`` may take once the env is built; ``None``: no limit.
        placement_timeout: Seconds to wait for the actor to be placed and the env built before
            :class:`~gem_core.errors.PlacementError`; ``None`` waits forever.

    Raises:
        ConfigError: Ray is not installed, or a timeout is not a positive number of seconds.
    """

    def __init__(
        self,
        factory: Callable[[], Env | AsyncEnv],
        *,
        num_cpus: float = 1.0,
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
        spec: EnvSpec | None = None,
        step_timeout: float | None = None,
        placement_timeout: float | None = 120.0,
    ) -> None:
        check_timeout("step_timeout", step_timeout)
        check_timeout("placement_timeout", placement_timeout)
        _ensure_ray(address)
        self.spec = spec
        self.factory = factory
        self.num_cpus = num_cpus
        self.actor_options = actor_options
        self.step_timeout = step_timeout
        self.placement_timeout = placement_timeout
        self._seed: int | None = None
        self._start()

    def _start(self) -> None:
        self.token = uuid.uuid4().hex  # tags what the env starts, so killing the actor reaps it too
        self.actor = _new_actor(self.num_cpus, self.actor_options, self.token)
        self._opened: Any = self.actor.open.remote(self.factory)
        self._lost: str | None = None  # why the actor was discarded; None while it may be used

    def _where(self, phase: str) -> str:
        env_id = self.spec.id if self.spec is not None else "id unknown"
        seed = "seed unknown" if self._seed is None else f"seed {self._seed}"
        return f"RayEnv ({env_id}, {seed}, phase {phase})"

    def _discard(self, why: str) -> None:
        """Kill the actor and what its env started: its state is unknown, nothing may be read from it again."""
        self._lost = why
        _kill(self.actor)
        with contextlib.suppress(Exception):
            kill_tagged(self.token)

    async def _call(self, phase: str, method: str, *args: Any) -> Any:
        ray = _ray()
        where = self._where(phase)
        try:
            if self._opened is not None:
                opened, self._opened = self._opened, None
                try:
                    await asyncio.wait_for(opened, self.placement_timeout)
                except asyncio.TimeoutError:
                    self._discard("it was not placed in time")
                    raise self._placement_error(where) from None
            try:
                frame = await asyncio.wait_for(getattr(self.actor, method).remote(*args), self.step_timeout)
            except asyncio.TimeoutError:
                self._discard(f"its {phase} ran past step_timeout")
                raise EnvStepTimeout(
                    f"{where}: no reply within step_timeout={self.step_timeout:g}s; the actor was killed "
                    "(its late reply can never be read), reset() starts a new one"
                ) from None
        except ray.exceptions.RayActorError as exc:
            self._discard(f"it died in {phase}")
            raise EnvWorkerCrashed(
                f"{where}: the Ray actor died ({_first_line(exc)}); reset() starts a new one"
            ) from None
        except ray.exceptions.RayTaskError as exc:  # the env's constructor raised: the next reset builds it again
            self._discard("the env's constructor raised")
            raise exc.as_instanceof_cause() from None
        except asyncio.CancelledError:
            self._discard(f"a {phase} call was cancelled before its reply")
            raise
        return _unpack(frame, where, phase)

    def _placement_error(self, where: str) -> PlacementError:
        total, available = _cluster_cpus()
        return PlacementError(
            f"{where}: Ray did not place the actor ({self.num_cpus:g} CPUs) and build the env within "
            f"{self.placement_timeout:g}s; the cluster has {total:g} CPUs, {available:g} free now. Lower num_cpus, "
            "free the cluster, add nodes, or raise placement_timeout (also if the env's constructor is slow)"
        )

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        if self._lost is not None:
            self._start()
        self._seed = seed
        result: ResetReturn = await self._call("reset", "reset", seed, options)
        return result

    async def step(self, action: str) -> StepReturn:
        if self._lost is not None:
            raise EnvWorkerCrashed(
                f"{self._where('step')}: the Ray actor was discarded ({self._lost}); reset() starts a new one"
            )
        result: StepReturn = await self._call("step", "step", action)
        return result

    async def close(self) -> None:
        if self._lost is None:
            # an actor never placed has no env to close; one busy past 30 s is killed all the same
            placed = self._opened is None or bool(_ray().wait([self._opened], timeout=0)[0])
            if placed:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.actor.shutdown.remote(None), 30)
        self._discard("closed")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _frame(call: Callable[[], Any]) -> bytes:
    """The actor's reply: ``("ok", result)``, ``("raised", exception)`` or ``("unpicklable", why)``, pickled.

    Pickled here, not by Ray, so a result that cannot travel is told apart from a Ray failure.
    """
    try:
        result = call()
    except Exception as exc:
        return pickle.dumps(("raised", portable(exc)))
    try:
        return pickle.dumps(("ok", result))
    except Exception as exc:
        return pickle.dumps(("unpicklable", f"{type(exc).__name__}: {exc}"))


def _unpack(frame: bytes, where: str, phase: str) -> Any:
    """The result in an actor's reply (see :func:`_frame`), or the typed error naming what was wrong."""
    try:
        tag, value = pickle.loads(frame)
    except Exception as exc:
        raise EnvResultError(f"{where}: its result does not unpickle here ({type(exc).__name__}: {exc})") from None
    if tag == "raised":
        raise value
    if tag == "unpicklable":
        raise EnvResultError(f"{where}: its result does not pickle, so it cannot leave the actor ({value})")
    problem = step_result_problem(value) if phase == "step" else reset_result_problem(value)
    if problem is not None:
        raise EnvResultError(f"{where}: {problem}")
    return value


def ray_env_factory(
    env_id: str,
    *,
    wrappers: Sequence[Any] = (),
    num_cpus: float | None = None,
    actor_options: dict[str, Any] | None = None,
    step_timeout: float | None = None,
    placement_timeout: float | None = 120.0,
    **kwargs: Any,
) -> Callable[[], RayEnv]:
    r"""A factory of :class:`RayEnv`\\ s of a registered env, for the episode runner and other env consumers.

    The id is looked up here (an unknown id fails now); each env is built inside its actor
    by ``make``'s rules, with wrapper names resolved in the actor's own registry.

    Args:
        env_id: A registered id.
        wrappers: Wrappers applied to each env, outside the spec's own.
        num_cpus: CPUs per env; default the spec's ``num_cpus``.
        actor_options: More ``ray.remote`` options.
        step_timeout: Seconds each ``reset``/``step`` may take (see :class:`RayEnv`); ``None``: no limit.
        placement_timeout: Seconds to place each actor and build its env (see :class:`RayEnv`).
        **kwargs: Constructor kwargs (over the spec's defaults).

    Raises:
        EnvNotFound: ``env_id`` is not registered.
        ConfigError: A timeout is not a positive number of seconds.
    """
    from gem_core.plugins import get_registry
    from gem_core.vector.building import build_env

    spec, _ = get_registry().resolve(env_id)
    build = functools.partial(build_env, spec, kwargs, tuple(wrappers))
    cpus = spec.num_cpus if num_cpus is None else num_cpus
    check_timeout("step_timeout", step_timeout)  # now, not in the first env the consumer builds
    check_timeout("placement_timeout", placement_timeout)
    return functools.partial(
        RayEnv,
        build,
        num_cpus=cpus,
        actor_options=actor_options,
        spec=spec,
        step_timeout=step_timeout,
        placement_timeout=placement_timeout,
    )
