"""``adv.estimator=rebn`` on RL2's own tensor layout equals gem_core's ReBN; other estimators stay RL2's."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from gem_rl2.advantages import compute_advantages_with_rebn, rebn_rl2, turn_runs
from gem_rl2.train import install_rebn
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn_advantages

# An episode: sequences; a sequence: turns; a turn: (prompt-or-bridge tokens, generated tokens, reward).
Turn = tuple[int, int, float]
turn_st = st.tuples(st.integers(1, 5), st.integers(1, 6), st.floats(-2, 2, allow_nan=False, width=32))
episode_st = st.lists(st.lists(turn_st, min_size=1, max_size=4), min_size=1, max_size=3)
batch_st = st.lists(episode_st, min_size=1, max_size=5)


def rl2_batch(batch: list[list[list[Turn]]]) -> tuple[dict[str, Any], Any, list[np.ndarray]]:
    """The batch as RL2 0.0.2's rollout builds it (state dicts, shift, packing), and each episode's turn rewards."""
    from RL2.datasets import pack_tensor_dicts, state_dict_to_tensor_dict

    rng = random.Random(0)
    tensor_dicts, lengths, rewards = [], [], []
    for episode in batch:
        lengths.append(len(episode))
        rewards.append(np.array([r for sequence in episode for _, _, r in sequence]))
        for sequence in episode:
            sd: dict[str, list[Any]] = {k: [] for k in ("states", "actions", "action_mask", "logps", "rewards")}
            for context, generated, reward in sequence:
                ids = [rng.randrange(3, 300) for _ in range(context)]
                sd["states"] += ids
                sd["actions"] += [0] * context
                sd["action_mask"] += [0] * context
                sd["logps"] += [0.0] * context
                sd["rewards"] += [0.0] * context
                action = [rng.randrange(3, 300) for _ in range(generated)]
                sd["states"] += action
                sd["actions"] += action
                sd["action_mask"] += [1] * generated
                sd["logps"] += [-0.5] * generated
                sd["rewards"] += [0.0] * (generated - 1) + [reward]
            tensor_dicts.append(state_dict_to_tensor_dict(sd))
    cu_seqs = torch.cumsum(torch.tensor([0, *lengths]), 0)
    return pack_tensor_dicts(tensor_dicts), cu_seqs, rewards


def expected_tokens(tensor_dict: dict[str, Any], cu_seqs: Any, per_turn: list[np.ndarray]) -> torch.Tensor:
    out = torch.zeros(tensor_dict["action_mask"].shape)
    bounds = cu_seqs.tolist()
    for e, values in enumerate(per_turn):
        runs = [(i, s, t) for i in range(bounds[e], bounds[e + 1]) for s, t in turn_runs(tensor_dict["action_mask"][i])]
        for (i, s, t), v in zip(runs, values, strict=True):
            out[i, s:t] = float(v)
    return out


@settings(max_examples=60, deadline=None)
@given(batch=batch_st, gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_rebn_on_rl2_layout_equals_gem_core_rebn(batch: list[list[list[Turn]]], gamma: float) -> None:
    tensor_dict, cu_seqs, rewards = rl2_batch(batch)
    got = rebn_rl2(tensor_dict, cu_seqs, gamma)
    want = expected_tokens(tensor_dict, cu_seqs, rebn_advantages(rewards, gamma))
    assert torch.allclose(got, want, atol=1e-6)
    assert (got[tensor_dict["action_mask"] == 0] == 0).all()


def test_turns_continue_across_an_episodes_sequences() -> None:
    # Episode 0: two sequences (RL2 started a new one), rewards 0 then 1; episode 1: one turn, reward 0.
    tensor_dict, cu_seqs, _ = rl2_batch([[[(3, 2, 0.0)], [(4, 2, 1.0)]], [[(3, 2, 0.0)]]])
    got = rebn_rl2(tensor_dict, cu_seqs, gamma=0.5)
    returns = np.array([0.5, 1.0, 0.0])  # G of the first turn sees the second sequence's reward
    want = (returns - returns.mean()) / (returns.std() + 1e-9)
    firsts = [got[i][tensor_dict["action_mask"][i] == 1][0].item() for i in range(3)]
    assert firsts == pytest.approx(want.tolist(), abs=1e-6)


@pytest.mark.parametrize(
    ("cu_seqs", "match"),
    [
        pytest.param([0, 1], "cu_seqs", id="too-few-sequences"),
        pytest.param([1, 2], "cu_seqs", id="not-from-zero"),
        pytest.param([0, 2, 1, 2], "cu_seqs", id="falling"),
    ],
)
def test_bad_cu_seqs_are_named(cu_seqs: list[int], match: str) -> None:
    tensor_dict, _, _ = rl2_batch([[[(3, 2, 1.0)]], [[(3, 2, 0.0)]]])
    with pytest.raises(RLInputError, match=match):
        rebn_rl2(tensor_dict, torch.tensor(cu_seqs), 1.0)


def test_an_episode_without_generated_tokens_is_named() -> None:
    tensor_dict, cu_seqs, _ = rl2_batch([[[(3, 2, 1.0)]], [[(3, 2, 0.0)]]])
    tensor_dict["action_mask"][1] = 0
    with pytest.raises(RLInputError, match="episode 1"):
        rebn_rl2(tensor_dict, cu_seqs, 1.0)


@pytest.mark.usefixtures("rl2_process_group")
@pytest.mark.parametrize("estimator", ["reinforce", "gae"])
def test_other_estimators_are_rl2s_own(estimator: str) -> None:
    from RL2.utils.algorithms import compute_advantages

    batch = [[[(3, 2, 1.0), (2, 3, 0.5)]], [[(3, 2, 0.0)]], [[(2, 4, 2.0)]], [[(2, 1, -1.0)]]]
    config = OmegaConf.create(
        {"estimator": estimator, "gamma": 1.0, "lamda": 1.0, "responses_per_prompt": 2, "global_norm": False}
        | {"norm_var": True}
    )
    ours, theirs = rl2_batch(batch)[:2], rl2_batch(batch)[:2]
    if estimator == "gae":
        for td, _ in (ours, theirs):
            td["values"] = torch.linspace(0, 1, td["states"].numel()).view(td["states"].shape)
    compute_advantages_with_rebn(compute_advantages)(config, ours[0], ours[1], 1)
    compute_advantages(config, theirs[0], theirs[1], 1)
    assert torch.equal(ours[0]["advantages"], theirs[0]["advantages"])


@pytest.mark.usefixtures("rl2_process_group")
def test_the_launcher_patches_the_binding_rl2s_trainer_calls() -> None:
    import RL2.trainer.ppo as ppo
    import RL2.utils.algorithms as algorithms

    original = ppo.compute_advantages
    try:
        install_rebn(ppo)
        install_rebn(ppo)  # idempotent: wrapped once
        assert ppo.compute_advantages.__wrapped__ is algorithms.compute_advantages
        tensor_dict, cu_seqs, rewards = rl2_batch([[[(3, 2, 1.0)]], [[(3, 2, 0.0), (1, 2, 1.0)]]])
        config = OmegaConf.create({"estimator": "rebn", "gamma": 0.9})
        ppo.compute_advantages(config, tensor_dict, cu_seqs, 1)
        want = expected_tokens(tensor_dict, cu_seqs, rebn_advantages(rewards, 0.9))
        assert torch.allclose(tensor_dict["advantages"], want, atol=1e-6)
    finally:
        ppo.compute_advantages = original


@settings(max_examples=40, deadline=None)
@given(batch=batch_st.flatmap(lambda b: st.tuples(st.just(b), st.sets(st.integers(0, len(b) - 1)))))
def test_failed_episodes_weigh_nothing_and_leave_rebn_unchanged(batch: tuple[list[Any], set[int]]) -> None:
    """For any batch and any failing subset: failed episodes get no mask, reward or advantage; survivors keep theirs."""
    from gem_rl2.episodes import ENV_ERROR_REWARD

    episodes, failing = batch
    tensor_dict, cu_seqs, _ = rl2_batch(episodes)
    bounds = cu_seqs.tolist()
    for e in failing:  # the env module's marker on the failed step's last token
        last = bounds[e + 1] - 1
        tensor_dict["rewards"][last, int(tensor_dict["action_mask"][last].nonzero()[-1])] = ENV_ERROR_REWARD
    compute = compute_advantages_with_rebn(lambda *args: None)
    compute(OmegaConf.create({"estimator": "rebn", "gamma": 0.9}), tensor_dict, cu_seqs, 1)
    assert compute.last_metrics == {"gem/env_errors": float(len(failing))}
    survivors = [ep for e, ep in enumerate(episodes) if e not in failing]
    for e in range(len(episodes)):
        rows = slice(bounds[e], bounds[e + 1])
        if e in failing:
            assert not tensor_dict["action_mask"][rows].any() and not tensor_dict["rewards"][rows].any()
            assert not tensor_dict["advantages"][rows].any()
    if survivors:
        alone, alone_cu, _ = rl2_batch(survivors)
        want = rebn_rl2(alone, alone_cu, 0.9)
        kept = [r for e in range(len(episodes)) if e not in failing for r in range(bounds[e], bounds[e + 1])]
        got = tensor_dict["advantages"][kept]
        width = min(got.shape[1], want.shape[1])
        torch.testing.assert_close(got[:, :width], want[:, :width])
