"""DAPO's group filter (``algorithm.filter_groups``) through verl's own replay buffer, per episode in both layouts.

verl 0.9.1's ``ReplayBuffer`` drops a finished group when its metric has zero spread
over the group's samples: ``reward`` sums each sample's ``rm_scores``; any other name
reads each sample's ``extra_fields["reward_extra_info"]``. gem's loop writes its
per-episode metrics there (the same values on each sample of an episode), so a group is
kept exactly when its episodes differ, however many samples (turns) each one has.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
import verl.trainer.ppo.v1.replay_buffer as replay_buffer
from gem_verl.options import EPISODE_METRICS, REWARD_METRIC, check_trainer_config
from hypothesis import HealthCheck, given, settings
from scripted_groups import BASE_CASE, MAX_TURNS, Move, Script, expected_metrics, loop_config, play_group, register
from verl_harness import Storage

from gem_core.errors import ConfigError

LAYOUTS = ["sequence", "transition"]


def _metrics_for(layout: str) -> list[str]:
    """Every metric gem documents for the layout (``reward`` is refused with the transition layout)."""
    return [*EPISODE_METRICS, *([REWARD_METRIC] if layout == "sequence" else [])]


def _buffer(metric: str) -> replay_buffer.ReplayBuffer:
    return replay_buffer.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.0,
        refill_fn=lambda count: count,
        filter_groups_metric=metric,
        train_batch_size=1,
        gen_batch_size=1,
    )


def filtered_by_verl(storage: Storage, metric: str) -> set[str]:
    """The uids verl's replay buffer evicts as DAPO groups without spread."""
    saved = replay_buffer.tq
    replay_buffer.tq = storage
    try:
        buffer = _buffer(metric)
        buffer._sync_metadata_from_transfer_queue()
        uids, _ = buffer._dapo_filtered_keys("train")
    finally:
        replay_buffer.tq = saved
    return uids


def _value(script: Script, metric: str) -> float:
    expected = expected_metrics(script)
    if metric == REWARD_METRIC:  # rm_scores: a failed episode trains nothing and carries 0
        return 0.0 if expected["env_error"] else expected["episode_return"]
    return expected[metric]


moves = st.one_of(
    st.builds(Move, reward=st.integers(0, 2)),
    st.builds(lambda r, win: Move(reward=r, end=True, win=win), st.integers(0, 2), st.booleans()),
    st.just(Move(kind="cut")),
    st.just(Move(kind="boom")),
)
scripts = st.lists(moves, min_size=1, max_size=MAX_TURNS).map(tuple)
groups = st.lists(st.lists(scripts, min_size=2, max_size=3), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    register()
    return BASE_CASE.tokenizer()


@pytest.mark.parametrize("layout", LAYOUTS, ids=["per-episode", "per-transition"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(group_scripts=groups)
def test_verl_keeps_exactly_the_groups_whose_episodes_differ(
    tokenizer: Any, layout: str, group_scripts: list[list[Script]]
) -> None:
    cfg = loop_config(layout)
    storage = Storage()
    for index, scripts_of_group in enumerate(group_scripts):
        play_group(storage, cfg, tokenizer, f"group{index}", scripts_of_group)
    for metric in _metrics_for(layout):
        spread = {
            f"group{index}"
            for index, scripts_of_group in enumerate(group_scripts)
            if len({_value(script, metric) for script in scripts_of_group}) > 1
        }
        everything = {f"group{index}" for index in range(len(group_scripts))}
        assert everything - filtered_by_verl(storage, metric) == spread, metric


def test_every_sample_carries_its_episodes_metrics(tokenizer: Any) -> None:
    """The metrics themselves: each transition of an episode carries the episode's values, worked out independently."""
    scripts = [
        (Move(reward=1), Move(kind="cut"), Move(reward=2, end=True, win=True)),
        (Move(reward=1), Move(kind="boom")),
        (Move(reward=2),),  # runs into the turn limit
    ]
    storage = Storage()
    keys = play_group(storage, loop_config("transition"), tokenizer, "group0", scripts)
    for key in keys:
        session = int(key.split("_")[1])
        assert storage.samples[("train", key)]["extra_fields"]["reward_extra_info"] == expected_metrics(
            scripts[session]
        )
    assert sorted(int(k.split("_")[1]) for k in keys).count(2) == MAX_TURNS  # one sample per turn


def test_verls_reward_metric_compares_turns_in_the_transition_layout_so_gem_refuses_it(tokenizer: Any) -> None:
    """Two identical two-turn episodes: per-turn returns differ (0.9, 1.0), so verl would keep the group."""
    two_turns = (Move(reward=0), Move(reward=1, end=True))
    storage = Storage()
    play_group(storage, loop_config("transition"), tokenizer, "same", [two_turns, two_turns])
    assert filtered_by_verl(storage, REWARD_METRIC) == set()  # kept: the defect the check prevents
    assert filtered_by_verl(storage, "episode_return") == {"same"}
    dapo = {"algorithm.filter_groups.enable": True, "actor_rollout_ref.rollout.n": 2}
    with pytest.raises(ConfigError, match="metric=episode_return"):
        check_trainer_config(loop_config("transition", **dapo, **{"algorithm.filter_groups.metric": "reward"}))
