import sys
from importlib.metadata import version

import pytest

import gem_core
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.testing import check_env
from gem_rg.env import ReasoningGymEnv, extract_answer
from gem_rg.names import DATASET_NAMES, REASONING_GYM_VERSION


def test_static_names_match_the_installed_reasoning_gym():
    import reasoning_gym

    assert version("reasoning-gym") == REASONING_GYM_VERSION, "pin changed: run `python -m gem_rg.names`"
    assert tuple(sorted(reasoning_gym.factory.DATASETS)) == DATASET_NAMES


def test_listing_ids_does_not_import_reasoning_gym():
    import subprocess

    code = (
        "import sys, gem_core\n"
        "ids = gem_core.list_envs(namespace='rg')\n"
        "print(len(ids), 'reasoning_gym' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(len(DATASET_NAMES)), "False"]


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_check_env(name):
    env_id = f"rg:{name}"
    check_env(gem_core.make(env_id, size=50), env_factory=lambda: gem_core.make(env_id, size=50))


def test_reference_answer_scores_one_and_junk_scores_less():
    env = gem_core.make("rg:chain_sum")
    _, info = env.reset(seed=1)
    answer = env.entry["answer"]
    _, reward, terminated, truncated, info = env.step(f"working... <answer>{answer}</answer>")
    assert (reward, terminated, truncated, info["success"], info["parsed_action"]) == (1.0, True, False, True, answer)
    env.reset(seed=1)
    assert env.step("\\boxed{" + answer + "}")[1] == 1.0  # \boxed{} works too
    env.reset(seed=1)
    _, reward, *_, info = env.step("<answer>not a number</answer>")
    assert reward < 1.0 and not info["success"]
    env.reset(seed=1)
    _, reward, *_, info = env.step("I don't know")
    assert info["format_error"] and reward == 0.0


def test_scorer_exception_is_a_wrong_answer():
    env = gem_core.make("rg:prime_factorization")  # its scorer raises ValueError on non-numbers
    env.reset(seed=0)
    _, reward, *_, info = env.step("<answer>zzz</answer>")
    assert reward == 0.0 and "ValueError" in info["scoring_error"]


def test_seeded_problem_sets_and_size():
    a = gem_core.make("rg:chain_sum", seed=7, size=3)
    b = gem_core.make("rg:chain_sum", seed=7, size=3)
    c = gem_core.make("rg:chain_sum", seed=8, size=3)
    questions = {a.reset(seed=s)[0] for s in range(30)}
    assert len(questions) <= 3  # only `size` distinct problems
    assert a.reset(options={"index": 2}) == b.reset(options={"index": 2})
    assert a.reset(options={"index": 2})[0] != c.reset(options={"index": 2})[0]


def test_difficulty_and_config_shape_the_problems():
    easy = gem_core.make("rg:chain_sum", difficulty=0)
    hard = gem_core.make("rg:chain_sum", difficulty=5)
    easy_terms = {easy.dataset.dataset[i]["metadata"]["num_terms"] for i in range(30)}
    hard_terms = {hard.dataset.dataset[i]["metadata"]["num_terms"] for i in range(30)}
    assert max(easy_terms) == 2 and max(hard_terms) > 2
    fixed = gem_core.make("rg:chain_sum", difficulty=5, config={"min_terms": 3, "max_terms": 3})
    assert {fixed.dataset.dataset[i]["metadata"]["num_terms"] for i in range(10)} == {3}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "chian_sum"}, "chain_sum"),
        ({"size": 0}, "size"),
        ({"config": {"nonsense": 1}}, "nonsense"),
        ({"difficulty": 99}, "difficulty"),
    ],
    ids=["typo-name", "zero-size", "bad-config-key", "too-hard"],
)
def test_bad_config_is_a_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ReasoningGymEnv(**{"name": "chain_sum", **kwargs})


def test_step_needs_reset():
    env = gem_core.make("rg:leg_counting")
    with pytest.raises(ResetNeeded):
        env.step("<answer>4</answer>")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>1</answer> then <answer> 2 </answer>", "2"),
        ("\\boxed{3}", "3"),
        ("<answer>multi\nline</answer>", "multi\nline"),
        ("nothing", None),
    ],
    ids=["last-tag", "boxed-fallback", "multiline", "none"],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected
