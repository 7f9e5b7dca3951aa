"""Per-turn ReBN in OpenRLHF's experience maker, on OpenRLHF's own Experience objects."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gem_openrlhf.executor import EpisodeLabel
from harness import experience_maker_for, to_experiences, trainer_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.advantages import rebn_advantages


def response_for(rewards: list[float], lengths: list[tuple[int, int]], prompt: int, index: int) -> dict:
    """A sample as gem's executor returns it: prompt, then per turn (generated, bridge) tokens."""
    tokens = [7] * prompt
    ranges = []
    for generated, bridge in lengths:
        ranges.append((len(tokens), len(tokens) + generated))
        tokens += [5] * generated + [9] * bridge
    label = EpisodeLabel(
        start_state_id=f"test/seed={index}",
        turn_rewards=rewards,
        turn_actions=["a"] * len(rewards),
        turn_ranges=ranges,
        terminated=True,
        truncated=False,
    )
    return {
        "prompt": "p",
        "label": label.model_dump_json(),
        "images": None,
        "mm_train_inputs": None,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": None,
        "reward": sum(rewards),
        "scores": sum(rewards),
        "truncated": False,
        "extra_logs": {},
    }


episode = st.integers(1, 5).flatmap(
    lambda turns: st.tuples(
        st.lists(st.floats(-2, 2, allow_nan=False).map(lambda x: round(x, 3)), min_size=turns, max_size=turns),
        st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4)), min_size=turns, max_size=turns),
        st.integers(1, 5),
    )
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    episodes=st.lists(episode, min_size=1, max_size=6),
    gamma=st.sampled_from([1.0, 0.9, 0.5]),
    micro_batch=st.integers(1, 4),
    max_len=st.sampled_from([12, 30, 1000]),
)
def test_every_generated_token_gets_its_turns_rebn_advantage(episodes, gamma, micro_batch, max_len, rebn_patched):
    responses = [response_for(r, lengths, p, i) for i, (r, lengths, p) in enumerate(episodes)]
    args = trainer_args(gamma=gamma, micro_batch_size=micro_batch)
    maker = experience_maker_for(args, tokenizer=type("T", (), {"pad_token_id": 0})())
    experiences = maker.compute_advantages_and_returns(
        maker.split_rollout_samples(to_experiences(responses, args, max_len))
    )
    expected = rebn_advantages([np.asarray(r) for r, _, _ in episodes], gamma)
    rows = [(e, row) for e in experiences for row in range(e.action_mask.shape[0])]
    assert len(rows) == len(episodes)
    for (experience, row), response, turn_advantages in zip(rows, responses, expected, strict=True):
        advantages = experience.advantages[row]
        mask = experience.action_mask[row]
        assert advantages.shape == mask.shape
        assert torch.all(advantages[~mask.bool()] == 0)
        for (start, end), value in zip(response["action_ranges"], turn_advantages, strict=True):
            tokens = advantages[start - 1 : min(end - 1, mask.shape[0])]
            assert np.allclose(tokens.double().numpy(), value, atol=1e-6)
        assert experience.info["return"][row].item() == pytest.approx(response["reward"], abs=1e-5)
        assert experience.kl is None


def test_kl_folded_into_the_reward_is_refused(rebn_patched) -> None:
    args = trainer_args(kl_use_loss=False)
    maker = experience_maker_for(args, tokenizer=type("T", (), {"pad_token_id": 0})(), kl_coef=0.01)
    experiences = to_experiences([response_for([1.0], [(2, 1)], 3, 0)], args, 100)
    with pytest.raises(ConfigError, match=r"--algo.kl.use_loss.*--algo.kl.init_coef 0"):
        maker.compute_advantages_and_returns(experiences)


def test_samples_of_another_executor_are_refused(rebn_patched) -> None:
    args = trainer_args()
    maker = experience_maker_for(args, tokenizer=type("T", (), {"pad_token_id": 0})())
    response = response_for([1.0], [(2, 1)], 3, 0)
    response["label"] = "42"
    with pytest.raises(TrajectoryError, match="not a gem episode label"):
        maker.compute_advantages_and_returns(to_experiences([response], args, 100))


def test_ranges_that_disagree_with_the_mask_are_refused(rebn_patched) -> None:
    args = trainer_args()
    maker = experience_maker_for(args, tokenizer=type("T", (), {"pad_token_id": 0})())
    response = response_for([1.0, 0.0], [(2, 1), (2, 1)], 3, 0)
    response["action_ranges"] = response["action_ranges"][:1]
    with pytest.raises(TrajectoryError, match="do not match its action mask"):
        maker.compute_advantages_and_returns(to_experiences([response], args, 100))


def test_openrlhfs_own_estimators_still_run_on_gem_samples() -> None:
    args = trainer_args(estimator="reinforce", gamma=1.0)
    maker = experience_maker_for(args, tokenizer=type("T", (), {"pad_token_id": 0})())
    responses = [response_for([0.5, 1.0], [(2, 1), (3, 1)], 3, 0), response_for([0.0], [(2, 2)], 4, 1)]
    experiences = maker.split_rollout_samples(to_experiences(responses, args, 100))
    for experience in experiences:
        experience.kl = torch.zeros_like(experience.action_mask, dtype=torch.float32)
    out = maker.compute_advantages_and_returns(experiences)
    # REINFORCE++: the summed episode reward on the last generated token, token-level whitening
    assert out[0].info["return"].tolist() == pytest.approx([1.5, 0.0])
