"""Per-turn ReBN advantages laid out on the completion tokens of a TRL batch.

Only torch and gem_core: the math is the core's (:func:`gem_core.rl.returns.discounted_returns`,
:func:`gem_core.rl.torch_utils.rebn_tensor`, which all-reduces its statistics over
``torch.distributed`` ranks). Each turn's tokens are where the episode engine put them:
a turn starts where its recorded prompt ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gem_core.episode import failed_by_env
from gem_core.errors import RLInputError, TrajectoryError
from gem_core.rl.returns import discounted_returns
from gem_core.rl.torch_utils import rebn_tensor
from gem_core.rl.types import Episode

__all__ = ["completion_spans", "rebn_token_advantages"]


def completion_spans(episode: Episode) -> list[tuple[int, int]]:
    """``[start, end)`` of each turn's generated tokens in the completion (everything after the first prompt).

    An episode an env error ended before its first turn has none.

    Raises:
        TrajectoryError: A turn lacks its recorded prompt or generated ids (not played token in, token out).
    """
    if not episode.turns:
        if failed_by_env(episode):
            return []
        raise TrajectoryError(f"episode {episode.episode_id!r} has no turns")
    spans = []
    first = episode.turns[0].prompt_token_ids
    for index, turn in enumerate(episode.turns):
        if turn.prompt_token_ids is None or turn.action_token_ids is None or first is None:
            raise TrajectoryError(
                f"episode {episode.episode_id!r} turn {index} has no prompt_token_ids/action_token_ids; "
                "play it with gem_core.episode.EpisodeEngine and a tokenizer"
            )
        start = len(turn.prompt_token_ids) - len(first)
        spans.append((start, start + len(turn.action_token_ids)))
    return spans


def rebn_token_advantages(
    episodes: Sequence[Episode],
    gamma: float,
    width: int,
    *,
    keep: Sequence[Sequence[bool]] | None = None,
    distributed: bool = True,
    eps: float = 1e-9,
) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Per-token ReBN advantages of the completions of ``episodes``.

    Args:
        episodes: This process's episodes, in the order of the batch rows.
        gamma: Per-turn discount.
        width: Completion width of the padded batch.
        keep: Per episode, per turn: whether the turn's return enters the ReBN mean and
            std. Turns left out (those the loss never sees, e.g. TRL's
            ``mask_truncated_completions``) get advantage 0. ``None``: every turn.
        distributed: Normalise over the turns of every rank (when ``torch.distributed`` is
            initialised; every rank must call this together), else over ``episodes`` alone.
        eps: Added to the std.

    Returns:
        ``(advantages, per_turn)``: a float32 ``(len(episodes), width)`` tensor with each
        turn's advantage on its generated tokens and 0 elsewhere, and the per-turn
        advantages of each episode.
    """
    returns = [discounted_returns(ep, gamma) for ep in episodes]
    kept = [np.ones(len(r), dtype=bool) for r in returns] if keep is None else [np.asarray(k, bool) for k in keep]
    if len(kept) != len(returns) or any(len(k) != len(r) for k, r in zip(kept, returns, strict=True)):
        raise RLInputError("keep needs one flag per turn of every episode")
    chosen = np.concatenate([r[k] for r, k in zip(returns, kept, strict=True)]) if returns else np.zeros(0)
    flat = torch.from_numpy(chosen)
    if distributed and torch.distributed.is_available() and torch.distributed.is_initialized():
        # NCCL reduces only tensors on the rank's GPU.
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        flat = flat.to(device) if device is not None else flat
    normalised = rebn_tensor(flat, eps=eps, distributed=distributed).cpu().numpy()
    per_turn: list[np.ndarray] = []
    offset = 0
    for r, k in zip(returns, kept, strict=True):
        adv = np.zeros(len(r))
        adv[k] = normalised[offset : offset + int(k.sum())]
        offset += int(k.sum())
        per_turn.append(adv)
    out = torch.zeros((len(episodes), width), dtype=torch.float32)
    for row, (ep, adv) in enumerate(zip(episodes, per_turn, strict=True)):
        for (start, end), value in zip(completion_spans(ep), adv, strict=True):
            if end > width:
                raise RLInputError(
                    f"episode {ep.episode_id!r} has {end} completion tokens but the batch is {width} wide"
                )
            out[row, start:end] = float(value)
    return out, per_turn
