"""Wrappers: bases with explicit forwarding, chat history, episode statistics, limits.

The built-in wrappers are registered by name (``"chat"``, ``"episode_stats"``,
``"max_turns"``, ``"time_limit"``) so specs and ``make(id, wrappers=[...])`` can use
them; each name picks the sync or async class to match the env.
"""

from __future__ import annotations

from gem_core.wrappers.base import (
    ActionWrapper,
    AsyncWrapper,
    ObservationWrapper,
    RewardWrapper,
    Wrapper,
    WrapperHooks,
    dispatch_wrapper,
)
from gem_core.wrappers.chat import CHAT_MODES, AsyncChatHistory, ChatHistory, ChatTokenizer, Conversation, Message
from gem_core.wrappers.limits import AsyncTimeLimit, TimeLimit
from gem_core.wrappers.stats import AsyncEpisodeStatistics, EpisodeStatistics

__all__ = [
    "CHAT_MODES",
    "ActionWrapper",
    "AsyncChatHistory",
    "AsyncEpisodeStatistics",
    "AsyncTimeLimit",
    "AsyncWrapper",
    "ChatHistory",
    "ChatTokenizer",
    "Conversation",
    "EpisodeStatistics",
    "Message",
    "ObservationWrapper",
    "RewardWrapper",
    "TimeLimit",
    "Wrapper",
    "WrapperHooks",
    "chat_history",
    "dispatch_wrapper",
    "episode_statistics",
    "time_limit",
]

#: Registered factories: ``factory(env, **kwargs)`` picks the sync or async class.
chat_history = dispatch_wrapper(ChatHistory, AsyncChatHistory)
episode_statistics = dispatch_wrapper(EpisodeStatistics, AsyncEpisodeStatistics)
time_limit = dispatch_wrapper(TimeLimit, AsyncTimeLimit)
