"""Per-turn ReBN advantages laid out on the completion tokens of a TRL batch.

Only torch and gem_core: the math is the core's (:func:`gem_core.rl.returns.discounted_returns`,
:func:`gem_core.rl.torch_utils.rebn_tensor`, which all-reduces its statistics over
``torch.distributed`` ranks) and so is the placement on tokens
(:func:`gem_core.rl.layouts.episode_to_sequence`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gem_core.errors import RLInputError
from gem_core.rl.layouts import episode_to_sequence
from gem_core.rl.returns import discounted_returns
from gem_core.rl.torch_utils import rebn_tensor
from gem_core.rl.types import Episode

__all__ = ["rebn_token_advantages"]


def rebn_token_advantages(
    episodes: Sequence[Episode],
    gamma: float,
    width: int,
    *,
    distributed: bool = True,
    eps: float = 1e-9,
) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Per-token ReBN advantages of the completions of ``episodes``.

    Args:
        episodes: This process's episodes, in the order of the batch rows.
        gamma: Per-turn discount.
        width: Completion width of the padded batch.
        distributed: Normalise over the turns of every rank (when ``torch.distributed`` is
            initialised; every rank must call this together), else over ``episodes`` alone.
        eps: Added to the std.

    Returns:
        ``(advantages, per_turn)``: a float32 ``(len(episodes), width)`` tensor with each
        turn's advantage on its generated tokens and 0 elsewhere, and the per-turn
        advantages of each episode.
    """
    returns = [discounted_returns(ep, gamma) for ep in episodes]
    flat = torch.from_numpy(np.concatenate(returns) if returns else np.zeros(0))
    if distributed and torch.distributed.is_available() and torch.distributed.is_initialized():
        # NCCL reduces only tensors on the rank's GPU.
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        flat = flat.to(device) if device is not None else flat
    flat_adv = rebn_tensor(flat, eps=eps, distributed=distributed).cpu().numpy()
    per_turn = np.split(flat_adv, np.cumsum([len(r) for r in returns])[:-1]) if returns else []
    out = torch.zeros((len(episodes), width), dtype=torch.float32)
    for row, (ep, adv) in enumerate(zip(episodes, per_turn, strict=True)):
        sequence = episode_to_sequence(ep, advantages=adv)
        assert sequence.token_advantages is not None
        tokens = sequence.token_advantages[sequence.prompt_length :]
        if tokens.shape[0] > width:
            raise RLInputError(
                f"episode {ep.episode_id!r} has {tokens.shape[0]} completion tokens but the batch is {width} wide"
            )
        out[row, : tokens.shape[0]] = torch.from_numpy(tokens.astype(np.float32))
    return out, per_turn
