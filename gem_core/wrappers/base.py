"""Wrapper bases: explicit forwarding, and one override point per kind.

A wrapper holds the env it wraps in ``self.env`` and forwards ``reset``/``step``/``close``
to it on every call. Nothing is copied from the inner env at construction (GEM's
``EnvWrapper`` snapshots attributes, which go stale after ``reset``): properties such as
:attr:`Wrapper.spec` and :attr:`Wrapper.np_random` read the inner env each time, and any
other inner attribute is reached with :meth:`Wrapper.get_wrapper_attr`.

Wrapper logic lives in three hooks shared by the sync and async bases, so one
behaviour is written once and works around both :class:`~gem_core.Env` and
:class:`~gem_core.AsyncEnv`:

* ``_on_reset(obs, info) -> (obs, info)``
* ``_on_action(action) -> action``
* ``_on_step((obs, reward, terminated, truncated, info)) -> same shape``

Every wrapper tracks its episode: ``step`` before ``reset``, or after a step that returned
``terminated`` or ``truncated``, raises :class:`~gem_core.errors.ResetNeeded` without
reaching the hooks or the inner env. It is the check every env built by ``gem_core.make`` has
(:func:`gem_core.core.enforce_episode_order`), always on for wrappers: it is added to each
subclass's ``step`` and ``reset`` when the class is defined, so a wrapper that overrides them
(the tool wrapper runs tool calls without stepping its env) cannot forget it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, ends_episode
from gem_core.multimodal import Observation

if TYPE_CHECKING:
    from gem_core.registry import EnvSpec

__all__ = [
    "ActionWrapper",
    "AsyncWrapper",
    "ObservationWrapper",
    "RewardWrapper",
    "Wrapper",
    "WrapperHooks",
    "dispatch_wrapper",
    "ends_episode",
]


class WrapperHooks:
    """The three override points shared by :class:`Wrapper` and :class:`AsyncWrapper`."""

    def _on_reset(self, obs: Observation, info: dict[str, Any]) -> ResetReturn:
        return obs, info

    def _on_action(self, action: str) -> str:
        return action

    def _on_step(self, result: StepReturn) -> StepReturn:
        return result


def _find_attr(outer: Any, name: str) -> Any:
    layer = outer
    while True:
        if name in vars(layer) or hasattr(type(layer), name):
            return getattr(layer, name)
        inner = vars(layer).get("env")
        if inner is None:
            chain = " -> ".join(type(x).__name__ for x in _layers(outer))
            raise AttributeError(f"no layer of {chain} has an attribute {name!r}")
        layer = inner


def _layers(outer: Any) -> list[Any]:
    out = [outer]
    while "env" in vars(out[-1]):
        out.append(vars(out[-1])["env"])
    return out


class _Forwarding:
    """Reads that always go to the wrapped env (never a snapshot)."""

    env: Any
    #: Every wrapper checks the episode order (gem_core.core's check, always on here).
    _gem_enforce_order: bool = True

    @property
    def spec(self) -> EnvSpec | None:
        """The inner env's spec."""
        spec: EnvSpec | None = self.env.spec
        return spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self.env.spec = value

    @property
    def np_random(self) -> np.random.Generator:
        """The inner env's numpy Generator."""
        rng: np.random.Generator = self.env.np_random
        return rng

    @property
    def py_random(self) -> random.Random:
        """The inner env's ``random.Random``."""
        rng: random.Random = self.env.py_random
        return rng

    @property
    def seed_used(self) -> int | None:
        """The inner env's seed."""
        seed: int | None = self.env.seed_used
        return seed

    def sample_random_action(self) -> str:
        action: str = self.env.sample_random_action()
        return action

    def get_wrapper_attr(self, name: str) -> Any:
        """Return ``name`` from the outermost layer (this wrapper or an inner env) that has it.

        Raises:
            AttributeError: no layer has it; the message lists the layers.
        """
        return _find_attr(self, name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        """Set ``name`` on the outermost layer that has it (this wrapper if none does)."""
        for layer in _layers(self):
            if name in vars(layer) or hasattr(type(layer), name):
                setattr(layer, name, value)
                return
        setattr(self, name, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"


class Wrapper(_Forwarding, WrapperHooks, Env):
    """Base of sync wrappers: forwards every call to ``self.env`` through the hooks.

    Args:
        env: The sync env to wrap.

    Raises:
        TypeError: ``env`` is not an :class:`~gem_core.Env` (wrap an ``AsyncEnv`` with an
            :class:`AsyncWrapper`, or use the registered wrapper name, which picks the right one).
    """

    env: Env

    def __init__(self, env: Env) -> None:
        if not isinstance(env, Env):
            raise TypeError(
                f"{type(self).__name__} wraps a gem_core.Env, got {type(env).__name__}; "
                "for an AsyncEnv use the async variant (or make(..., wrappers=[name]), which picks it)"
            )
        self.env = env

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._on_reset(obs, info)

    def step(self, action: str) -> StepReturn:
        return self._on_step(self.env.step(self._on_action(action)))

    def close(self) -> None:
        self.env.close()

    @property
    def unwrapped(self) -> Env:
        """The innermost env."""
        return self.env.unwrapped


class AsyncWrapper(_Forwarding, WrapperHooks, AsyncEnv):
    """Base of async wrappers: like :class:`Wrapper`, around an :class:`~gem_core.AsyncEnv`."""

    env: AsyncEnv

    def __init__(self, env: AsyncEnv) -> None:
        if not isinstance(env, AsyncEnv):
            raise TypeError(f"{type(self).__name__} wraps a gem_core.AsyncEnv, got {type(env).__name__}")
        self.env = env

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        obs, info = await self.env.reset(seed=seed, options=options)
        return self._on_reset(obs, info)

    async def step(self, action: str) -> StepReturn:
        return self._on_step(await self.env.step(self._on_action(action)))

    async def close(self) -> None:
        await self.env.close()

    @property
    def unwrapped(self) -> AsyncEnv:
        """The innermost env."""
        return self.env.unwrapped


class ObservationWrapper(Wrapper):
    """Transforms every observation (reset and step) with :meth:`observation`."""

    def observation(self, obs: Observation) -> Observation:
        """Return the transformed observation."""
        raise NotImplementedError(f"{type(self).__name__} must implement observation(obs)")

    def _on_reset(self, obs: Observation, info: dict[str, Any]) -> ResetReturn:
        return self.observation(obs), info

    def _on_step(self, result: StepReturn) -> StepReturn:
        obs, reward, terminated, truncated, info = result
        return self.observation(obs), reward, terminated, truncated, info


class ActionWrapper(Wrapper):
    """Transforms every action with :meth:`action` before the env sees it."""

    def action(self, action: str) -> str:
        """Return the action to pass to the inner env."""
        raise NotImplementedError(f"{type(self).__name__} must implement action(action)")

    def _on_action(self, action: str) -> str:
        return self.action(action)


class RewardWrapper(Wrapper):
    """Transforms every step reward with :meth:`reward`."""

    def reward(self, reward: float) -> float:
        """Return the transformed reward."""
        raise NotImplementedError(f"{type(self).__name__} must implement reward(reward)")

    def _on_step(self, result: StepReturn) -> StepReturn:
        obs, reward, terminated, truncated, info = result
        return obs, self.reward(reward), terminated, truncated, info


def dispatch_wrapper(sync_cls: type[Wrapper], async_cls: type[AsyncWrapper]) -> Callable[..., Env | AsyncEnv]:
    """A factory ``(env, **kwargs) -> wrapped`` that picks the sync or async class by the env's kind.

    Registered wrapper names point at such factories, so ``make(id, wrappers=["chat"])``
    works for sync and async envs alike.
    """

    def factory(env: Env | AsyncEnv, **kwargs: Any) -> Env | AsyncEnv:
        if isinstance(env, AsyncEnv):
            return async_cls(env, **kwargs)
        return sync_cls(env, **kwargs)

    factory.__name__ = sync_cls.__name__
    factory.__doc__ = sync_cls.__doc__
    # the registry validates kwargs through config_model when the factory carries one
    config_model = getattr(sync_cls, "config_model", None)
    if config_model is not None:
        factory.config_model = config_model  # type: ignore[attr-defined]
    return factory
