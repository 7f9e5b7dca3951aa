"""The tool wrapper: gives any env's agent tools it calls from inside its responses.

``ToolEnvWrapper`` adds the tools' instructions (and JSON schemas) to the first observation.
On each step it looks for tool calls in the response (both syntaxes of
:mod:`gem_core.tools.parsing`); when there are some it runs them, concurrently, and returns
their results as the next observation, without stepping the inner env. A response without
calls goes to the inner env. See ``docs/tools.md``.

It builds on :class:`gem_core.wrappers.base.Wrapper` (spec, RNGs, ``unwrapped`` and
``get_wrapper_attr`` read through to the inner env).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.errors import ConfigError, InvalidAction, ToolError
from gem_core.loop import LoopThread
from gem_core.multimodal import add_text
from gem_core.registry import format_config_error
from gem_core.tools.base import Tool, ToolCall, ToolResult
from gem_core.tools.parsing import MalformedCall, ParsedResponse, Syntax, parse_tool_calls
from gem_core.tools.safety import UnsafeValue, clean_arguments, clean_text
from gem_core.wrappers.base import Wrapper

__all__ = ["ToolEnvWrapper", "ToolWrapperConfig"]


class ToolWrapperConfig(BaseModel):
    r"""Settings of :class:`ToolEnvWrapper` (validated; errors name the field).

    Attributes:
        tools: Tools to offer: registered names (built with ``gem_core.make_tool``) or instances.
        max_tool_calls: Tool calls allowed per episode. Once used up, responses go to the env.
        max_calls_per_turn: Calls run from one response; later ones are skipped with a note.
        syntax: Call syntaxes understood (and explained in the instructions).
        answer_pattern: Regex that marks a final answer (e.g. ``r"\\boxed\{"``). When a response
            holds both calls and a match, ``answer_with_calls`` decides what happens.
        answer_with_calls: ``"both"``: run the calls, then pass the response to the env (its
            observation follows the tool results; the episode can end). ``"env"``: pass it to the
            env without running the calls. ``"tools"``: run the calls and ignore the answer.
        call_reward: Reward per executed call.
        success_reward: Extra reward per call that succeeded.
        error_reward: Reward per failed or malformed call (usually <= 0).
        instructions: Add the tools' instructions to the first observation.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    tools: Sequence[Union[str, Tool]] = Field(min_length=1)
    max_tool_calls: int = Field(10, ge=0)
    max_calls_per_turn: int = Field(4, ge=1)
    syntax: Syntax = "both"
    answer_pattern: str | None = None
    answer_with_calls: Literal["both", "env", "tools"] = "both"
    call_reward: float = 0.0
    success_reward: float = 0.0
    error_reward: float = 0.0
    instructions: bool = True

    @field_validator("answer_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


class ToolEnvWrapper(Wrapper):
    """Lets the agent call tools; tool results come back as observations.

    Args:
        env: The env to wrap (a sync :class:`~gem_core.Env`; wrap an ``AsyncEnv`` with ``to_sync``).
            Anything else raises ``TypeError``.
        tools: Tool names or instances (see :class:`ToolWrapperConfig`); tools built here from
            names are closed by :meth:`close`, instances passed in are left to their owner.
        **config: The other fields of :class:`ToolWrapperConfig`.

    Raises:
        ConfigError: a setting is invalid (the message names it) or two tools share a name.

    Per step ``info`` gets ``tool_calls`` (calls executed this step, the reserved key that
    episode statistics sum). Tool steps also set ``tool_results`` (one dict per call) and
    ``observation_role = "tool"`` so chat formatting can use the tool role.
    """

    config_model: ClassVar[type[BaseModel]] = ToolWrapperConfig

    def __init__(self, env: Env, tools: Sequence[str | Tool], **config: Any) -> None:
        super().__init__(env)
        self.tools: dict[str, Tool] = {}
        try:
            self.config = ToolWrapperConfig.model_validate({"tools": list(tools), **config})
        except ValidationError as exc:
            raise ConfigError(format_config_error("ToolEnvWrapper configuration", exc)) from exc
        self._owned: list[Tool] = []
        for item in self.config.tools:
            tool = self._build(item) if isinstance(item, str) else item
            if tool.name in self.tools:
                raise ConfigError(f"two tools are named {tool.name!r}; tool names must be unique")
            self.tools[tool.name] = tool
        self._answer = re.compile(self.config.answer_pattern) if self.config.answer_pattern else None
        self._loop = LoopThread("gem-tools")
        self.calls_used = 0
        self.turn_calls: list[int] = []

    def _build(self, name: str) -> Tool:
        from gem_core.api import make_tool  # late: the registry loads plugins

        tool = make_tool(name)
        if not isinstance(tool, Tool):
            raise ConfigError(f"tool {name!r} built a {type(tool).__name__}, not a gem_core.tools.Tool")
        self._owned.append(tool)
        return tool

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        obs, info = self.env.reset(seed=seed, options=options)
        self.calls_used = 0
        self.turn_calls = []
        info = {**info, "tools": [tool.schema() for tool in self.tools.values()]}
        if self.config.instructions:
            obs = add_text(obs, after=f"\n\n{self.instructions()}")
        return obs, info

    def instructions(self) -> str:
        """The text added to the first observation: how to call each tool, and the limits."""
        cfg = self.config
        lines = ["You can use these tools:"]
        lines += [tool.instructions() for tool in self.tools.values()] if cfg.syntax != "json" else []
        if cfg.syntax != "tag":
            lines.append(
                'Call a tool by writing <tool_call>{"name": <tool name>, "arguments": <arguments object>}</tool_call>. '
                "The tools' signatures:"
            )
            lines.append("<tools>")
            lines += [json.dumps(tool.schema()) for tool in self.tools.values()]
            lines.append("</tools>")
        lines.append(
            f"You may make up to {cfg.max_tool_calls} tool calls in this episode, at most "
            f"{cfg.max_calls_per_turn} per response. Each result comes back in <tool_response> tags."
        )
        return "\n".join(lines)

    def step(self, action: str) -> StepReturn:
        # step before reset or after the final answer raises ResetNeeded (the Wrapper base's guard), so no
        # tool runs against an env whose episode is over
        if not isinstance(action, str):
            raise InvalidAction(
                f"the action must be the model's response as a str, got {type(action).__name__}; "
                "this turn did not count"
            )
        budget = self.config.max_tool_calls - self.calls_used
        parsed = parse_tool_calls(action, self.tools, syntax=self.config.syntax) if budget > 0 else ParsedResponse()
        has_answer = self._answer is not None and self._answer.search(action) is not None
        if not parsed or (has_answer and self.config.answer_with_calls == "env"):
            return self._env_step(action, calls=0)
        items = parsed.items
        run, skipped = (
            items[: min(budget, self.config.max_calls_per_turn)],
            items[min(budget, self.config.max_calls_per_turn) :],
        )
        results = self._loop.run_sync(self._execute_all(run))
        self.calls_used += len(run)
        self.turn_calls.append(len(run))
        reward = 0.0
        for result in results:
            reward += self.config.call_reward
            reward += self.config.success_reward if result.ok else self.config.error_reward
        obs = self._render(run, results, len(skipped))
        info: dict[str, Any] = {
            "tool_calls": len(run),
            "tool_results": [
                {
                    "name": item.name,
                    "ok": res.ok,
                    "elapsed_s": res.elapsed_s,
                    "malformed": isinstance(item, MalformedCall),
                }
                for item, res in zip(run, results, strict=True)
            ],
            "observation_role": "tool",
        }
        if has_answer and self.config.answer_with_calls == "both":
            env_obs, env_reward, terminated, truncated, env_info = self.env.step(action)
            merged = add_text(env_obs, before=f"{obs}\n\n")
            return merged, reward + env_reward, terminated, truncated, {**env_info, **info}
        return obs, reward, False, False, info

    def _env_step(self, action: str, *, calls: int) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "tool_calls": calls}

    async def _execute_all(self, items: list[ToolCall | MalformedCall]) -> list[ToolResult]:
        return list(await asyncio.gather(*(self._execute_one(item) for item in items)))

    async def _execute_one(self, item: ToolCall | MalformedCall) -> ToolResult:
        if isinstance(item, MalformedCall):
            return ToolResult(error=item.message)
        try:
            arguments = clean_arguments(item.arguments, what=f"the arguments of {item.name!r}")
        except UnsafeValue as exc:
            return ToolResult(error=str(exc))
        try:
            return await self.tools[item.name].execute(arguments)
        except ToolError as exc:  # the tool itself broke (no worker, no server): tell the model
            return ToolResult(error=f"the {item.name} tool failed: {exc}")
        except Exception as exc:  # a bug in a tool fails this call only, never the episode
            return ToolResult(error=f"the {item.name} tool failed: {type(exc).__name__}: {exc}")

    def _render(self, items: list[ToolCall | MalformedCall], results: list[ToolResult], skipped: int) -> str:
        blocks = []
        for item, result in zip(items, results, strict=True):
            text = clean_text(result.render().rstrip("\n"))  # programs end with a newline; the tag adds one
            blocks.append(f'<tool_response name="{item.name or "?"}">\n{text}\n</tool_response>')
        left = self.config.max_tool_calls - self.calls_used
        if skipped:
            blocks.append(
                f"[{skipped} more tool call(s) in your response were not run: at most "
                f"{self.config.max_calls_per_turn} per response"
                + (", and none are left in this episode]" if left <= 0 else "]")
            )
        if left <= 0:
            blocks.append(
                "[You have used all your tool calls. Your next response goes to the task: give your final answer.]"
            )
        return "\n".join(blocks)

    def close(self) -> None:
        """Close the inner env, the tools built here, and the private event loop; idempotent."""
        owned, self._owned = self._owned, []
        try:
            if owned:
                self._loop.run_sync(_close_all(owned))
        finally:
            self._loop.close()
            self.env.close()

    def __repr__(self) -> str:
        return f"<ToolEnvWrapper[{', '.join(self.tools)}] {self.env!r}>"


async def _close_all(tools: list[Tool]) -> None:
    await asyncio.gather(*(tool.aclose() for tool in tools))
