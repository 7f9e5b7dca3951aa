"""Episode statistics, reported in the final step's ``info["episode"]``."""

from __future__ import annotations

import time
from typing import Any

from gem_core.core import ResetReturn, StepReturn
from gem_core.multimodal import Observation
from gem_core.wrappers.base import AsyncWrapper, Wrapper, WrapperHooks

__all__ = ["AsyncEpisodeStatistics", "EpisodeStatistics"]


class _EpisodeStatisticsHooks(WrapperHooks):
    def __init__(self, env: Any) -> None:
        super().__init__(env)  # type: ignore[call-arg]  # Wrapper or AsyncWrapper, next in the MRO
        self._clear()

    def _clear(self) -> None:
        self.episode_return = 0.0
        self.episode_length = 0
        self.episode_tool_calls = 0
        self._started = time.perf_counter()

    def _on_reset(self, obs: Observation, info: dict[str, Any]) -> ResetReturn:
        self._clear()
        return obs, info

    def _on_step(self, result: StepReturn) -> StepReturn:
        obs, reward, terminated, truncated, info = result
        self.episode_return += float(reward)
        self.episode_length += 1
        self.episode_tool_calls += int(info.get("tool_calls", 0) or 0)
        if terminated or truncated:
            info = {
                **info,
                "episode": {
                    "return": self.episode_return,
                    "length": self.episode_length,
                    "tool_calls": self.episode_tool_calls,
                    "success": bool(info.get("success", False)),
                    "elapsed_s": time.perf_counter() - self._started,
                },
            }
        return obs, reward, terminated, truncated, info


_STATS_DOC = """Adds ``info["episode"]`` on the step that ends an episode.

    The dict holds ``return`` (sum of rewards), ``length`` (steps), ``tool_calls`` (sum of
    the steps' ``info["tool_calls"]``), ``success`` (the final step's ``info["success"]``,
    ``False`` when absent) and ``elapsed_s`` (wall time since ``reset``). The running
    values are readable on the wrapper as ``episode_return``, ``episode_length`` and
    ``episode_tool_calls``.
    """


class EpisodeStatistics(_EpisodeStatisticsHooks, Wrapper):
    __doc__ = _STATS_DOC


class AsyncEpisodeStatistics(_EpisodeStatisticsHooks, AsyncWrapper):
    __doc__ = _STATS_DOC
