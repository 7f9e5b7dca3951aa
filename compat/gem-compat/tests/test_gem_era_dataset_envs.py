"""GEM-era dataset-env code (math, code, QA, reasoning-gym) as GEM's users write it, on gem-compat."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gem
from gem.envs._gem_era import DATASET_KEYS, DATASET_RENAMES, translate_dataset_kwargs
from gem.envs.code_env import CodeEnv
from gem.envs.math_env import MathEnv
from gem.envs.qa_env import QaEnv
from gem.envs.registration import register
from gem_core import plugins
from gem_core.errors import ConfigError

ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    plugins.reset_registry()
    yield
    plugins.reset_registry()


def _jsonl(tmp_path: Path, rows: list[dict[str, Any]]) -> str:
    target = tmp_path / "rows.jsonl"
    target.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(target)


def test_code_env_from_an_in_memory_dataset_with_gem_arguments() -> None:
    datasets = pytest.importorskip("datasets")
    tests = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
    data = datasets.Dataset.from_dict({"problem": ["add two numbers"], "tests": [tests]})
    with pytest.warns(DeprecationWarning) as record:
        env = CodeEnv(dataset=data, dataset_name="adder", max_tests=2, verbose=True)
    assert [str(w.message).split(": ", 1)[1].split()[:2] for w in record] == [
        ["dataset=", "is"],
        ["the", "GEM-era"],
    ]
    obs, _ = env.reset()
    assert "add two numbers" in obs
    assert env.tests == tests
    assert env.step(ADD_PROGRAM)[1] == 1
    env.reset()
    assert env.step("```python\nprint(0)\n```")[1] == 0


def test_registered_math_env_with_gem_column_names(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"q": "What is 6 * 7?", "a": "42"}])
    with pytest.warns(DeprecationWarning) as record:
        register("mathx:Local-v0", "gem.envs.math_env:MathEnv", dataset_name=path, question_key="q", answer_key="a")
    assert "question_key= is now question_column=" in str(record[1].message)
    env = gem.make("mathx:Local-v0")
    assert isinstance(env, MathEnv)
    obs, _ = env.reset()
    assert "6 * 7" in obs
    assert env.step("so \\boxed{42}")[1] == 1


def test_math_env_class_takes_gem_arguments(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"question": "1+1?", "solution": "2"}])
    with pytest.warns(DeprecationWarning):
        env = MathEnv(dataset_name=path, question_key="question", answer_key="solution")
    env.reset()
    assert env.step("\\boxed{3}")[1] == 0


@pytest.mark.parametrize(("extract_boxed", "action"), [(True, "\\boxed{Paris}"), (False, "<answer>Paris</answer>")])
def test_qa_extract_boxed_becomes_answer_format(tmp_path: Path, extract_boxed: bool, action: str) -> None:
    path = _jsonl(tmp_path, [{"question": "Capital of France?", "answer": ["Paris"]}])
    with pytest.warns(DeprecationWarning) as record:
        env = QaEnv(dataset_name=path, extract_boxed=extract_boxed)
    assert any("answer_format=" in str(w.message) for w in record)
    env.reset()
    assert env.step(action)[1] == 1


def test_reasoning_gym_with_gem_seed_and_vec_kwargs() -> None:
    pytest.importorskip("reasoning_gym")
    env = gem.make("rg:leg_counting", seed=10, size=5)  # seed= is gem-reasoning-gym's own option too
    obs, _ = env.reset()
    assert isinstance(obs, str)
    vec = gem.make_vec(["rg:leg_counting"] * 2, vec_kwargs=[{"seed": 1}, {"seed": 2}], size=5)
    vec.reset()
    _, rewards, terminated, _, _ = vec.step(["\\boxed{30}"] * 2)
    assert len(rewards) == 2
    assert all(terminated)


def test_both_names_given_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="keep path="):
        translate_dataset_kwargs("x", {"dataset_name": "a", "path": "b"})


def test_dataset_that_is_not_a_dataset_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"datasets\.Dataset"):
        translate_dataset_kwargs("x", {"dataset": [{"problem": "p"}]})


@settings(max_examples=40, deadline=None)
@given(
    chosen=st.sets(st.sampled_from(sorted({*DATASET_RENAMES, "extract_boxed", "verbose"}))),
    value=st.text(max_size=8),
    other=st.dictionaries(st.sampled_from(["split", "max_tests", "prompt"]), st.integers(), max_size=2),
)
def test_translation_leaves_no_gem_argument_and_keeps_every_value(
    chosen: set[str], value: str, other: dict[str, int]
) -> None:
    given_kwargs = {**other, **dict.fromkeys(chosen, value)}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = translate_dataset_kwargs("x", given_kwargs)
    assert not (DATASET_KEYS | {"verbose"}) & out.keys()
    assert len(record) == len(chosen)
    assert all(issubclass(w.category, DeprecationWarning) for w in record)
    for old, new in DATASET_RENAMES.items():
        if old in chosen:
            assert out[new] == value
    if "extract_boxed" in chosen:
        assert out["answer_format"] == ("boxed" if value else "answer_tag")
    assert {k: out[k] for k in other} == other


def test_envs_built_by_gem_core_are_instances_of_gem_paths(tmp_path: Path) -> None:
    from gem_math.env import MathEnv as NativeMathEnv

    native = NativeMathEnv(path=_jsonl(tmp_path, [{"problem": "1+1?", "answer": "2"}]))
    assert isinstance(native, MathEnv)
    assert issubclass(NativeMathEnv, MathEnv)
    assert not isinstance(native, CodeEnv)
