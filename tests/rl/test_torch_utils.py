"""Optional torch helpers. Skipped where torch is not installed (it is not a gem_core dependency)."""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn
from gem_core.rl.layouts import EpisodeSequence
from gem_core.rl.offpolicy import OffPolicyConfig, correct

torch = pytest.importorskip("torch", reason="torch is optional; install torch==2.13.0 to run these")

from gem_core.rl.torch_utils import (  # noqa: E402
    all_reduce_moments,
    off_policy_correction_tensor,
    pad_sequences,
    rebn_tensor,
)


def sequence(ids: list[int], mask: list[int], advantages: list[float] | None) -> EpisodeSequence:
    n = len(ids)
    return EpisodeSequence(
        input_ids=np.asarray(ids, dtype=np.int64),
        loss_mask=np.asarray(mask, dtype=np.int8),
        token_rewards=np.arange(n, dtype=np.float64),
        token_advantages=None if advantages is None else np.asarray(advantages),
        token_logprobs=None,
        turn_spans=[],
        prompt_length=1,
        episode_id="e",
        start_state_id="s",
    )


@pytest.mark.parametrize("side", ["right", "left"], ids=["right-pad", "left-pad"])
def test_pad_sequences(side: str) -> None:
    batch = pad_sequences(
        [sequence([5, 6, 7], [0, 1, 1], [0, 2, 2]), sequence([8], [1], [3])], pad_token_id=0, padding_side=side
    )
    assert set(batch) == {"input_ids", "attention_mask", "loss_mask", "token_rewards", "token_advantages"}
    if side == "right":
        assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
        assert batch["loss_mask"].tolist() == [[False, True, True], [True, False, False]]
        assert batch["token_advantages"].tolist() == [[0, 2, 2], [3, 0, 0]]
    else:
        assert batch["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["input_ids"].dtype == torch.int64 and batch["token_advantages"].dtype == torch.float32
    without = pad_sequences([sequence([1], [1], None)], pad_token_id=0)
    assert "token_advantages" not in without
    with pytest.raises(RLInputError, match="padding_side"):
        pad_sequences([sequence([1], [1], None)], pad_token_id=0, padding_side="middle")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_rebn_tensor_matches_numpy_and_is_nan_free(dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    returns = torch.tensor([0.0, 1.0, 0.5, -0.1], dtype=torch_dtype)
    out = rebn_tensor(returns)
    assert out.dtype == torch_dtype
    expected = rebn(returns.to(torch.float64).numpy())
    np.testing.assert_allclose(out.to(torch.float64).numpy(), expected, atol=1e-2 if dtype == "bfloat16" else 1e-6)
    for value in (-0.1, 0.1, 0.6561, -999500.0):
        for n in (1, 7, 1000):
            assert not rebn_tensor(torch.full((n,), value, dtype=torch_dtype)).any()
    # A small spread at a large magnitude is resolved (the statistics are taken around the mean).
    big = rebn_tensor(torch.tensor([-999501.0, -999500.0], dtype=torch.float64))
    np.testing.assert_allclose(big.numpy(), [-1.0, 1.0], atol=1e-8)


@pytest.mark.parametrize("value", [0.1, 3.0, -5.5, 1e10, 1e-300], ids=lambda v: f"at-{v:g}")
@pytest.mark.parametrize("ulps", [1, 2, 3], ids=lambda n: f"{n}-ulps")
def test_rebn_tensor_is_zero_mean_for_ulp_spreads(value: float, ulps: int) -> None:
    high = value
    for _ in range(ulps):
        high = float(np.nextafter(high, np.inf))
    out = rebn_tensor(torch.tensor([value, high, value], dtype=torch.float64)).tolist()
    assert all(np.isfinite(out)) and abs(sum(out)) <= 8 * np.finfo(np.float64).eps * max(map(abs, out)), out


def test_moments_without_distributed_are_local() -> None:
    m = all_reduce_moments(torch.tensor([1.0, 3.0]))
    assert (m.total, m.total_sq, m.count) == (4.0, 10.0, 2)
    with pytest.raises(RLInputError, match="NaN or inf"):
        rebn_tensor(torch.tensor([1.0, float("nan")]))


def _worker(rank: int, port: int, shards: list[list[float]], out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=len(shards))
    try:
        result = rebn_tensor(torch.tensor(shards[rank], dtype=torch.float32))
        np.save(os.path.join(out_dir, f"{rank}.npy"), result.numpy())
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_rebn_tensor_all_reduces_across_ranks(tmp_path: Any) -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch build has no torch.distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    shards = [[0.0, 1.0, 1.0], [5.0]]
    torch.multiprocessing.spawn(_worker, args=(port, shards, str(tmp_path)), nprocs=2, join=True)
    together = np.concatenate([np.load(tmp_path / f"{rank}.npy") for rank in range(2)])
    np.testing.assert_allclose(together, rebn(np.array([0.0, 1.0, 1.0, 5.0])), atol=1e-6)


# --------------------------------------------------------------------------- off-policy corrections on tensors

CONFIGS = [
    OffPolicyConfig(),
    OffPolicyConfig(tis="token", tis_cap=1.5),
    OffPolicyConfig(tis="sequence", tis_cap=3.0, token_mask_low=0.2, token_mask_high=4.0),
    OffPolicyConfig(outlier_high=6.0, sequence_mask="geometric", sequence_mask_low=0.5, sequence_mask_high=1.8),
    OffPolicyConfig(tis="token", sequence_mask="product", sequence_mask_high=5.0, outlier_low=0.05),
]


@settings(deadline=None, max_examples=60)
@given(
    rows=st.lists(
        st.lists(
            st.tuples(
                st.floats(-5.0, 0.0), st.floats(-5.0, 0.0), st.integers(0, 1), st.integers(-1, 2)
            ),  # current, behaviour, mask, turn id
            min_size=1,
            max_size=10,
        ),
        min_size=1,
        max_size=4,
    ),
    index=st.integers(0, len(CONFIGS) - 1),
    by_turn=st.booleans(),
)
def test_off_policy_correction_tensor_equals_the_numpy_rows(rows: list[Any], index: int, by_turn: bool) -> None:
    config = CONFIGS[index]
    width = max(len(r) for r in rows)
    current = torch.full((len(rows), width), float("nan"), dtype=torch.float64)  # padding is never read
    behaviour = torch.zeros((len(rows), width), dtype=torch.float64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    turns = torch.full((len(rows), width), -1, dtype=torch.int64)
    for i, r in enumerate(rows):
        for j, (cur, beh, m, t) in enumerate(sorted(r, key=lambda x: x[3])):  # turns in order along the row
            current[i, j], behaviour[i, j], mask[i, j], turns[i, j] = cur, beh, m, t
    weights, keep = off_policy_correction_tensor(
        current, behaviour, mask, config, segment_ids=turns if by_turn else None
    )
    for i in range(len(rows)):
        ids = turns[i].tolist()
        spans = None
        if by_turn:
            spans = [(ids.index(t), len(ids) - ids[::-1].index(t)) for t in sorted(set(ids)) if t >= 0]
        expected = correct(current[i].numpy(), behaviour[i].numpy(), mask[i].numpy(), config, segments=spans)
        assert keep[i].tolist() == expected.keep.tolist()
        np.testing.assert_allclose(weights[i].numpy(), expected.weights, rtol=1e-12)


def test_off_policy_correction_tensor_keeps_the_dtype_and_refuses_bad_input() -> None:
    current = torch.tensor([[-1.0, -2.0]], dtype=torch.float32)
    weights, keep = off_policy_correction_tensor(current, current - 1.0, torch.ones(1, 2), OffPolicyConfig(tis="token"))
    assert weights.dtype == torch.float32 and keep.dtype == torch.bool
    assert weights.tolist() == [[2.0, 2.0]]
    with pytest.raises(RLInputError, match="same"):
        off_policy_correction_tensor(current, current[:, :1], torch.ones(1, 2), OffPolicyConfig())
    with pytest.raises(RLInputError, match="NaN or inf"):
        off_policy_correction_tensor(current * float("nan"), current, torch.ones(1, 2), OffPolicyConfig())


def test_pad_sequences_carries_policy_versions() -> None:
    first = sequence([5, 6, 7], [0, 1, 1], None)
    first.token_policy_versions = np.array([-1, 3, 4])
    second = sequence([8], [1], None)
    second.token_policy_versions = np.array([4])
    batch = pad_sequences([first, second], pad_token_id=0)
    assert batch["token_policy_versions"].tolist() == [[-1, 3, 4], [4, -1, -1]]
    assert batch["token_policy_versions"].dtype == torch.int64
