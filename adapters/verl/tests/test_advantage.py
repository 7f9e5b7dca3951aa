"""``rebn`` as verl runs it: ``compute_advantage`` on a ``DataProto`` against the core's ReBN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl  # noqa: F401  (the entry point registers ``rebn``)
from gem_verl.advantage import compute_rebn_advantage, turn_ids_from_mask, turn_rewards_from_tokens
from hypothesis import given, settings
from hypothesis import strategies as st
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.ray_trainer import compute_advantage

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.returns import batch_returns


def _rows(episodes: list[list[tuple[int, int]]], width: int, rng: np.random.Generator):
    """Pack episodes into padded rows like the sequence layout.

    Each episode is a list of turns ``(generated, env_tokens)``: the turn's generated
    tokens (mask 1, reward on the last) then the env reply (mask 0).
    """
    rewards = np.zeros((len(episodes), width), dtype=np.float32)
    mask = np.zeros((len(episodes), width), dtype=np.int64)
    turn_rewards = []
    for row, turns in enumerate(episodes):
        pos = 0
        per_turn = []
        for generated, env_tokens in turns:
            reward = float(rng.choice([-0.1, 0.0, 0.5, 1.0]))
            mask[row, pos : pos + generated] = 1
            rewards[row, pos + generated - 1] = reward
            per_turn.append(reward)
            pos += generated + env_tokens
        assert pos <= width
        turn_rewards.append(np.asarray(per_turn, dtype=np.float32).astype(np.float64))
    return torch.from_numpy(rewards), torch.from_numpy(mask), turn_rewards


def _expected_tokens(turns_per_row, values_per_row, mask: torch.Tensor) -> np.ndarray:
    """Broadcast one value per turn onto the turn's generated tokens."""
    out = np.zeros(mask.shape, dtype=np.float64)
    for row, values in enumerate(values_per_row):
        pos = 0
        for (generated, env_tokens), value in zip(turns_per_row[row], values, strict=True):
            out[row, pos : pos + generated] = value
            pos += generated + env_tokens
    return out


EPISODES = {
    "one-turn-each": [[(3, 0)], [(2, 0)], [(5, 0)]],
    "multi-turn": [[(3, 2), (2, 4), (4, 0)], [(1, 1), (6, 0)], [(2, 3), (2, 3), (2, 3), (1, 0)]],
    "mixed-with-empty-row": [[(4, 1), (2, 0)], [], [(3, 0)]],
}


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0], ids=["gamma1", "gamma0.9", "gamma0"])
@pytest.mark.parametrize("name", list(EPISODES), ids=list(EPISODES))
def test_compute_advantage_dispatches_to_rebn_and_matches_core(name: str, gamma: float) -> None:
    episodes = EPISODES[name]
    rewards, mask, turn_rewards = _rows(episodes, width=20, rng=np.random.default_rng(7))
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array([f"u{i}" for i in range(len(episodes))], dtype=object)},
    )
    out = compute_advantage(data, adv_estimator="rebn", config=AlgoConfig(gamma=gamma, adv_estimator="rebn"))

    expected_adv = _expected_tokens(episodes, rebn_advantages(turn_rewards, gamma), mask)
    expected_ret = _expected_tokens(episodes, batch_returns(turn_rewards, gamma), mask)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.batch["returns"].numpy(), expected_ret, rtol=1e-5, atol=1e-6)
    assert out.batch["advantages"].dtype == torch.float32


def test_gamma_discounts_turns_not_tokens() -> None:
    # Two turns, reward only at the end: G_0 = gamma * 1 however many tokens the turns have.
    rewards = torch.zeros(2, 12)
    mask = torch.zeros(2, 12, dtype=torch.long)
    mask[0, 0:5] = 1  # long first turn
    mask[0, 7:9] = 1
    rewards[0, 8] = 1.0
    mask[1, 0:1] = 1  # short first turn
    mask[1, 3:4] = 1
    rewards[1, 3] = 1.0
    _, returns = compute_rebn_advantage(rewards, mask, config={"gamma": 0.5})
    assert returns[0, 0].item() == pytest.approx(0.5)
    assert returns[1, 0].item() == pytest.approx(0.5)
    assert returns[0, 8].item() == pytest.approx(1.0)


def test_rewards_on_env_tokens_count_for_the_turn_before() -> None:
    rewards = np.array([[0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0, 0, 1, 0, 0], [0, 0, 1, 1, 0, 0, 0]])
    per_row, owner = turn_rewards_from_tokens(rewards, turn_ids_from_mask(mask))
    assert [r.tolist() for r in per_row] == [[2.0, 0.0], [0.5]]
    assert owner.tolist() == [[0, 0, -1, -1, 1, -1, -1], [-1, -1, 2, 2, -1, -1, -1]]


def test_equal_returns_give_zero_advantages() -> None:
    rewards = torch.zeros(3, 4)
    mask = torch.ones(3, 4, dtype=torch.long)
    rewards[:, -1] = 1.0
    advantages, _ = compute_rebn_advantage(rewards, mask)
    assert torch.count_nonzero(advantages) == 0


@pytest.mark.parametrize(
    ("rewards", "mask", "message"),
    [
        (torch.zeros(2, 3), torch.ones(2, 4), "same"),
        (torch.tensor([[0.0, float("nan")]]), torch.ones(1, 2), "finite"),
    ],
    ids=["shape-mismatch", "nan-reward"],
)
def test_bad_inputs_raise_typed_errors(rewards: torch.Tensor, mask: torch.Tensor, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        compute_rebn_advantage(rewards, mask)


def test_bad_gamma_is_rejected() -> None:
    with pytest.raises(RLInputError, match="gamma"):
        compute_rebn_advantage(torch.zeros(1, 2), torch.ones(1, 2), config={"gamma": 1.5})


def _turn_ids(episodes: list[list[tuple[int, int]]], width: int) -> torch.Tensor:
    ids = torch.full((len(episodes), width), -1, dtype=torch.long)
    for row, turns in enumerate(episodes):
        pos = 0
        for turn, (generated, env_tokens) in enumerate(turns):
            ids[row, pos : pos + generated] = turn
            pos += generated + env_tokens
    return ids


_EPISODES = st.lists(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4)), min_size=0, max_size=4), min_size=1, max_size=5
)


@settings(max_examples=60, deadline=None)
@given(episodes=_EPISODES, seed=st.integers(0, 2**16), fraction=st.floats(0.0, 0.9))
def test_zeroed_tokens_inside_turns_change_no_other_advantage(
    episodes: list[list[tuple[int, int]]], seed: int, fraction: float
) -> None:
    # Any tokens of any turns zeroed in the mask (token-level rejection sampling): with the explicit
    # turn ids, every other token keeps its advantage and each turn keeps one advantage.
    rng = np.random.default_rng(seed)
    width = max(1, max(sum(g + e for g, e in turns) for turns in episodes))
    rewards, mask, _ = _rows(episodes, width, rng)
    turn_ids = _turn_ids(episodes, width)
    assert torch.equal(turn_ids >= 0, mask.bool())
    before, returns_before = compute_rebn_advantage(rewards, mask, config={"gamma": 0.9}, turn_ids=turn_ids)
    rejected = torch.from_numpy(rng.random(mask.shape) < fraction) & mask.bool()
    kept_mask = mask * (~rejected)
    after, returns_after = compute_rebn_advantage(
        rewards, kept_mask, config={"gamma": 0.9, "rollout_correction": {"rollout_rs": "token_k1"}}, turn_ids=turn_ids
    )
    kept = kept_mask.bool()
    assert torch.equal(after[kept], before[kept]) and torch.equal(returns_after[kept], returns_before[kept])
    assert torch.count_nonzero(after[~kept]) == 0
    for row in range(len(episodes)):
        for turn in range(int(turn_ids[row].max()) + 1):
            assert len(torch.unique(after[row][(turn_ids[row] == turn) & kept[row]])) <= 1


def test_turn_ids_must_match_the_mask_shape() -> None:
    with pytest.raises(RLInputError, match="turn_ids"):
        compute_rebn_advantage(torch.zeros(1, 3), torch.ones(1, 3), turn_ids=torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(RLInputError, match=">= -1"):
        compute_rebn_advantage(torch.zeros(1, 2), torch.ones(1, 2), turn_ids=torch.tensor([[0, -2]]))
