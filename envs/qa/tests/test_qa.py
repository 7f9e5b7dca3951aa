import pytest

import gem_core
from gem_core.errors import ConfigError, DatasetUnavailable
from gem_core.testing import check_env
from gem_qa.env import QaEnv, extract_tagged_answer, reference_answers
from gem_qa.plugin import HUB_DATASETS
from gem_qa.scoring import best_exact_match, best_f1, normalize_answer, token_f1


@pytest.mark.parametrize("env_id", ["qa:Sample-v0", "logic:Sample-v0"])
def test_samples_pass_check_env(env_id):
    check_env(gem_core.make(env_id), env_factory=lambda: gem_core.make(env_id))


def test_gem_ids_are_registered():
    ids = set(gem_core.list_envs())
    assert {i for i, *_ in HUB_DATASETS} <= ids
    assert {f"logic:RuleTaker-d{d}" for d in (0, 1, 2, 3, 5)} <= ids


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple, a pear ", "apple pear"),
        ("U.S.A.", "usa"),
        ("Theatre", "theatre"),  # 'the' only as a whole word
    ],
    ids=["article-punct", "spaces", "dots", "the-prefix"],
)
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


@pytest.mark.parametrize(
    ("pred", "refs", "em", "f1"),
    [
        ("Jane Austen", ["Jane Austen"], True, 1.0),
        ("jane austen.", ["Jane Austen"], True, 1.0),
        ("Austen", ["Jane Austen"], False, 2 / 3),
        ("Austen", ["Jane Austen", "Austen"], True, 1.0),
        ("the Pacific Ocean", ["Pacific Ocean"], True, 1.0),
        ("Mars", ["Venus"], False, 0.0),
        ("", ["Mars"], False, 0.0),
        ("the", ["a"], True, 1.0),  # both normalise to nothing
    ],
    ids=["exact", "case-punct", "partial", "alias", "article", "wrong", "empty", "only-articles"],
)
def test_em_and_f1(pred, refs, em, f1):
    assert best_exact_match(pred, refs) is em
    assert best_f1(pred, refs) == pytest.approx(f1)


def test_token_f1_counts_repeats_once_each():
    assert token_f1("new new york", "new york") == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("cell", "refs"),
    [
        ("Paris", ["Paris"]),
        ('["a", "b"]', ["a", "b"]),
        (["x", "y"], ["x", "y"]),
        (1989, ["1989"]),
        ("[not json", ["[not json"]),
    ],
    ids=["str", "json-list", "list", "int", "bad-json"],
)
def test_reference_answers(cell, refs):
    assert reference_answers(cell) == refs


def test_tagged_answer_extraction():
    assert extract_tagged_answer("<think>hmm</think><answer> A </answer> <ANSWER>B</ANSWER>") == "B"
    assert extract_tagged_answer("no tags") is None


def test_em_reward_and_info():
    env = gem_core.make("qa:Sample-v0")
    obs, _ = env.reset(options={"index": 2})
    assert "Pride and Prejudice" in obs and "<answer>" in obs
    _, reward, terminated, _, info = env.step("<think>...</think><answer>Austen</answer>")
    assert (reward, terminated, info["success"], info["f1"]) == (1.0, True, True, 1.0)
    env.reset(options={"index": 2})
    _, reward, *_, info = env.step("<answer>Charlotte Bronte</answer>")
    assert reward == 0.0 and info["em"] == 0.0 and not info["success"]
    env.reset(options={"index": 2})
    _, reward, *_, info = env.step("Jane Austen")  # no tags
    assert reward == 0.0 and info["format_error"]


def test_f1_metric_gives_partial_credit():
    env = gem_core.make("qa:Sample-v0", metric="f1")
    env.reset(options={"index": 7})  # Michelangelo / Michelangelo Buonarroti
    _, reward, *_, info = env.step("<answer>Buonarroti</answer>")
    assert reward == pytest.approx(2 / 3) and not info["success"]


def test_logic_sample_reads_boxed_answers():
    env = gem_core.make("logic:Sample-v0")
    obs, _ = env.reset(options={"index": 0})
    assert "\\boxed{}" in obs
    assert env.step("Bob is kind so he is happy. \\boxed{True}")[1] == 1.0
    env.reset(options={"index": 0})
    assert env.step("<answer>True</answer>")[3:] == (
        False,
        {"answer": ["True"], "format_error": True, "success": False, "em": 0.0, "f1": 0.0, "index": 0},
    )


def test_bad_metric_names_the_field():
    with pytest.raises(ConfigError, match="metric"):
        gem_core.make("qa:Sample-v0", metric="bleu")


def test_hub_ids_fail_offline_with_a_local_copy_hint():
    with pytest.raises(DatasetUnavailable, match=r"gem_core.make\('eval:HotpotQA', path="):
        gem_core.make("eval:HotpotQA")


def test_local_copy_with_column_mapping(tmp_path):
    path = tmp_path / "nq.jsonl"
    path.write_text('{"problem": "Who wrote Hamlet?", "answer": ["Shakespeare", "William Shakespeare"]}\n')
    env = gem_core.make("qa:NaturalQuestions", path=str(path))
    assert "Hamlet" in env.reset(seed=0)[0]
    assert env.step("<answer>william shakespeare</answer>")[1] == 1.0
    assert isinstance(env, QaEnv)
