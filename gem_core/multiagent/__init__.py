"""Multi-agent text envs: agents in turn or all at once, per-agent text, rewards and flags (docs/multiagent.md).

Import what you need from here; nothing heavy is imported (PettingZoo only by
:mod:`gem_core.multiagent.pettingzoo`'s functions, when called).
"""

from __future__ import annotations

from gem_core.multiagent.checks import check_multiagent_env
from gem_core.multiagent.core import MultiAgentEnv, MultiResetReturn, MultiStepReturn, ParallelEnv, TurnBasedEnv
from gem_core.multiagent.seat import SeatEnv, SeatPolicy
from gem_core.multiagent.vector import SyncMultiAgentVectorEnv
from gem_core.multiagent.wrappers import (
    MultiAgentChatHistory,
    MultiAgentEpisodeStatistics,
    MultiAgentTimeLimit,
    MultiAgentWrapper,
)

__all__ = [
    "MultiAgentChatHistory",
    "MultiAgentEnv",
    "MultiAgentEpisodeStatistics",
    "MultiAgentTimeLimit",
    "MultiAgentWrapper",
    "MultiResetReturn",
    "MultiStepReturn",
    "ParallelEnv",
    "SeatEnv",
    "SeatPolicy",
    "SyncMultiAgentVectorEnv",
    "TurnBasedEnv",
    "check_multiagent_env",
]
