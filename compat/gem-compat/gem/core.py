"""GEM's ``gem.core``: :class:`Env` and :class:`EnvWrapper`, as gem_core classes."""

from __future__ import annotations

import functools
import inspect
import random
from typing import Any

import numpy as np

import gem_core
from gem.wrappers.observation_wrapper import ObservationWrapper  # GEM exports it from gem.core
from gem_core.wrappers import Wrapper

__all__ = ["Env", "EnvWrapper", "ObservationWrapper"]


class Env(gem_core.Env):
    """A GEM env: a :class:`gem_core.Env` whose ``reset`` takes the seed positionally, as GEM's does.

    ``super().reset(seed)`` seeds ``self.np_random``/``self.py_random`` (gem_core's contract)
    and, as GEM 0.1 does, the process-global ``random`` and ``numpy.random`` states, so GEM-era
    envs that draw from the global RNGs stay reproducible. Such envs fail gem_core's
    ``check_env`` global-RNG check until they draw from ``self.np_random`` instead.

    A subclass whose ``reset`` takes no ``options`` (GEM's ``reset(seed=None, idx=None)``) gets
    the entries of gem_core's ``options`` dict as keyword arguments.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        reset = cls.__dict__.get("reset")
        if reset is None:
            return
        params = inspect.signature(reset).parameters.values()
        if any(p.name == "options" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return

        # A GEM-era reset(seed=None, idx=None) takes no ``options``, but gem_core's vector envs and
        # runner pass one: its entries become keyword arguments (GEM's per-env reset kwargs).
        @functools.wraps(reset)
        def reset_with_options(
            self: Env, seed: int | None = None, options: dict[str, Any] | None = None, **kw: Any
        ) -> Any:
            return reset(self, seed, **{**(options or {}), **kw})

        cls.reset = reset_with_options  # type: ignore[method-assign]

    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Seed the env's RNGs (and, like GEM, the global ones) when ``seed`` is given."""
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed % 2**32)
        return super().reset(seed=seed, options=options)


class EnvWrapper(Wrapper):
    """GEM's wrapper base. Attributes of the inner env are read through on every access.

    GEM's ``EnvWrapper`` copied the inner env's public attributes once, at construction (so
    they went stale after ``reset``); here ``wrapper.attr`` falls through to the inner env
    each time it is read.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)
