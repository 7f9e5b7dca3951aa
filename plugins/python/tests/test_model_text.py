"""Any model text through the python tool and the sandbox: never an exception, always a result."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from gem_tool_python import PythonTool
from hypothesis import HealthCheck, given, settings

from gem_core.errors import SandboxIsolationWarning
from gem_core.testing import GenericTestEnv
from gem_core.tools import ToolEnvWrapper
from gem_core.tools.fuzz import any_text, model_text


@pytest.fixture(scope="module")
def tool() -> Iterator[PythonTool]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        python = PythonTool(timeout_s=3.0, pool_size=2)
        python.pool.start()
    yield python
    python.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=model_text(["python"]))
def test_step_never_raises_on_any_text(tool: PythonTool, text: str) -> None:
    env = ToolEnvWrapper(GenericTestEnv(), [tool], max_tool_calls=100)
    env.reset(seed=0)
    obs, *_, info = env.step(text)
    if info["tool_calls"]:  # a tool step's observation (the inner env's own echo is its business)
        obs.encode("utf-8")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=any_text(200))
def test_sandbox_run_returns_a_result_for_any_code(tool: PythonTool, code: str) -> None:
    result = tool.pool.run(code)
    assert result.status in ("ok", "error", "exit", "timeout", "cpu_limit", "output_limit", "killed", "crashed")
    (result.stdout + result.stderr + (result.error or "")).encode("utf-8")


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("print('\ud800')", id="surrogate-in-string"),
        pytest.param("\ud800", id="bare-surrogate"),
        pytest.param("print(1)\x00", id="nul"),
        pytest.param("(" * 100_000, id="deep-parens"),
        pytest.param("x = " + "9" * 5_000 + "\nprint(len(str(x)))", id="huge-int-literal"),
    ],
)
def test_hostile_programs_give_a_result(tool: PythonTool, code: str) -> None:
    result = tool.pool.run(code)
    assert result.status in ("ok", "error"), result
    if result.status == "error":
        assert result.error
