"""GEM's ``ToolEnvWrapper`` with GEM's arguments, on gem-core's tool wrapper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_core.tools import Tool
from gem_core.tools import ToolEnvWrapper as _CoreToolEnvWrapper

__all__ = ["ToolEnvWrapper"]


class ToolEnvWrapper(_CoreToolEnvWrapper):
    """``ToolEnvWrapper(env, tools, tool_reward, tool_success_reward, tool_execute_error_reward, max_tool_uses)``.

    GEM's reward names map onto gem-core's ``call_reward``, ``success_reward`` and
    ``error_reward``; ``max_tool_uses`` is ``max_tool_calls``. ``tools`` are tool objects
    (or registered tool names). Other gem-core options pass through as keywords.
    """

    def __init__(
        self,
        env: Any,
        tools: Sequence[Tool | str],
        tool_reward: float = 0.0,
        tool_success_reward: float = 0.0,
        tool_execute_error_reward: float = 0.0,
        max_tool_uses: int = 10,
        **config: Any,
    ) -> None:
        super().__init__(
            env,
            list(tools),
            call_reward=tool_reward,
            success_reward=tool_success_reward,
            error_reward=tool_execute_error_reward,
            max_tool_calls=max_tool_uses,
            **config,
        )
