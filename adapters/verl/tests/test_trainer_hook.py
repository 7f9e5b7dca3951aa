"""``rebn`` in verl's v1 trainer gets explicit turn boundaries, so rejection sampling cannot split a turn.

The samples come from ``gem_env_agent`` through verl's v1 worker storage; the advantage
step is verl's ``PPOTrainer._compute_advantage`` with verl's own rollout correction
(``rollout_rs=token_k1`` rejects tokens whose ``exp(old - rollout)`` ratio leaves the
threshold band).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import verl.trainer.ppo.v1.trainer_base as trainer_base
from gem_verl.advantage import compute_rebn_advantage, turn_ids_from_mask
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories as verl_dispatch
from verl_harness import Server, Storage, compute_advantage, config, padded, play, row, store

from gem_core.conformance import CASES
from gem_core.errors import ConfigError

CASE = next(c for c in CASES if c.name == "bisect")
TOKEN_RS = {
    "rollout_is": None,
    "rollout_is_threshold": 2.0,
    "rollout_is_batch_normalize": False,
    "rollout_rs": "token_k1",
    "rollout_rs_threshold": "0.5_2.0",
    "bypass_mode": False,
}


def _stored(rollout_correction: dict[str, Any] | None) -> tuple[Storage, Any, list[str]]:
    tokenizer = CASE.tokenizer()
    cfg = config(CASE, rollout_correction=rollout_correction)
    episodes = []
    for index, seed in enumerate(CASE.seeds):
        fields = row(CASE.env_id, seed, index=index)
        episodes.append((play(cfg, Server(CASE, tokenizer), tokenizer, fields), fields))
    storage = Storage()
    keys = store(storage, cfg, tokenizer, episodes)
    for key in keys:  # the actor's recomputed log-probs: equal to the rollout's, so nothing is rejected
        sample = storage.samples[("train", key)]
        sample["old_log_probs"] = sample["rollout_log_probs"].clone()
    return storage, cfg, keys


def _rejected_tokens(storage: Storage, keys: list[str]) -> tuple[int, list[int]]:
    """Make the actor disagree with the rollout on three tokens inside the longest turn (its last token too)."""
    best = (-1, 0, 0, 0)
    for row_index, key in enumerate(keys):
        ids = storage.samples[("train", key)]["gem_turn_ids"]
        for turn in range(int(ids.max()) + 1):
            span = torch.nonzero(ids == turn).flatten()
            if len(span) > best[0]:
                best = (len(span), row_index, int(span[0]), int(span[-1]))
    _, row_index, first, last = best
    tokens = [first + 2, first + 4, last]
    old = storage.samples[("train", keys[row_index])]["old_log_probs"]
    old[tokens] += 3.0  # ratio e^3 > 2.0: rejected
    return row_index, tokens


def test_token_level_rejection_cannot_split_a_turn() -> None:
    storage, cfg, keys = _stored(None)
    _, reference = compute_advantage(storage, cfg, keys)

    storage, cfg, keys = _stored(TOKEN_RS)
    row_index, tokens = _rejected_tokens(storage, keys)
    metrics, data = compute_advantage(storage, cfg, keys)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] > 0.0

    mask = padded(data["response_mask"])
    turn_ids = padded(data["gem_turn_ids"], fill=-1).astype(int)
    advantages, expected = padded(data["advantages"]), padded(reference["advantages"])
    assert mask[row_index, tokens].tolist() == [0, 0, 0]  # verl rejected exactly these
    assert int((mask == 0).sum() - (turn_ids < 0).sum()) == 3
    # Read off the rejected mask, this row would show more turns than it played.
    assert turn_ids_from_mask(mask)[row_index].max() > turn_ids[row_index].max()

    kept = mask != 0
    np.testing.assert_array_equal(advantages[kept], expected[kept])  # every other token: as without rejection
    assert np.all(advantages[~kept] == 0.0)
    for r in range(len(keys)):  # one advantage per turn
        for turn in range(turn_ids[r].max() + 1):
            values = np.unique(advantages[r][(turn_ids[r] == turn) & kept[r]])
            assert len(values) == 1


def test_other_estimators_go_to_verls_own_code() -> None:
    hooked = trainer_base.compute_advantage_for_multi_trajectories
    assert hooked.__gem_verl_hook__ and hooked.__wrapped__ is verl_dispatch
    storage, cfg, keys = _stored(None)
    cfg.algorithm.adv_estimator = "grpo"
    _, data = compute_advantage(storage, cfg, keys)
    scores = padded(data["rm_scores"]).sum(axis=1)
    advantages, mask = padded(data["advantages"]), padded(data["response_mask"])
    # GRPO's one score per episode, normalised over the group (the rows share no uid: each its own group -> 0)
    assert scores.shape == (len(keys),) and np.all(advantages[mask == 0] == 0.0)


def test_samples_without_turn_ids_fall_back_to_mask_runs_and_refuse_token_rejection() -> None:
    storage, cfg, keys = _stored(None)
    for key in keys:
        del storage.samples[("train", key)]["gem_turn_ids"]
    _, data = compute_advantage(storage, cfg, keys)  # mask runs: the loop's own mask, so still right
    storage2, cfg2, keys2 = _stored(None)
    _, with_ids = compute_advantage(storage2, cfg2, keys2)
    np.testing.assert_array_equal(padded(data["advantages"]), padded(with_ids["advantages"]))

    storage, cfg, keys = _stored(TOKEN_RS)
    for key in keys:
        del storage.samples[("train", key)]["gem_turn_ids"]
    with pytest.raises(ConfigError, match="rollout_rs"):
        compute_advantage(storage, cfg, keys)


def test_the_estimator_refuses_token_rejection_without_turn_ids() -> None:
    rewards, mask = torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ConfigError, match="token-level"):
        compute_rebn_advantage(rewards, mask, config={"rollout_correction": {"rollout_rs": "seq_max_k2,token_k1"}})
    compute_rebn_advantage(rewards, mask, config={"rollout_correction": {"rollout_rs": "seq_max_k2"}})
