"""Optional torch helpers. Skipped where torch is not installed (it is not a gem_core dependency)."""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn
from gem_core.rl.layouts import EpisodeSequence

torch = pytest.importorskip("torch", reason="torch is optional; install torch==2.13.0 to run these")

from gem_core.rl.torch_utils import all_reduce_moments, pad_sequences, rebn_tensor  # noqa: E402


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
