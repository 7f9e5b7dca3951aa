"""Per-turn ids, policy versions and per-turn rewards through verl's one-step-off and fully-async trainers.

verl 0.9.1's ``verl.experimental.one_step_off_policy`` and ``verl.experimental.fully_async_policy``
trainers run agent loops in the *legacy* ``AgentLoopWorker`` (a padded ``DataProto``, not
the v1 TransferQueue storage) and compute advantages with ``ray_trainer.compute_advantage``,
which hands a custom estimator only ``token_level_rewards`` and ``response_mask``. Left
alone, that worker would keep one reward per sample (the episode total on the last token),
drop gem's per-token fields, and refuse the list :meth:`GemEnvAgentLoop.run` returns; turns
would be read off the mask's runs. So, installed by :mod:`gem_verl.plugin` when verl
imports the modules:

* ``AgentLoopWorker._agent_loop_postprocess``: takes the loop's one output out of its
  list (a per-transition episode's several outputs cannot be one legacy sample: a
  ``ConfigError`` says so) and carries its per-token fields (:data:`TOKEN_FIELDS`)
  through ``extra_fields``, with one set of top-level keys for every gem sample
  (:data:`STABLE_KEYS`; the server's other fields under ``gem_server_extra``);
* ``AgentLoopWorker._postprocess``: turns them into ``[batch, response_length]`` tensors
  of the batch: ``gem_turn_ids`` and ``gem_policy_versions`` (-1 off generated tokens and
  on padding), and ``rm_scores`` from the per-turn rewards (each on its turn's last
  token) instead of the episode total. The behaviour logprobs are verl's own
  ``rollout_log_probs``. The batch then flows unchanged through verl's message queue,
  ``assemble_batch_from_rollout_samples``, ``DataProto.concat`` / ``union`` and its
  rollout correction;
* ``compute_advantage`` (``verl.trainer.ppo.ray_trainer`` and the name
  ``verl.experimental.separation.ray_trainer`` imported, which both trainers call): with
  ``adv_estimator=rebn`` and ``gem_turn_ids`` in the batch, ``rebn`` gets the explicit
  turn boundaries (token-level rejection sampling cannot split a turn); a batch with
  gem samples and no trainable token is refused (:func:`gem_verl.trainer_hook.check_trainable`).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np
import torch

from gem_core.errors import ConfigError
from gem_verl.advantage import ESTIMATOR_NAME, compute_rebn_advantage
from gem_verl.trainer_hook import check_trainable

__all__ = ["STABLE_KEYS", "TOKEN_FIELDS", "install_trainer", "install_worker", "token_tensors"]

#: Per-token fields the loop stores with each sample (the same as :data:`gem_verl.agent_loop.TOKEN_FIELDS`;
#: not imported from there: this module is installed while verl's agent-loop module, which that one imports,
#: may still be loading).
TOKEN_FIELDS = ("gem_token_rewards", "gem_turn_ids", "gem_policy_versions")

_FILL = {"gem_token_rewards": 0.0, "gem_turn_ids": -1, "gem_policy_versions": -1}
_DTYPES = {"gem_token_rewards": torch.float32, "gem_turn_ids": torch.int64, "gem_policy_versions": torch.int64}


def token_tensors(per_sample: Any, width: int) -> dict[str, torch.Tensor]:
    """``[batch, width]`` tensors from per-sample lists of per-token values (``None``: a sample without them).

    Args:
        per_sample: For each of :data:`TOKEN_FIELDS`, an object array (or list) of one list per sample.
        width: The batch's padded response length.
    """
    out: dict[str, torch.Tensor] = {}
    for name in TOKEN_FIELDS:
        rows = list(per_sample[name])
        tensor = torch.full((len(rows), width), _FILL[name], dtype=_DTYPES[name])
        for i, values in enumerate(rows):
            if values is not None:
                tensor[i, : len(values)] = torch.as_tensor(list(values), dtype=_DTYPES[name])[:width]
        out[name] = tensor
    return out


def install_worker(agent_loop: ModuleType) -> None:
    """Wrap the legacy ``AgentLoopWorker``'s two post-processing steps (idempotent)."""
    worker_cls = agent_loop.AgentLoopWorker
    postprocess_one = worker_cls._agent_loop_postprocess
    if getattr(postprocess_one, "__gem_verl_hook__", False):
        return

    @functools.wraps(postprocess_one)
    async def _agent_loop_postprocess(self: Any, output: Any, validate: Any, **kwargs: Any) -> Any:
        if isinstance(output, list):
            if len(output) != 1:
                raise ConfigError(
                    f"gem_env_agent returned {len(output)} samples for one episode (+gem.layout=transition), but "
                    "verl's legacy AgentLoopWorker (used by the one-step-off and fully-async trainers) keeps one "
                    "sample per row. Use +gem.layout=sequence with these trainers"
                )
            output = output[0]
        per_token_fields = getattr(output, "per_token_fields", None)  # a GemAgentLoopOutput
        if callable(per_token_fields):
            output.extra_fields.update(per_token_fields())
            _stable_keys(output.extra_fields)
        return await postprocess_one(self, output, validate, **kwargs)

    _agent_loop_postprocess.__gem_verl_hook__ = True  # type: ignore[attr-defined]
    worker_cls._agent_loop_postprocess = _agent_loop_postprocess

    postprocess_batch = worker_cls._postprocess

    @functools.wraps(postprocess_batch)
    def _postprocess(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        data = postprocess_batch(self, inputs, *args, **kwargs)
        present = [name for name in TOKEN_FIELDS if name in data.non_tensor_batch]
        if not present:
            return data
        per_sample = {name: data.non_tensor_batch.pop(name) for name in present}
        has_gem = np.array([per_sample["gem_turn_ids"][i] is not None for i in range(len(data))])
        tensors = token_tensors(per_sample, data.batch["responses"].shape[1])
        # per-turn rewards where the loop gave them, verl's total elsewhere (a TensorDict has no `in`)
        if "rm_scores" in data.batch.keys():  # noqa: SIM118
            gem_rows = torch.as_tensor(has_gem)
            data.batch["rm_scores"][gem_rows] = tensors["gem_token_rewards"][gem_rows]
        data.batch["gem_turn_ids"] = tensors["gem_turn_ids"]
        data.batch["gem_policy_versions"] = tensors["gem_policy_versions"]
        _fill_unknown_versions(data.non_tensor_batch, has_gem)
        return data

    worker_cls._postprocess = _postprocess


#: The ``extra_fields`` keys every gem sample has at the top level in the legacy worker.
STABLE_KEYS = frozenset(
    {"turn_scores", "tool_rewards", "reward_extra_info", "gem", "min_global_steps", "max_global_steps", "global_steps"}
)


def _stable_keys(extra: dict[str, Any]) -> None:
    """One set of top-level keys for every gem sample: the server's other fields go under ``gem_server_extra``.

    The legacy worker makes one non-tensor column per ``extra_fields`` key, and verl's
    ``DataProto.concat`` (the fully-async batch assembly, one row per worker call) refuses
    batches whose columns differ. An episode whose env failed before any request has none
    of the server's fields (``num_cached_tokens``, speculative-decoding counters, ...), so
    a batch mixing it with whole episodes would not assemble.
    """
    moved = {key: extra.pop(key) for key in list(extra) if key not in STABLE_KEYS and key not in TOKEN_FIELDS}
    extra["gem_server_extra"] = moved
    for key in ("min_global_steps", "max_global_steps", "global_steps"):
        extra.setdefault(key, None)


def _fill_unknown_versions(non_tensor: dict[str, Any], has_gem: np.ndarray) -> None:
    """Give gem samples without a weight version (an env failed before any request) the batch's newest one.

    verl's fully-async ``assemble_batch_from_rollout_samples`` subtracts ``min_global_steps``
    from ``max_global_steps`` of every sample; the legacy worker passes no row step the
    loop could use instead (the v1 worker does). Such a sample trains nothing; with no
    reply in the whole batch it is tagged version 0.
    """
    lows, highs = non_tensor.get("min_global_steps"), non_tensor.get("max_global_steps")
    if lows is None or highs is None:
        return
    known = [int(v) for v in highs if v is not None]
    newest = max(known, default=0)
    for i in np.flatnonzero(has_gem):
        if lows[i] is None or highs[i] is None:
            lows[i] = highs[i] = newest


def install_trainer(module: ModuleType) -> None:
    """Wrap ``module.compute_advantage`` (``ray_trainer`` or a module that imported the name) for ``rebn``."""
    original = module.compute_advantage
    if getattr(original, "__gem_verl_hook__", False):
        return

    @functools.wraps(original)
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        if "gem_turn_ids" not in data.batch.keys():  # noqa: SIM118  (a TensorDict has no `in`)
            return original(data, adv_estimator, *args, **kwargs)
        mask = data.batch["response_mask"]
        check_trainable(mask, [str(i) for i in range(len(data))])
        if str(getattr(adv_estimator, "value", adv_estimator)) != ESTIMATOR_NAME:
            return original(data, adv_estimator, *args, **kwargs)
        advantages, returns = compute_rebn_advantage(
            data.batch["token_level_rewards"], mask, config=kwargs.get("config"), turn_ids=data.batch["gem_turn_ids"]
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage.__gem_verl_hook__ = True  # type: ignore[attr-defined]
    module.compute_advantage = compute_advantage
