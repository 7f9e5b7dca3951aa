"""gem-trl: train LLM agents on gem environments with TRL's ``GRPOTrainer``.

* :class:`GemRollout`: a ``rollout_func`` that plays whole multi-turn episodes with
  the trainer's model (``model.generate`` or TRL's vLLM engine) and returns them in
  the core's token-in/token-out layout, with ``env_mask`` on the env's tokens.
* :func:`make_prompt_dataset`: the training dataset, from env ids and seeds.
* :class:`GemGRPOTrainer` / :class:`GemGRPOConfig`: per-turn ReBN advantages (or GRPO).

Importing ``gem_trl`` is cheap; torch, transformers and trl load with the names that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "GemRollout": "gem_trl.rollout",
    "episode_key": "gem_trl.rollout",
    "parse_episode_key": "gem_trl.rollout",
    "make_prompt_dataset": "gem_trl.rollout",
    "episode_return_reward": "gem_trl.rollout",
    "GemGRPOConfig": "gem_trl.trainer",
    "GemGRPOTrainer": "gem_trl.trainer",
    "rebn_token_advantages": "gem_trl.trainer",
    "build_tiny_model": "gem_trl.tiny",
    "build_tiny_tokenizer": "gem_trl.tiny",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from gem_trl.rollout import GemRollout, episode_key, episode_return_reward, make_prompt_dataset, parse_episode_key
    from gem_trl.tiny import build_tiny_model, build_tiny_tokenizer
    from gem_trl.trainer import GemGRPOConfig, GemGRPOTrainer, rebn_token_advantages


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
