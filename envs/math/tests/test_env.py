import json
import subprocess
import sys
import threading

import pytest

import gem_core
from gem_core.errors import ConfigError, DatasetUnavailable, ResetNeeded
from gem_core.testing import check_env
from gem_math.data import load_split, sample_path
from gem_math.env import MathEnv
from gem_math.plugin import HUB_DATASETS


def test_sample_passes_check_env():
    check_env(gem_core.make("math:Sample-v0"), env_factory=lambda: gem_core.make("math:Sample-v0"))


def test_every_gem_math_id_is_registered():
    ids = set(gem_core.list_envs())
    expected = {"math:GSM8K", "math:Orz57K", "math:Math12K", "eval:MATH500", "eval:AIME24", "math:Sample-v0"}
    assert expected <= ids
    assert {env_id for env_id, *_ in HUB_DATASETS} <= ids


def test_correct_wrong_and_unboxed_answers():
    env = gem_core.make("math:Sample-v0", format_error_reward=-0.1)
    obs, info = env.reset(options={"index": 1})
    assert "\\frac{2}{3}" in obs and "\\boxed{}" in obs and info == {"index": 1}
    _, reward, terminated, truncated, info = env.step("2/3 + 1/6 = 5/6, so \\boxed{\\dfrac{5}{6}}")
    assert (reward, terminated, truncated, info["success"], info["parsed_action"]) == (
        1.0,
        True,
        False,
        True,
        "\\dfrac{5}{6}",
    )
    env.reset(options={"index": 1})
    assert env.step("\\boxed{0.8}")[1] == 0.0
    env.reset(options={"index": 1})
    _, reward, *_, info = env.step("five sixths")
    assert reward == -0.1 and info["format_error"] and not info["success"]


def test_step_needs_reset_each_episode():
    env = gem_core.make("math:Sample-v0")
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{1}")
    env.reset(seed=3)
    env.step("\\boxed{1}")
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{1}")


@pytest.mark.parametrize("index", [-1, 24, "3", 1.0], ids=["negative", "past-end", "str", "float"])
def test_bad_index_is_a_config_error(index):
    env = gem_core.make("math:Sample-v0")
    with pytest.raises(ConfigError, match="index"):
        env.reset(options={"index": index})


def test_same_seed_same_question_and_seeds_cover_the_data():
    env = gem_core.make("math:Sample-v0")
    assert env.reset(seed=5) == env.reset(seed=5)
    assert len({env.reset(seed=s)[1]["index"] for s in range(60)}) > 12


def test_data_is_loaded_once_per_process():
    a, b = gem_core.make("math:Sample-v0"), gem_core.make("math:Sample-v0")
    assert a.data is b.data and len(a) == 24


def test_column_mapping_and_local_jsonl(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"q": "What is 6 times 7?", "sol": "42"}) + "\n")
    env = MathEnv(path=str(path), question_column="q", answer_column="sol", prompt="Q: {question}")
    assert env.reset(seed=0)[0] == "Q: What is 6 times 7?"
    assert env.step("\\boxed{42}")[1] == 1.0


def test_local_parquet(tmp_path):
    parquet = tmp_path / "m.parquet"
    load_split(sample_path("math.jsonl")).to_parquet(str(parquet))
    env = gem_core.make("math:GSM8K", path=str(parquet))
    env.reset(options={"index": 0})
    assert env.step("\\boxed{25}")[1] == 1.0


def test_missing_column_names_the_columns(tmp_path):
    with pytest.raises(ConfigError, match=r"no column\(s\) \['question'\].*problem"):
        MathEnv(path=sample_path("math.jsonl"), question_column="question")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"grading_timeout_s": 0}, "grading_timeout_s"), ({"colour": 1}, "colour"), ({"path": "/nope/x.jsonl"}, "nope")],
    ids=["zero-timeout", "unknown-field", "missing-file"],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        gem_core.make("math:Sample-v0", **kwargs)


def test_unreachable_hub_says_how_to_use_a_local_copy():
    with pytest.raises(DatasetUnavailable) as err:
        gem_core.make("math:GSM8K")
    message = str(err.value)
    assert "axon-rl/GSM-8k" in message and "HF_HUB_OFFLINE" in message
    assert "gem_core.make('math:GSM8K', path=" in message and "to_parquet" in message


def test_unreachable_hub_in_a_fresh_offline_process():
    # The same check where HF_HUB_OFFLINE is set before anything imports datasets.
    code = (
        "import gem_core\n"
        "from gem_core.errors import DatasetUnavailable\n"
        "try:\n    gem_core.make('eval:AIME24')\nexcept DatasetUnavailable as e:\n    print('OK', 'path=' in str(e))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**_env(), "HF_HUB_OFFLINE": "1"}
    )
    assert out.stdout.strip() == "OK True", out.stderr[-2000:]


def _env():
    import os

    return dict(os.environ)


def test_envs_step_from_threads():
    envs = [gem_core.make("math:Sample-v0") for _ in range(6)]
    rewards: list[float] = []

    def run(env):
        env.reset(options={"index": 2})
        rewards.append(env.step("so x = \\boxed{6.0}")[1])

    threads = [threading.Thread(target=run, args=(e,)) for e in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rewards == [1.0] * 6


def test_async_env_through_to_async():
    import asyncio

    async def main():
        env = gem_core.to_async(gem_core.make("math:Sample-v0"))
        await env.reset(options={"index": 0})
        result = await env.step("\\boxed{25}")
        await env.close()
        return result

    assert asyncio.run(main())[1] == 1.0
