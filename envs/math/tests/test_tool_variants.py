import pytest

import gem_core
from gem_core.errors import ConfigError
from gem_core.testing import check_env
from gem_core.tools import ToolEnvWrapper
from gem_math.env import MathEnv
from gem_math.plugin import HUB_DATASETS

# This machine may lack user namespaces; the sandbox then says once that it fell back to weaker isolation.
pytestmark = pytest.mark.filterwarnings("ignore::gem_core.errors.SandboxIsolationWarning")


def test_every_math_id_has_a_python_variant():
    ids = set(gem_core.list_envs(tag="python"))
    assert {f"{env_id}-python" for env_id, *_ in HUB_DATASETS} | {"math:Sample-v0-python"} <= ids


def test_sample_with_python_passes_check_env():
    check_env(gem_core.make("math:Sample-v0-python"), env_factory=lambda: gem_core.make("math:Sample-v0-python"))


def test_compute_with_python_then_answer():
    env = gem_core.make("math:Sample-v0-python")
    try:
        obs, _ = env.reset(options={"index": 23})  # 2^20 mod 7
        assert "python" in obs and "\\boxed{}" in obs
        obs, reward, terminated, _, info = env.step("Let me compute. <python>print(2**20 % 7)</python>")
        assert "4" in obs and (reward, terminated, info["tool_calls"]) == (0.0, False, 1)
        _, reward, terminated, _, info = env.step("The remainder is \\boxed{4}.")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


def test_a_boxed_answer_ends_the_episode_even_with_a_call():
    env = gem_core.make("math:Sample-v0-python")
    try:
        env.reset(options={"index": 23})
        _, reward, terminated, _, info = env.step("<python>print(4)</python> so \\boxed{4}")
        assert (reward, terminated, info["tool_calls"]) == (1.0, True, 0)
    finally:
        env.close()


def test_env_and_wrapper_options_pass_through():
    env = gem_core.make(
        "math:GSM8K-python", path=gem_core.spec("math:Sample-v0").kwargs["path"], tool_wrapper={"max_tool_calls": 1}
    )
    try:
        assert isinstance(env, ToolEnvWrapper) and isinstance(env.unwrapped, MathEnv)
        assert env.config.max_tool_calls == 1 and env.config.answer_with_calls == "env"
    finally:
        env.close()


def test_bad_wrapper_option_names_the_field():
    with pytest.raises(ConfigError, match="max_tool_calls"):
        gem_core.make("math:Sample-v0-python", tool_wrapper={"max_tool_calls": -1})
