"""GEM-style code, written as against gem-llm, running on gem_core through the `gem` compatibility package."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gem
import gem_core
from gem.envs.registration import GemIdError, native_id
from gem.utils.constants import TERMINAL_STATE
from gem.wrappers.wrapper_factory import WRAPPER_FACTORY, get_wrapper_fns
from gem_core import plugins

DOC = Path(__file__).resolve().parents[3] / "docs" / "migrating-from-gem.md"


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    plugins.reset_registry()
    yield
    plugins.reset_registry()


class GlobalDiceEnv(gem.Env):
    """Written the GEM way: positional seed to super().reset, draws from the global RNGs."""

    def __init__(self, sides: int = 6, **_: Any) -> None:
        super().__init__()
        self.sides = sides

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:  # type: ignore[override]
        super().reset(seed)
        self.target = random.randint(1, self.sides) + int(np.random.randint(0, 1))
        return f"Guess the die (1-{self.sides}).", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ok = action.strip() == str(self.target)
        return TERMINAL_STATE, float(ok), True, True, {"success": ok}


def test_readme_loop_on_a_gem_id() -> None:
    env = gem.make("game:GuessTheNumber-v0-easy")
    assert env.env_id == "game:GuessTheNumber-v0-easy" and env.entry_point.endswith(":GuessTheNumberEnv")
    observation, info = env.reset(seed=42)
    assert isinstance(observation, str) and isinstance(info, dict)
    for _ in range(10):
        observation, _, terminated, truncated, info = env.step(env.sample_random_action())
        if terminated or truncated:
            break
    assert terminated or truncated


def test_register_bare_id_and_make_like_roll() -> None:
    gem.register("dice_game", entry_point=f"{__name__}:GlobalDiceEnv", sides=4)
    env = gem.make("dice_game")
    assert env.sides == 4 and gem_core.spec("gem:dice_game").kwargs == {"sides": 4}
    first = env.reset(seed=7) and env.target
    assert env.reset(seed=7) and env.target == first  # GEM's global seeding keeps GEM-era envs reproducible
    with pytest.raises(ValueError, match="already registered"):
        gem.register("dice_game", entry_point=GlobalDiceEnv)
    with pytest.raises(GemIdError):
        gem.register("gem:dice_game", entry_point=GlobalDiceEnv)


def test_register_in_an_owned_namespace_as_gem_allows() -> None:
    gem.register("core:MyVariant-v0", entry_point=GlobalDiceEnv)
    assert gem.make("core:MyVariant-v0").sides == 6
    with pytest.raises(gem_core.errors.NamespaceError):
        gem_core.register("core:Native-v0", GlobalDiceEnv)  # gem_core's own API keeps ownership


@pytest.mark.parametrize(
    ("gem_id", "native"), [("game:Sudoku-v0-easy", "game:Sudoku-v0-easy"), ("webshop", "gem:webshop")]
)
def test_native_ids(gem_id: str, native: str) -> None:
    assert native_id(gem_id) == native


@pytest.mark.parametrize("bad", ["Game:Upper-v0", "a:b:c", "with space"])
def test_ids_without_equivalent_are_refused(bad: str) -> None:
    with pytest.raises(gem_core.errors.InvalidIdError, match="no gem_core equivalent"):
        gem.make(bad)


def test_make_vec_with_wrapper_names_and_selective_step() -> None:
    wrappers = get_wrapper_fns("concat_with_action,episode_tracking")
    envs = gem.make_vec("game:GuessTheNumber-v0-easy", num_envs=3, wrappers=wrappers, seed=1)
    obs, infos = envs.reset(seed=0)
    assert len(obs) == 3 and len(infos) == 3
    obs, rewards, *_ = envs.step(["\\boxed{5}"] * 3)
    assert len(rewards) == 3 and "\\boxed{5}" in obs[0]  # concat_with_action shows the action
    obs, rewards, *_ = envs.step({1: "\\boxed{3}"})  # GEM's dict form steps only some envs
    assert len(rewards) == 1
    envs.close()


def test_make_vec_per_env_kwargs_and_async() -> None:
    envs = gem.make_vec(["game:GuessTheNumber-v0-easy"], vec_kwargs=[{"high": 10}, {"high": 20}], async_mode=True)
    obs, _ = envs.reset(seed=0)
    assert "from 1 to 10" in obs[0] and "from 1 to 20" in obs[1]
    envs.close()


class IndexedEnv(GlobalDiceEnv):
    """GEM's dataset envs take reset kwargs (``reset(seed=None, idx=None)``)."""

    def reset(self, seed: int | None = None, idx: int | None = None) -> tuple[str, dict[str, Any]]:  # type: ignore[override]
        super().reset(seed)
        return f"question {idx}", {}


def test_reset_options_become_gem_reset_kwargs() -> None:
    env = IndexedEnv()
    assert env.reset(seed=0, options={"idx": 3})[0] == "question 3"
    assert env.reset(0, idx=4)[0] == "question 4"
    gem.register("indexed", entry_point=IndexedEnv)
    envs = gem.make_vec("indexed", num_envs=2)
    obs, _ = envs.reset(seed=0, options=[{"idx": 1}, {"idx": 2}])
    assert obs == ["question 1", "question 2"]
    envs.close()


def test_make_vec_autoresets_in_the_same_step_like_gem() -> None:
    gem.register("dice_vec", entry_point=GlobalDiceEnv)
    envs = gem.make_vec("dice_vec", num_envs=2)
    envs.reset(seed=0)
    obs, _, terminated, _, infos = envs.step(["1", "1"])
    assert all(terminated) and obs[0].startswith("Guess the die")  # already the next episode
    assert infos[0]["final_obs"] == TERMINAL_STATE
    envs.close()


def test_answer_boxed_wrapper() -> None:
    (wrap,) = get_wrapper_fns("answer_boxed")
    env = wrap(gem.make("game:GuessTheNumber-v0-easy"))
    obs, _ = env.reset(seed=0)
    assert "\\boxed{<your response>}" in obs
    assert env.extract("so the answer is \\boxed{ 7 } done") == "7"
    assert env.extract("no answer") is None


def test_python_tool_wrapper_name() -> None:
    wrappers = get_wrapper_fns("python_tool,concat,episode_tracking")
    env = gem.make("game:GuessTheNumber-v0-easy")
    for wrap in wrappers:
        env = wrap(env)
    obs, _ = env.reset(seed=0)
    obs, reward, *_ = env.step("<python>print(6 * 7)</python>")
    assert "42" in obs and reward == pytest.approx(0.05 + 0.25)


def test_gem_style_wrapper_reads_live_attributes() -> None:
    class Shout(gem.EnvWrapper):
        def step(self, action: str) -> Any:
            return self.env.step(action.upper())

    env = Shout(gem.make("game:GuessTheNumber-v0-easy"))
    env.reset(seed=0)
    env.reset(seed=1)
    assert env.secret == env.unwrapped.secret  # read through now, not a copy from construction


def test_registry_view_and_print_envs(capsys: pytest.CaptureFixture[str]) -> None:
    assert "game:Sudoku-v0-easy" in gem.ENV_REGISTRY
    assert gem.ENV_REGISTRY["game:GuessTheNumber-v0-easy"].kwargs["high"] == 10
    with pytest.raises(KeyError):
        gem.ENV_REGISTRY["game:Nope-v0"]
    gem.print_envs()
    assert "  - game:Sudoku-v0-easy:" in capsys.readouterr().out


def test_unknown_wrapper_name() -> None:
    with pytest.raises(gem_core.errors.WrapperNotFound, match="known: python_tool"):
        get_wrapper_fns("concat,frobnicate")


def test_migration_doc_covers_every_name() -> None:
    """Every GEM name the package provides has a line in docs/migrating-from-gem.md."""
    doc = DOC.read_text()
    for name in [*gem.__all__, *WRAPPER_FACTORY]:
        assert re.search(rf"`(?:gem\.)?{re.escape(name)}\b", doc), name


# ---------------------------------------------------------------- GEM's utilities, classes by path, GEM-era kwargs

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PLAIN = st.text(alphabet=st.characters(blacklist_characters="{}\\<>`"), max_size=20)


@settings(max_examples=50, deadline=None)
@given(before=_PLAIN, answer=_PLAIN, after=_PLAIN)
def test_parsing_finds_the_last_answer_whatever_surrounds_it(before: str, answer: str, after: str) -> None:
    from gem.utils.parsing import extract_code_from_model, extract_last_boxed_answer, extract_last_tagged_answer

    assert extract_last_boxed_answer(f"{before}\\boxed{{x}}{before}\\boxed{{{answer}}}{after}") == answer
    assert extract_last_boxed_answer(f"{before}\\boxed{{{{{answer}}}}}{after}") == f"{{{answer}}}"  # nested braces
    assert extract_last_boxed_answer(before + after) is None
    assert extract_last_tagged_answer(f"<answer>x</answer>{before}<answer>{answer}</answer>{after}") == answer.strip()
    assert extract_code_from_model(f"{before}\n```python\n{answer}\n```{after}") == answer.strip()
    assert extract_code_from_model(before) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("\\boxed{1", None), ("\\fbox{2}", None), ("a \\fbox{2} b", None), ("\\boxed{}", "")],
    ids=["unclosed", "fbox-is-found-but-not-unboxed", "fbox-in-text", "empty"],
)
def test_parsing_edge_cases(text: str, expected: str | None) -> None:
    from gem.utils.parsing import extract_last_boxed_answer, last_boxed_only_string

    assert extract_last_boxed_answer(text) == expected
    if "fbox" in text:
        assert last_boxed_only_string(text) == "\\fbox{2}"


def test_debug_selective_step_on_a_vector_env(capsys: pytest.CaptureFixture[str]) -> None:
    """As GEM's own test_game.py drives it: a random subset of envs stepped each turn, sub-envs read via .envs."""
    from gem.utils.debug import run_and_print_episode_with_random_selection

    envs = gem.make_vec(["game:GuessTheNumber-v0-easy", "game:Sudoku-v0-easy"], async_mode=True, max_turns=3)
    try:
        run_and_print_episode_with_random_selection(
            envs, lambda _: [e.sample_random_action() for e in envs.envs], ignore_done=True, max_steps=4, seed=0
        )
    finally:
        envs.close()
    out = capsys.readouterr().out
    assert out.count("Step ") == 4 and "----TIME:" in out


def test_debug_prints_an_episode(capsys: pytest.CaptureFixture[str]) -> None:
    from gem.utils.debug import run_and_print_episode

    env = gem.make("game:GuessTheNumber-v0-easy")
    run_and_print_episode(env, lambda obs: "\\boxed{5}", max_steps=3)
    out = capsys.readouterr().out
    assert out.count("---------- action ----------") <= 3 and "\\boxed{5}" in out and "----TIME:" in out


def test_async_vector_env_has_envs_like_gem() -> None:
    envs = gem.make_vec("game:GuessTheNumber-v0-easy", num_envs=3, async_mode=True)
    try:
        assert len(envs.envs) == 3 and all(hasattr(e, "step") for e in envs.envs)
        assert envs.env_ids == ["game:GuessTheNumber-v0-easy"] * 3
        obs, _ = envs.reset(seed=0)
        assert len(obs) == 3
    finally:
        envs.close()


@pytest.mark.parametrize("key", ["seed", "verbose"])
def test_gem_era_constructor_kwargs_warn_and_are_dropped(key: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"GEM-era constructor argument {key}= is ignored") as record:
        env = gem.make("game:GuessTheNumber-v0-easy", **{key: 3})
    assert record[0].filename == __file__  # attributed to the caller's line
    assert isinstance(env.reset(seed=0)[0], str)
    if key != "seed":  # make_vec takes seed= itself (accepted, not passed on, as documented)
        with pytest.warns(DeprecationWarning, match=key):
            envs = gem.make_vec("game:GuessTheNumber-v0-easy", num_envs=2, **{key: 3})
        envs.close()
    with pytest.raises(gem_core.errors.ConfigError, match="frobnicate"):  # anything else is still refused
        gem.make("game:GuessTheNumber-v0-easy", frobnicate=1)


def test_gem_vector_classes_take_gem_arguments() -> None:
    from gem.vector.sync_vector_env import SyncVectorEnv
    from gem.vector.vector_env import AutoresetMode

    ids = ["game:GuessTheNumber-v0-easy"] * 2
    envs = SyncVectorEnv(ids, [lambda: gem.make(ids[0])] * 2)
    try:
        assert envs.autoreset_mode == AutoresetMode.SAME_STEP and envs.env_ids == ids
        envs.reset(seed=1)
        _, rewards, *_ = envs.step({0: "\\boxed{3}"})  # GEM's selective step: only env 0
        assert len(rewards) == 1
    finally:
        envs.close()


def test_gem_tool_classes_by_path_with_gem_arguments() -> None:
    from gem.tools.python_code_tool import PythonCodeTool
    from gem.tools.tool_env_wrapper import ToolEnvWrapper

    env = ToolEnvWrapper(
        gem.make("game:GuessTheNumber-v0-easy"),
        tools=[PythonCodeTool(timeout=3)],
        tool_reward=0.05,
        tool_success_reward=0.25,
        max_tool_uses=5,
    )
    try:
        env.reset(seed=0)
        obs, reward, *_ = env.step("<python>print(6 * 7)</python>")
        assert "42" in obs and reward == pytest.approx(0.3)
    finally:
        env.close()


GEM_PATHS = [
    ("gem.envs.code_env", "CodeEnv", "gem-code"),
    ("gem.envs.math_env", "MathEnv", "gem-math"),
    ("gem.envs.qa_env", "QaEnv", "gem-qa"),
    ("gem.envs.reasoning_gym", "ReasoningGymEnv", "gem-reasoning-gym"),
    ("gem.tools.python_code_tool", "PythonCodeTool", "gem-tool-python"),
    ("gem.tools.search_tool", "SearchTool", "gem-tool-search"),
    ("gem.tools.mcp_tool", "MCPTool", "gem-tool-mcp"),
    ("gem.tools.tool_env_wrapper", "ToolEnvWrapper", "gem-core"),
    ("gem.vector.vector_env", "VectorEnv", "gem-core"),
    ("gem.vector.sync_vector_env", "SyncVectorEnv", "gem-core"),
    ("gem.vector.async_vector_env", "AsyncVectorEnv", "gem-core"),
]


@pytest.mark.parametrize(("module", "name", "dist"), GEM_PATHS, ids=[m for m, _, _ in GEM_PATHS])
def test_gem_module_paths_import_or_name_the_package(module: str, name: str, dist: str) -> None:
    """Each GEM path gives its class when the gem package behind it is installed, else says what to install."""
    import importlib
    import importlib.util

    provider = dist.replace("-", "_").replace("reasoning_gym", "rg")
    installed = importlib.util.find_spec(provider) is not None
    if installed:
        assert isinstance(getattr(importlib.import_module(module), name), type)
    else:
        with pytest.raises(ImportError, match=f"pip install {dist}"):
            importlib.import_module(module)
    assert f"`{module}" in DOC.read_text(), f"{module} is missing from the migration table"


@pytest.mark.parametrize("module", ["gem.multiagent", "gem.envs.multiagent", "gem.envs.multiagent.multi_agent_env"])
def test_multiagent_modules_import(module: str) -> None:
    import importlib

    from gem.multiagent import AgentSelector, MultiAgentEnv

    loaded = importlib.import_module(module)
    assert loaded.MultiAgentEnv is MultiAgentEnv and loaded.AgentSelector is AgentSelector
