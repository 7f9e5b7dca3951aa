"""The ``python`` tool through the registry, and math-with-python end to end with scripted policies."""

from __future__ import annotations

import asyncio
import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gem_tool_python import PythonTool
from gem_tool_python.tool import strip_fences

import gem_core
from gem_core.core import StepReturn
from gem_core.errors import ConfigError, SandboxIsolationWarning
from gem_core.testing import GenericTestEnv, NumberGuessEnv
from gem_core.tools import ToolEnvWrapper


@pytest.fixture(autouse=True)
def quiet_fallback() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        yield


def test_registered_through_the_entry_point() -> None:
    tool = gem_core.make_tool("python", timeout_s=3.0, pool_size=1)
    try:
        assert isinstance(tool, PythonTool)
        assert tool.config.timeout_s == 3.0
        assert tool.schema()["function"]["parameters"]["required"] == ["code"]
    finally:
        tool.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"timeout_s": -1}, "timeout_s"), ({"memory_mb": "lots"}, "memory_mb"), ({"isolation": "vm"}, "isolation")],
    ids=["negative-timeout", "memory-not-int", "unknown-isolation"],
)
def test_bad_configuration_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        gem_core.make_tool("python", **kwargs)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("```python\nprint(1)\n```", "print(1)"),
        ("\n```\nx = 1\nprint(x)```\n", "x = 1\nprint(x)"),
        ("print('```')", "print('```')"),
    ],
    ids=["python-fence", "bare-fence", "no-fence"],
)
def test_strip_fences(code: str, expected: str) -> None:
    assert strip_fences(code) == expected


def test_execute_returns_typed_results() -> None:
    tool = PythonTool(pool_size=1, timeout_s=5.0)

    async def calls() -> list[Any]:
        return [
            await tool.execute({"code": "```python\nprint(2 ** 10)\n```"}),
            await tool.execute({"code": "x = 1"}),
            await tool.execute({"code": "raise ValueError('bad')"}),
            await tool.execute({"code": 42}),
            await tool.execute({}),
        ]

    try:
        ok, silent, failed, wrong_type, missing = asyncio.run(calls())
    finally:
        tool.close()
    assert (ok.output, ok.error, ok.metadata["status"]) == ("1024\n", None, "ok")
    assert ok.elapsed_s > 0
    assert silent.output == "(the program printed nothing; use print() to see values)" and silent.ok
    assert failed.error is not None and failed.error.endswith("ValueError: bad")
    assert wrong_type.error == "argument 'code' must be a string with the program, got int"
    assert missing.error == "argument 'code' must be a string with the program, got NoneType"


# --------------------------------------------------------------------------- end to end
def arithmetic_env() -> GenericTestEnv:
    """A one-question math task: reward 1 for a boxed 391."""

    def reset(env: GenericTestEnv, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        return "What is 17 * 23? Put the final answer in \\boxed{}.", {}

    def step(env: GenericTestEnv, action: str) -> StepReturn:
        match = re.search(r"\\boxed\{([^}]*)\}", action)
        if match is None:
            return "Answer with \\boxed{...}.", 0.0, False, False, {"format_error": True}
        right = match.group(1).strip() == "391"
        return ("Correct." if right else "Wrong."), float(right), True, False, {"success": right}

    return GenericTestEnv(reset_func=reset, step_func=step)


def tool_output(obs: str) -> str:
    match = re.search(r'<tool_response name="python">\n(.*?)\n</tool_response>', obs, re.DOTALL)
    assert match is not None, obs
    return match.group(1).strip()


def test_math_with_python_scripted_policy() -> None:
    env = ToolEnvWrapper(arithmetic_env(), ["python"], max_tool_calls=3)
    try:
        obs, info = env.reset(seed=0)
        assert "<python>...</python>" in obs and info["tools"][0]["function"]["name"] == "python"
        # Turn 1: the policy computes with the tool.
        obs, reward, terminated, truncated, info = env.step("I'll compute it.\n<python>print(17 * 23)</python>")
        assert (reward, terminated, truncated, info["tool_calls"]) == (0.0, False, False, 1)
        # Turn 2: it answers with what the tool printed.
        answer = tool_output(obs)
        obs, reward, terminated, truncated, info = env.step(f"The result is \\boxed{{{answer}}}.")
        assert (obs, reward, terminated, info["success"], info["tool_calls"]) == ("Correct.", 1.0, True, True, 0)
    finally:
        env.close()


def test_call_and_answer_in_one_response_with_json_syntax() -> None:
    env = ToolEnvWrapper(arithmetic_env(), ["python"], answer_pattern=r"\\boxed\{", answer_with_calls="both")
    try:
        env.reset(seed=0)
        call = '<tool_call>{"name": "python", "arguments": {"code": "print(17 * 23)"}}</tool_call>'
        obs, reward, terminated, _, info = env.step(call + " so \\boxed{391}")
        assert tool_output(obs) == "391" and obs.endswith("Correct.")
        assert (reward, terminated, info["tool_calls"], info["success"]) == (1.0, True, 1, True)
    finally:
        env.close()


def test_number_guess_binary_search_with_python() -> None:
    """The policy asks python for each midpoint, then guesses it; it must win within 5 turns."""
    env = ToolEnvWrapper(NumberGuessEnv(), ["python"], max_tool_calls=10)
    try:
        for seed in range(3):
            env.reset(seed=seed)
            low, high, total_calls, done, reward = 1, 16, 0, False, 0.0
            while not done:
                obs, _, _, _, info = env.step(f"<python>print(({low} + {high}) // 2)</python>")
                total_calls += info["tool_calls"]
                guess = int(tool_output(obs))
                obs, reward, terminated, truncated, info = env.step(str(guess))
                done = terminated or truncated
                if "higher" in obs:
                    low = guess + 1
                elif "lower" in obs:
                    high = guess - 1
            assert reward == 1.0 and info["success"] is True
            assert total_calls == env.calls_used <= 5
    finally:
        env.close()


def test_fallback_is_announced_once_per_level(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_tool_python import sandbox

    monkeypatch.setattr(sandbox, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sandbox._warn_once("uid", "unshare: Operation not permitted")
        sandbox._warn_once("uid", "unshare: Operation not permitted")
    assert len(caught) == 1 and caught[0].category is SandboxIsolationWarning
    assert "namespaces are unavailable (unshare: Operation not permitted)" in str(caught[0].message)
    assert "falling back to isolation 'uid': no network isolation" in str(caught[0].message)


def test_auto_isolation_falls_back_and_warns_when_namespaces_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_tool_python import SandboxPool, sandbox

    real_spawn = SandboxPool._spawn

    def spawn(self: SandboxPool) -> Any:
        if self.isolation == "namespaces":
            raise sandbox.ToolError("sandbox worker failed to start: unshare: [Errno 1] Operation not permitted")
        return real_spawn(self)

    monkeypatch.setattr(SandboxPool, "_spawn", spawn)
    monkeypatch.setattr(sandbox, "_warned", set())
    pool = SandboxPool(pool_size=1, python="/usr/bin/python3" if Path("/usr/bin/python3").exists() else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            pool.start()
            assert pool.isolation in ("uid", "rlimits")
            assert pool.run("print(3)").stdout == "3\n"
        finally:
            pool.close()
    [warning] = [w for w in caught if w.category is SandboxIsolationWarning]
    assert "Operation not permitted" in str(warning.message)


def test_naming_an_unavailable_level_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_tool_python import SandboxPool, sandbox

    def spawn(self: SandboxPool) -> Any:
        raise sandbox.ToolError("sandbox worker failed to start: unshare: [Errno 1] Operation not permitted")

    monkeypatch.setattr(SandboxPool, "_spawn", spawn)
    pool = SandboxPool(pool_size=1, isolation="namespaces")
    with pytest.raises(sandbox.ToolError, match="isolation 'namespaces' is unavailable here: namespaces: sandbox"):
        pool.start()
    pool.close()


def test_a_dead_fork_server_is_restarted() -> None:
    from gem_tool_python import SandboxPool

    pool = SandboxPool(pool_size=1).start()
    try:
        assert pool._zygote is not None
        pool._zygote.popen.kill()
        pool._zygote.popen.wait()
        # Its idle workers die with it (parent-death signal); the pool must notice and replace them.
        for _ in range(500):
            if not any(w.alive() for w in list(pool._ready.queue)):
                break
            time.sleep(0.01)
        results = [pool.run("print(5)") for _ in range(3)]
        assert [r.stdout for r in results] == ["5\n"] * 3
    finally:
        pool.close()
