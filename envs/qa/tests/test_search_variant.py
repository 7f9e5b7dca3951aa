import pytest

import gem_core
from gem_core.testing import check_env
from gem_qa.plugin import HUB_DATASETS


def test_every_qa_id_has_a_search_variant():
    ids = set(gem_core.list_envs(tag="search"))
    assert {f"{env_id}-search" for env_id, *_ in HUB_DATASETS} | {"qa:Sample-v0-search"} <= ids
    assert not any(i.startswith("logic:") for i in ids)


def test_sample_with_search_passes_check_env():
    check_env(gem_core.make("qa:Sample-v0-search"), env_factory=lambda: gem_core.make("qa:Sample-v0-search"))


def test_search_then_answer():
    # The search tool's default backend is BM25 over its shipped demo corpus: no server needed.
    env = gem_core.make("qa:Sample-v0-search")
    try:
        obs, _ = env.reset(options={"index": 0})
        assert "search" in obs and "<answer>" in obs
        obs, reward, terminated, _, info = env.step("<search>capital of Australia</search>")
        assert "Canberra" in obs and (reward, terminated, info["tool_calls"]) == (0.0, False, 1)
        _, reward, terminated, _, info = env.step("<answer>Canberra</answer>")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


@pytest.mark.parametrize("metric", ["em", "f1"])
def test_qa_options_reach_the_inner_env(metric):
    env = gem_core.make("qa:Sample-v0-search", metric=metric)
    try:
        assert env.unwrapped.config.metric == metric
    finally:
        env.close()
