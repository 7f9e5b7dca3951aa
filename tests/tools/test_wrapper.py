from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import pytest

from gem_core.errors import ConfigError, ResetNeeded, ToolError
from gem_core.registry import Registry, WrapperSpec
from gem_core.testing import GenericTestEnv, NumberGuessEnv, check_env
from gem_core.tools import Tool, ToolEnvWrapper, ToolResult


class EchoTool(Tool):
    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Repeats its text."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    tag_argument: ClassVar[str | None] = "text"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.closed = 0

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append(arguments)
        text = arguments.get("text")
        if text == "fail":
            return ToolResult(error="asked to fail")
        if text == "broken":
            raise ToolError("backend is down")
        return ToolResult(output=f"echo: {text}", elapsed_s=0.001)

    async def aclose(self) -> None:
        self.closed += 1


class RendezvousTool(EchoTool):
    """Each call waits until the other has started: it only succeeds when calls run concurrently."""

    name: ClassVar[str] = "meet"

    def __init__(self) -> None:
        super().__init__()
        self.arrived = 0

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        self.arrived += 1
        for _ in range(200):
            if self.arrived >= 2:
                return ToolResult(output="met")
            await asyncio.sleep(0.01)
        return ToolResult(error="alone")


def wrap(env: Any = None, **config: Any) -> tuple[ToolEnvWrapper, EchoTool, GenericTestEnv]:
    inner = env or GenericTestEnv(episode_length=2)
    tool = EchoTool()
    return ToolEnvWrapper(inner, [tool], **config), tool, inner


def test_reset_adds_instructions_schemas_and_limits() -> None:
    env, _, _ = wrap(max_tool_calls=3, max_calls_per_turn=2)
    obs, info = env.reset(seed=0)
    assert obs.startswith("start ")
    assert "- echo: Repeats its text. Call it as <echo>...</echo>." in obs
    assert json.dumps(EchoTool().schema()) in obs
    assert "up to 3 tool calls in this episode, at most 2 per response" in obs
    assert info["tools"] == [EchoTool().schema()]
    env.close()


@pytest.mark.parametrize(
    ("syntax", "present", "absent"),
    [("tag", "<echo>...</echo>", "<tools>"), ("json", "<tools>", "<echo>...</echo>")],
    ids=["tag", "json"],
)
def test_instructions_follow_the_syntax(syntax: str, present: str, absent: str) -> None:
    env, _, _ = wrap(syntax=syntax)
    obs, _ = env.reset(seed=0)
    assert present in obs and absent not in obs
    env.close()


def test_response_without_calls_goes_to_the_env() -> None:
    env, tool, inner = wrap()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("just text")
    assert (obs, reward, terminated, truncated) == ("echo[1]: just text", 0.0, False, False)
    assert info == {"tool_calls": 0}
    assert tool.calls == [] and inner.t == 1
    env.close()


def test_tool_call_result_is_the_next_observation_and_the_env_is_not_stepped() -> None:
    env, tool, inner = wrap(call_reward=0.1, success_reward=0.5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("let me check <echo>hi</echo>")
    assert obs == '<tool_response name="echo">\necho: hi\n</tool_response>'
    assert reward == pytest.approx(0.6)
    assert (terminated, truncated) == (False, False)
    assert info["tool_calls"] == 1 and info["observation_role"] == "tool"
    assert info["tool_results"] == [{"name": "echo", "ok": True, "elapsed_s": 0.001, "malformed": False}]
    assert inner.t == 0 and tool.calls == [{"text": "hi"}]
    env.close()


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ('<tool_call>{"name": "echo", "arguments": {"text": </tool_call>', "[error] the tool call is not valid JSON"),
        ("<echo>fail</echo>", "[error] asked to fail"),
        ("<echo>broken</echo>", "[error] the echo tool failed: backend is down"),
        ('<tool_call>{"name": "nope"}</tool_call>', "[error] unknown tool 'nope'; available tools: echo"),
    ],
    ids=["malformed-json", "tool-error", "tool-raised", "unknown-tool"],
)
def test_failed_calls_are_reported_back_and_count(action: str, expected: str) -> None:
    env, _, inner = wrap(error_reward=-0.2)
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(action)
    assert expected in obs
    assert reward == pytest.approx(-0.2)
    assert info["tool_calls"] == 1 and info["tool_results"][0]["ok"] is False
    assert env.calls_used == 1 and inner.t == 0
    env.close()


def test_calls_per_turn_are_capped_with_a_note() -> None:
    env, tool, _ = wrap(max_calls_per_turn=2)
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<echo>a</echo><echo>b</echo><echo>c</echo>")
    assert tool.calls == [{"text": "a"}, {"text": "b"}]
    assert info["tool_calls"] == 2
    assert obs.endswith("[1 more tool call(s) in your response were not run: at most 2 per response]")
    env.close()


def test_episode_budget_then_responses_go_to_the_env_and_reset_restores_it() -> None:
    env, tool, inner = wrap(max_tool_calls=2)
    env.reset(seed=0)
    env.step("<echo>1</echo>")
    obs, *_ = env.step("<echo>2</echo><echo>3</echo>")
    assert "[You have used all your tool calls." in obs
    assert "none are left in this episode" in obs
    obs, _, _, _, info = env.step("<echo>4</echo>")
    assert obs == "echo[1]: <echo>4</echo>" and info["tool_calls"] == 0
    assert [c["text"] for c in tool.calls] == ["1", "2"] and inner.t == 1
    assert env.turn_calls == [1, 1]
    env.reset(seed=1)
    assert env.calls_used == 0
    env.step("<echo>5</echo>")
    assert [c["text"] for c in tool.calls][-1] == "5"
    env.close()


def test_calls_in_one_response_run_concurrently() -> None:
    tool = RendezvousTool()
    env = ToolEnvWrapper(GenericTestEnv(), [tool])
    env.reset(seed=0)
    obs, *_ = env.step("<meet>a</meet><meet>b</meet>")
    assert obs.count("\nmet\n") == 2
    env.close()


@pytest.mark.parametrize(
    ("mode", "tool_calls", "env_steps", "terminated"),
    [("both", 1, 1, True), ("env", 0, 1, True), ("tools", 1, 0, False)],
    ids=["both", "env", "tools"],
)
def test_response_with_call_and_answer(mode: str, tool_calls: int, env_steps: int, terminated: bool) -> None:
    inner = GenericTestEnv(episode_length=1)
    env, tool, _ = wrap(inner, answer_pattern=r"\\boxed\{", answer_with_calls=mode)
    env.reset(seed=0)
    obs, reward, term, _, info = env.step(r"<echo>check</echo> so the answer is \boxed{4}")
    assert len(tool.calls) == tool_calls and inner.t == env_steps and term is terminated
    assert info["tool_calls"] == tool_calls
    if mode == "both":
        assert obs.startswith('<tool_response name="echo">') and "echo[1]:" in obs and reward == 1.0
    env.close()


def test_step_before_reset_raises() -> None:
    env, _, _ = wrap()
    with pytest.raises(ResetNeeded):
        env.step("<echo>x</echo>")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tools": []}, "tools"),
        ({"tools": [EchoTool()], "answer_pattern": "("}, "answer_pattern"),
        ({"tools": [EchoTool()], "max_calls_per_turn": 0}, "max_calls_per_turn"),
        ({"tools": [EchoTool()], "colour": "red"}, "colour"),
        ({"tools": [EchoTool(), EchoTool()]}, "two tools are named 'echo'"),
    ],
    ids=["no-tools", "bad-regex", "zero-per-turn", "unknown-field", "duplicate-names"],
)
def test_bad_configuration_raises_config_error_naming_the_field(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        ToolEnvWrapper(GenericTestEnv(), **kwargs)


def test_close_closes_env_and_built_tools_only_and_is_idempotent() -> None:
    env, tool, inner = wrap()
    env.reset(seed=0)
    env.step("<echo>x</echo>")
    env.close()
    env.close()
    assert inner.closed == 2
    assert tool.closed == 0  # passed in by the caller, so the caller closes it


def test_wrapped_env_passes_check_env() -> None:
    def factory() -> ToolEnvWrapper:
        return ToolEnvWrapper(NumberGuessEnv(), [EchoTool()])

    check_env(factory(), env_factory=factory)


def test_registered_as_a_wrapper_by_name() -> None:
    registry = Registry()
    registry.register("core:NumberGuess-v0", "gem_core.testing:NumberGuessEnv")
    registry.add(WrapperSpec(name="tools", entry_point="gem_core.tools.wrapper:ToolEnvWrapper"))
    env = registry.make("core:NumberGuess-v0", wrappers=[("tools", {"tools": [EchoTool()], "max_tool_calls": 1})])
    assert isinstance(env, ToolEnvWrapper) and env.config.max_tool_calls == 1
    assert env.spec is not None and env.spec.id == "core:NumberGuess-v0"
    env.close()


def test_episode_statistics_sum_the_tool_calls() -> None:
    from gem_core.wrappers import EpisodeStatistics

    env = EpisodeStatistics(ToolEnvWrapper(GenericTestEnv(episode_length=1), [EchoTool()]))
    env.reset(seed=0)
    env.step("<echo>a</echo><echo>b</echo>")
    env.step("<tool_call>{}</tool_call>")
    *_, terminated, _, info = env.step("final answer")
    assert terminated and info["episode"]["tool_calls"] == 3 and info["episode"]["length"] == 3
    env.close()


def test_chat_history_puts_tool_results_in_the_tool_role() -> None:
    from gem_core.wrappers import ChatHistory

    env = ChatHistory(ToolEnvWrapper(GenericTestEnv(episode_length=1), [EchoTool()]), mode="chat")
    env.reset(seed=0)
    env.step("<echo>a</echo>")
    *_, info = env.step("done")
    roles = [m["role"] for m in info["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    env.close()


def test_inner_attributes_read_through() -> None:
    env, _, inner = wrap()
    env.reset(seed=3)
    assert env.unwrapped is inner and env.np_random is inner.np_random
    assert env.get_wrapper_attr("episode_length") == 2
    with pytest.raises(TypeError, match=r"wraps a gem_core\.Env"):
        ToolEnvWrapper(object(), [EchoTool()])  # type: ignore[arg-type]
    env.close()
