"""The Ray backend: sub-envs in Ray actors, on a Ray cluster or a local Ray instance.

Needs the ``ray`` extra (``pip install 'gem-core[ray]'``). Envs are placed wherever
``ray.init`` connects: an existing cluster (``ray.init(address="ray://head:10001")``, or
``RAY_ADDRESS``), or a local instance that Ray starts. Each actor reserves the CPUs its
envs need (``num_cpus`` per env, from the spec). A batch costs one remote call per actor.
An actor that dies (``ray.kill``, a crash, a lost node) is replaced and only its envs lose
their episodes (see :mod:`gem_core.vector.hosted`).

:class:`RayEnv` is a single env in an actor behind the :class:`~gem_core.AsyncEnv`
interface, for code that takes envs rather than vector envs, such as the episode runner:
``EpisodeRunner(ray_env_factory("game:Sudoku-v0-easy"), policy=...)``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, to_sync
from gem_core.errors import ConfigError, EnvWorkerCrashed
from gem_core.registry import EnvSpec
from gem_core.vector.base import VectorEnv
from gem_core.vector.hosted import Host, HostDied, HostedGroup, MemberHost
from gem_core.vector.member import AutoresetMode, OnError, portable
from gem_core.vector.process import split_evenly

__all__ = ["RayEnv", "RayVectorEnv", "ray_env_factory"]


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
    """Runs inside a Ray actor: the members of a vector env, or one raw env for :class:`RayEnv`."""

    def __init__(self) -> None:
        self.host = MemberHost()
        self.env: Env | None = None

    def build(self, specs: Any) -> list[BaseException | None]:
        return self.host.build(specs)

    def run(self, items: Any) -> Any:
        return self.host.run(items)

    def shutdown(self, _: Any = None) -> list[BaseException]:
        errors = self.host.close()
        if self.env is not None:
            try:
                self.env.close()
            except Exception as exc:
                errors.append(portable(exc))
        return errors

    def open(self, factory: Callable[[], Env | AsyncEnv]) -> None:
        self.env = to_sync(factory())

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> ResetReturn:
        assert self.env is not None
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> StepReturn:
        assert self.env is not None
        return self.env.step(action)


@functools.cache
def _actor_class() -> Any:
    return _ray().remote(_EnvActor)


def _new_actor(num_cpus: float, options: dict[str, Any] | None) -> Any:
    # max_restarts=0: a dead actor is replaced by us, with its envs rebuilt from their factories
    return _actor_class().options(**{"num_cpus": num_cpus, "max_restarts": 0, **(options or {})}).remote()


def _kill(actor: Any) -> None:
    with contextlib.suppress(Exception):
        _ray().kill(actor, no_restart=True)


class ActorHost(Host):
    """One Ray actor holding some envs of a vector env."""

    def __init__(self, indices: Sequence[int], num_cpus: float, options: dict[str, Any] | None = None) -> None:
        super().__init__(indices)
        self.num_cpus = num_cpus
        self.options = options
        self.actor = _new_actor(num_cpus, options)
        self._ref: Any = None

    def describe(self) -> str:
        actor_id = getattr(self.actor, "_actor_id", None)  # not public API: the id only helps to find logs
        return f"Ray actor {actor_id.hex()[:12]}" if actor_id is not None else "Ray actor"

    def send(self, op: str, payload: Any) -> None:
        self._ref = getattr(self.actor, op).remote(payload)

    def receive(self) -> Any:
        ray = _ray()
        try:
            return ray.get(self._ref)
        except ray.exceptions.RayActorError as exc:
            culprit = self.indices[0] if len(self.indices) == 1 else None
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HostDied(culprit, detail) from None
        except ray.exceptions.RayTaskError as exc:  # the actor method itself raised
            raise exc.as_instanceof_cause() from None

    def restart(self) -> None:
        _kill(self.actor)
        self.actor = _new_actor(self.num_cpus, self.options)

    def close(self) -> list[BaseException]:
        errors: list[BaseException] = []
        with contextlib.suppress(Exception):
            errors = list(_ray().get(self.actor.shutdown.remote(None), timeout=30))
        _kill(self.actor)
        return errors


def _per_env(num_cpus: float | Sequence[float], n: int) -> list[float]:
    cpus = [float(num_cpus)] * n if isinstance(num_cpus, (int, float)) else [float(c) for c in num_cpus]
    if len(cpus) != n or any(c < 0 for c in cpus):
        raise ConfigError(f"num_cpus must be one non-negative number or one per env ({n}), got {num_cpus!r}")
    return cpus


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
        num_cpus: CPUs each env reserves (one number, or one per env); ``make_vec`` takes it
            from the spec. An actor reserves the sum over its envs.
        envs_per_actor: Envs sharing one actor: fewer remote calls per batch, but an actor's
            death costs all its envs their episodes. Default 1.
        actor_options: More ``ray.remote`` options for every actor (``resources``,
            ``runtime_env``, ``scheduling_strategy``...).
        address: Passed to ``ray.init`` when Ray is not initialized yet.

    Raises:
        ConfigError: Ray is not installed, or a bad argument.
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
        envs_per_actor: int = 1,
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        if envs_per_actor < 1:
            raise ConfigError(f"envs_per_actor must be >= 1, got {envs_per_actor}")
        cpus = _per_env(num_cpus, self.num_envs)
        _ensure_ray(address)
        hosts: list[Host] = []
        try:
            n_actors = -(-self.num_envs // envs_per_actor)
            for part in split_evenly(range(self.num_envs), n_actors):
                hosts.append(ActorHost(part, sum(cpus[i] for i in part), actor_options))
        except BaseException:
            for host in hosts:
                host.close()
            raise
        group = HostedGroup(hosts, dict(enumerate(env_fns)), self.autoreset_mode, on_error)
        self._set_groups([group])
        self.actors = group.hosts


class RayEnv(AsyncEnv):
    """One env living in a Ray actor, driven as an :class:`~gem_core.AsyncEnv`.

    The actor starts at once; the env is built there, and a constructor error is raised by
    the first ``reset``. If the actor dies, the call in flight raises
    :class:`~gem_core.errors.EnvWorkerCrashed` and the next ``reset`` starts a new actor.

    Args:
        factory: Builds the env inside the actor.
        num_cpus: CPUs the actor reserves.
        actor_options: More ``ray.remote`` options.
        address: Passed to ``ray.init`` when Ray is not initialized yet.
        spec: The env's spec, if it came from the registry (for names in records).
    """

    def __init__(
        self,
        factory: Callable[[], Env | AsyncEnv],
        *,
        num_cpus: float = 1.0,
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
        spec: EnvSpec | None = None,
    ) -> None:
        _ensure_ray(address)
        self.spec = spec
        self.factory = factory
        self.num_cpus = num_cpus
        self.actor_options = actor_options
        self._start()

    def _start(self) -> None:
        self.actor = _new_actor(self.num_cpus, self.actor_options)
        self._opened: Any = self.actor.open.remote(self.factory)
        self._dead = False

    async def _call(self, ref: Any) -> Any:
        ray = _ray()
        try:
            if self._opened is not None:
                opened, self._opened = self._opened, None
                await opened
            return await ref
        except ray.exceptions.RayActorError as exc:
            self._dead = True
            raise EnvWorkerCrashed(
                f"the Ray actor of {self!r} died ({type(exc).__name__}); reset() starts a new one"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        if self._dead:
            _kill(self.actor)
            self._start()
        result: ResetReturn = await self._call(self.actor.reset.remote(seed, options))
        return result

    async def step(self, action: str) -> StepReturn:
        if self._dead:
            raise EnvWorkerCrashed(f"the Ray actor of {self!r} died; reset() starts a new one")
        result: StepReturn = await self._call(self.actor.step.remote(action))
        return result

    async def close(self) -> None:
        actor, self._dead = self.actor, True
        with contextlib.suppress(Exception):
            await actor.shutdown.remote(None)
        _kill(actor)


def ray_env_factory(
    env_id: str,
    *,
    wrappers: Sequence[Any] = (),
    num_cpus: float | None = None,
    actor_options: dict[str, Any] | None = None,
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
        **kwargs: Constructor kwargs (over the spec's defaults).
    """
    from gem_core.plugins import get_registry
    from gem_core.vector.make import build_env

    spec, _ = get_registry().resolve(env_id)
    build = functools.partial(build_env, spec, kwargs, tuple(wrappers))
    cpus = spec.num_cpus if num_cpus is None else num_cpus
    return functools.partial(RayEnv, build, num_cpus=cpus, actor_options=actor_options, spec=spec)
