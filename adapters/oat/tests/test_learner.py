"""GemOatLearner.process_feedback_data: oat's bookkeeping with float64 ReBN advantages, into oat's dataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from oat.types import Transition

from gem_core.errors import ConfigError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer


def transition(reward: float, done: bool, prompt_len: int = 3) -> Transition:
    return Transition(
        obs="o",
        action="a",
        rewards=reward,
        done=done,
        prompt="p",
        prompt_ids=list(range(prompt_len)),
        response="r",
        response_ids=[7, 8],
        response_logprobs=[-0.1, -0.2],
        response_is_truncated=False,
        action_is_formatted=True,
        info={"gem/turn": 0.0, "gem/terminated": float(done), "gem/truncated": 0.0},
    )


def episodes_of(rewards: list[list[float]]) -> list[list[Transition]]:
    return [[transition(r, i == len(rs) - 1) for i, r in enumerate(rs)] for rs in rewards]


@pytest.mark.parametrize("distributed", [False, True], ids=["one-process", "gloo-all-reduce"])
def test_advantages_are_rebn_of_per_turn_returns(
    distributed: bool, request: pytest.FixtureRequest, make_learner: Any
) -> None:
    if distributed:
        request.getfixturevalue("gloo_group")
    rewards = [[0.0, 0.0, 1.0], [-0.1, 0.5], [0.2]]
    learner = make_learner(gamma=0.9, rollout_batch_size_per_device=64)
    data = episodes_of(rewards)
    learner.process_feedback_data(data)
    returns = [discounted_returns(r, 0.9) for r in rewards]
    expected = rebn(np.concatenate(returns))
    got = [t.info["advantages"] for ep in data for t in ep]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose([t.info["returns"] for ep in data for t in ep], np.concatenate(returns), rtol=1e-12)
    assert all(t.info["values"] == 0.0 for ep in data for t in ep)
    # oat's own bookkeeping ran: every transition is in its buffer, counted as queries.
    assert learner.pi_buffer == [t for ep in data for t in ep]
    assert learner.query_step == 6


@pytest.mark.parametrize("reward", [0.1, -0.1, 0.6561, -0.19, 0.0, 1.0], ids=str)
def test_equal_returns_give_exact_zeros(reward: float, make_learner: Any) -> None:
    learner = make_learner(gamma=1.0)
    data = episodes_of([[reward]] * 37)
    learner.process_feedback_data(data)
    assert [t.info["advantages"] for ep in data for t in ep] == [0.0] * 37


def test_subsampling_keeps_the_batch_wide_advantages(make_learner: Any) -> None:
    learner = make_learner(gamma=1.0, rollout_batch_size_per_device=4)
    data = episodes_of([[0.0, 1.0], [1.0, 0.0, 0.0], [0.5, 0.5]])
    learner.process_feedback_data(data)
    assert len(learner.pi_buffer) == 4
    everything = {id(t): t.info["advantages"] for ep in data for t in ep}
    assert all(t.info["advantages"] == everything[id(t)] for t in learner.pi_buffer)
    assert np.isclose(np.mean(list(everything.values())), 0.0)


def test_oats_dataset_carries_the_advantages(gloo_group: None, make_learner: Any) -> None:
    from oat.algorithms.ppo_multiturn import MultiTurnTransitionDataset
    from oat.utils.deepspeed import DeepspeedStrategy

    learner = make_learner(gamma=0.5, rollout_batch_size_per_device=64)
    data = episodes_of([[0.0, 1.0], [0.25]])
    learner.process_feedback_data(data)
    dataset = MultiTurnTransitionDataset(
        learner.pi_buffer, tokenizer=build_chat_tokenizer("chatml"), strategy=DeepspeedStrategy(args=learner.args)
    )
    batch = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    assert batch["advantages"] == [t.info["advantages"] for ep in data for t in ep]
    assert batch["returns"] == [0.5, 1.0, 0.25]


@pytest.mark.parametrize(
    ("flag", "value"),
    [("whiten_adv", True), ("critic_type", "ppo"), ("train_batch_size_per_device", 2), ("env_ids", [])],
    ids=["whiten_adv", "ppo-critic", "batch-per-device", "no-env"],
)
def test_learner_refuses_settings_that_break_rebn(flag: str, value: Any, make_learner: Any) -> None:
    learner = make_learner(**{flag: value})
    with pytest.raises(ConfigError, match=flag if flag != "critic_type" else "critic_type ppo"):
        learner._init(learner.args, [])
