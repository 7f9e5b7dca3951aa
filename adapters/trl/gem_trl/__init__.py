"""gem-trl: train LLM agents on gem environments with TRL's ``GRPOTrainer``.

* :class:`GemRollout`: a ``rollout_func`` whose episodes the core's episode engine plays
  with the trainer's model (``model.generate`` or TRL's vLLM engine), returned token in,
  token out, with ``env_mask`` on the env's tokens.
* :class:`GatewayRollout` (:mod:`gem_trl.gateway`): a ``rollout_func`` whose episodes black-box agent
  programs play through ``gem gateway`` (needs gem-gateway), laid out the same way.
* :func:`make_prompt_dataset`: the training dataset, from env ids and seeds.
* :class:`GemGRPOTrainer` / :class:`GemGRPOConfig`: per-turn ReBN advantages (or GRPO).
* :func:`tool_environment_factory`: a gem tool env as TRL's own ``environment_factory``
  (tools as methods, the env grades the final answer); :func:`tool_environment_factories`:
  several in one run (TRL's dict form), each reward function grading its own env's rollouts.
* :func:`build_tiny_model` / :func:`build_tiny_tokenizer`: a local toy model for tests and the demo.
* ``gem-trl`` (:mod:`gem_trl.cli`): the command that trains from a ``trl grpo`` YAML plus env keys.
* :mod:`gem_trl.contract`: the TRL internals the adapter uses, checked at start-up.

The trainer classes import TRL (seconds); they load on first use, so the rollout and the
advantage helpers stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gem_trl.advantages import rebn_token_advantages
from gem_trl.environments import tool_environment_factories, tool_environment_factory
from gem_trl.rollout import GemRollout, episode_key, episode_return_reward, make_prompt_dataset, parse_episode_key
from gem_trl.tiny import build_tiny_model, build_tiny_tokenizer

if TYPE_CHECKING:
    from gem_trl.gateway import GatewayRollout
    from gem_trl.trainer import GemGRPOConfig, GemGRPOTrainer

__version__ = "0.1.0"

__all__ = [
    "GatewayRollout",
    "GemGRPOConfig",
    "GemGRPOTrainer",
    "GemRollout",
    "__version__",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "episode_key",
    "episode_return_reward",
    "make_prompt_dataset",
    "parse_episode_key",
    "rebn_token_advantages",
    "tool_environment_factories",
    "tool_environment_factory",
]


def __getattr__(name: str) -> Any:
    if name in ("GemGRPOConfig", "GemGRPOTrainer"):
        from gem_trl import trainer

        return getattr(trainer, name)
    if name == "GatewayRollout":  # needs gem-gateway, an optional dependency
        from gem_trl.gateway import GatewayRollout

        return GatewayRollout
    raise AttributeError(f"module 'gem_trl' has no attribute {name!r}")
