"""Turn and wall-clock limits that truncate an episode."""

from __future__ import annotations

import time
from typing import Any

from gem_core.core import ResetReturn, StepReturn
from gem_core.errors import ConfigError
from gem_core.multimodal import Observation
from gem_core.wrappers.base import AsyncWrapper, Wrapper, WrapperHooks

__all__ = ["AsyncTimeLimit", "TimeLimit"]


class _TimeLimitHooks(WrapperHooks):
    def __init__(self, env: Any, max_turns: int | None = None, max_seconds: float | None = None) -> None:
        super().__init__(env)  # type: ignore[call-arg]  # Wrapper or AsyncWrapper, next in the MRO
        if max_turns is None and max_seconds is None:
            raise ConfigError("TimeLimit needs max_turns or max_seconds (or both)")
        if max_turns is not None and max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if max_seconds is not None and max_seconds <= 0:
            raise ConfigError(f"max_seconds must be > 0, got {max_seconds}")
        self.max_turns = max_turns
        self.max_seconds = max_seconds
        self.turns = 0
        self._started = time.monotonic()

    def _on_reset(self, obs: Observation, info: dict[str, Any]) -> ResetReturn:
        self.turns = 0
        self._started = time.monotonic()
        return obs, info

    def _on_step(self, result: StepReturn) -> StepReturn:
        obs, reward, terminated, truncated, info = result
        self.turns += 1
        over_turns = self.max_turns is not None and self.turns >= self.max_turns
        over_time = self.max_seconds is not None and time.monotonic() - self._started >= self.max_seconds
        # a terminal step stays terminal: truncation only means "cut short", never "also ended"
        if (over_turns or over_time) and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info


_LIMIT_DOC = """Truncates an episode after ``max_turns`` steps or ``max_seconds`` of wall time.

    On the step that reaches a limit, ``truncated`` becomes ``True`` unless the env
    terminated on that same step (a terminal step keeps ``terminated=True`` and the
    env's own ``truncated``). Registered as ``"max_turns"`` and ``"time_limit"``.

    Args:
        env: The env to wrap.
        max_turns: Steps per episode; ``None`` for no turn limit.
        max_seconds: Wall-clock seconds since ``reset``, checked after each step.

    Raises:
        ConfigError: neither limit given, or a limit is not positive.
    """


class TimeLimit(_TimeLimitHooks, Wrapper):
    __doc__ = _LIMIT_DOC


class AsyncTimeLimit(_TimeLimitHooks, AsyncWrapper):
    __doc__ = _LIMIT_DOC
