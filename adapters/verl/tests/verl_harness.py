"""verl's own rollout, storage and trainer code around ``gem_env_agent``, with two stand-ins.

Stand-ins (they need a GPU inference engine / a TransferQueue cluster):

* :class:`Server` answers ``generate`` exactly as verl 0.9.1's ``LLMServerClient`` does
  for a vLLM replica: a ``TokenOutput`` with ``token_ids``, ``log_probs``,
  ``routed_experts``, ``stop_reason`` (``"completed"`` for both a stop and a cut at
  ``max_tokens``, as vLLM's server maps them; ``style="sglang"`` passes ``"stop"`` /
  ``"length"`` as SGLang's does), ``num_preempted`` and ``extra_fields``
  (``global_steps`` and ``num_cached_tokens`` from the server, ``min_global_steps`` /
  ``max_global_steps`` set by the client). Its policy is the conformance suite's
  :func:`~gem_core.conformance.scripted_generation`. ``step_every`` advances the weight
  version between calls, as a weight sync during an episode would.
* :class:`Storage` keeps samples the way ``transfer_queue``'s ``kv_batch_put`` /
  ``kv_batch_get`` hand them over (per-sample fields, read back as verl's
  ``list_of_dict_to_tensordict`` builds them: jagged nested tensors).

Everything else is verl's code: the loop is built from verl's registry with
``hydra.utils.instantiate`` as ``AgentLoopWorker`` does; the v1 worker's
``AgentLoopWorkerTQ._agent_loop_postprocess`` stores the outputs (keys, fields, tags);
the v1 trainer's ``PPOTrainer._compute_advantage`` (rollout correction, dispatch to the
estimator) and ``PPOTrainer._compute_metrics`` (the per-step metrics, including the
``np.array(..., dtype=int)`` of ``min/max_global_steps``) read them back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import hydra
import numpy as np
import torch
import verl  # noqa: F401  (the entry point registers the loop and the estimator)
import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq
import verl.trainer.ppo.v1.trainer_base as trainer_base
from gem_verl.agent_loop import GemEnvAgentLoop
from gem_verl.dataset import make_rows
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput

from gem_core.conformance import ConformanceCase, scripted_generation

PROMPT_LENGTH = 1024


class Server:
    """verl's ``LLMServerClient`` in front of a vLLM replica, answering with the scripted policy."""

    def __init__(
        self,
        case: ConformanceCase,
        tokenizer: Any,
        *,
        global_steps: int = 3,
        step_every: int = 0,
        with_logprobs: bool = True,
        style: str = "vllm",
        num_preempted: int | None = 0,
        routed_experts: bool = False,
    ) -> None:
        self.case = case
        self.tokenizer = tokenizer
        self.global_steps = global_steps
        self.step_every = step_every
        self.with_logprobs = with_logprobs
        self.style = style
        self.num_preempted = num_preempted
        self.routed_experts = routed_experts
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        await asyncio.sleep(0)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), **sampling_params})
        if self.step_every and len(self.calls) > 1 and (len(self.calls) - 1) % self.step_every == 0:
            self.global_steps += 1
        generation = scripted_generation(self.case, self.tokenizer, prompt_ids, sampling_params.get("max_tokens"))
        ids = list(generation.token_ids or [])
        # vLLM's server: {"global_steps": ..., "num_cached_tokens": ...}; the client sets min/max_global_steps.
        extra = {"global_steps": self.global_steps, "num_cached_tokens": len(prompt_ids) // 2}
        extra.setdefault("min_global_steps", self.global_steps)
        extra.setdefault("max_global_steps", self.global_steps)
        routed = None
        if self.routed_experts:  # [prompt + generated tokens, layers, top-k], as vLLM's routing replay returns
            routed = np.arange(len(prompt_ids) + len(ids), dtype=np.int64)[:, None, None].repeat(2, 1).repeat(2, 2)
        return TokenOutput(
            token_ids=ids,
            log_probs=generation.logprobs if self.with_logprobs else None,
            routed_experts=routed,
            # vLLM's server says "completed" for a stop and for a cut; SGLang passes its own finish reason
            stop_reason="completed" if self.style == "vllm" else generation.finish_reason,
            num_preempted=self.num_preempted,
            extra_fields=extra,
        )


def config(
    case: ConformanceCase | None = None,
    *,
    layout: str = "sequence",
    gamma: float | None = None,
    estimator: str = "rebn",
    response_length: int | None = None,
    rollout_correction: dict[str, Any] | None = None,
    **gem: Any,
) -> Any:
    """A trainer config with the case's limits mapped onto verl's and gem's settings."""
    limits = case.limits if case is not None else None
    if limits is not None:
        gem.setdefault("max_turns", limits.max_turns)
        gem.setdefault("max_turn_tokens", limits.max_turn_tokens)
        gem.setdefault("wrappers", [w if isinstance(w, str) else [w[0], dict(w[1])] for w in case.wrappers])
        if case.env_kwargs:
            gem.setdefault("env_kwargs", dict(case.env_kwargs))
    length = response_length or (limits.max_episode_tokens if limits is not None else 256)
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": PROMPT_LENGTH,
                    "response_length": length,
                    "n": 1,
                    "temperature": 1.0,
                    "calculate_log_probs": True,
                    "multi_turn": {"tool_config_path": None},
                },
                "model": {},
            },
            "data": {"apply_chat_template_kwargs": {}},
            "algorithm": {
                "gamma": gamma if gamma is not None else (case.gamma if case is not None else 1.0),
                "lam": 1.0,
                "adv_estimator": estimator,
                "use_kl_in_reward": False,
                "norm_adv_by_std_in_grpo": True,
                "rollout_correction": rollout_correction,
            },
            "trainer": {"use_v1": True},
            "gem": {"layout": layout, **{k: v for k, v in gem.items() if v is not None}},
        }
    )


def make_loop(cfg: Any, server: Server, tokenizer: Any, processor: Any = None) -> GemEnvAgentLoop:
    """Instantiate from verl's registry with the arguments ``AgentLoopWorker._run_agent_loop`` passes."""
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry["gem_env_agent"],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=processor,
        hf_model_type="qwen2" if processor is None else "qwen2_vl",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, GemEnvAgentLoop)
    return loop


def row(env_id: str, seed: int, index: int = 0, session_id: int = 0, **kwargs: Any) -> dict[str, Any]:
    """One dataset row as verl's v1 worker passes it to ``run`` (plus ``uid``, ``session_id``, ``global_steps``)."""
    made = make_rows(env_id, [seed], start_index=index, **kwargs)[0]
    return {
        **made,
        "raw_prompt": made["prompt"],
        "index": index,
        "uid": f"uid{index}",
        "session_id": session_id,
        "global_steps": 3,
    }


def play(cfg: Any, server: Any, tokenizer: Any, fields: dict[str, Any], processor: Any = None) -> list[Any]:
    """Build the loop and run it inside one event loop, as verl's worker does (the loop keeps a handle on it)."""

    async def run() -> list[Any]:
        loop = make_loop(cfg, server, tokenizer, processor)
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **fields)

    return asyncio.run(run())


@dataclass
class Storage:
    """TransferQueue's key-value interface, in memory (per-sample fields and tags, per partition)."""

    samples: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    tags: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    async def async_kv_batch_put(self, keys: list[str], fields: Any, tags: list[dict[str, Any]], partition_id: str):
        self.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields)
        for key, tag in zip(keys, tags, strict=True):
            self.tags[(partition_id, key)] = dict(tag)

    async def async_kv_put(self, key: str, partition_id: str, tag: dict[str, Any]) -> None:
        self.tags.setdefault((partition_id, key), {}).update(tag)

    def kv_batch_put(
        self, keys: list[str], partition_id: str, fields: Any = None, tags: list[dict[str, Any]] | None = None
    ) -> KVBatchMeta:
        for key, tag in zip(keys, tags or [], strict=False):  # tag-only puts: verl's prompt-group markers
            self.tags.setdefault((partition_id, key), {}).update(tag)
        for name in [] if fields is None else list(fields.keys()):  # a TensorDict, not a dict
            value = fields[name]
            if isinstance(value, torch.Tensor):
                per_sample = list(value.unbind(0))
            else:  # non-tensor fields come back as a list-like of the per-sample objects
                per_sample = list(value.tolist() if hasattr(value, "tolist") else value)
            for key, item in zip(keys, per_sample, strict=True):
                self.samples.setdefault((partition_id, key), {})[name] = item
        return self.meta(keys, partition_id)

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        rows = [self.samples[(partition_id, key)] for key in keys]
        present = [f for f in select_fields if any(f in r for r in rows)]
        for name in present:
            if not all(name in r for r in rows):
                raise ValueError(f"field {name} is missing for some keys")
        # TransferQueue hands per-token fields back as jagged nested tensors (verl calls .offsets() on them),
        # also when every sample happens to have the same length.
        out = list_of_dict_to_tensordict([{name: r[name] for name in present} for r in rows])
        for name in present:
            values = [r[name] for r in rows]
            if all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values) and not out[name].is_nested:
                out[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
        return out

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
        """Every key's tag per partition, as ``tq.kv_list`` gives them to verl's replay buffer."""
        listed: dict[str, dict[str, dict[str, Any]]] = {}
        for (partition, key), tag in self.tags.items():
            if partition_id is None or partition == partition_id:
                listed.setdefault(partition, {})[key] = dict(tag)
        return listed

    def kv_clear(self, keys: list[str], partition_id: str) -> None:
        for key in keys:
            self.samples.pop((partition_id, key), None)
            self.tags.pop((partition_id, key), None)

    def meta(self, keys: list[str], partition_id: str = "train") -> KVBatchMeta:
        return KVBatchMeta(
            keys=list(keys), tags=[self.tags.get((partition_id, k), {}) for k in keys], partition_id=partition_id
        )


class _Worker:
    """The state ``AgentLoopWorkerTQ._agent_loop_postprocess`` reads, with verl's own helper methods."""

    _compute_multi_modal_inputs = AgentLoopWorker._compute_multi_modal_inputs
    _compute_position_ids = AgentLoopWorker._compute_position_ids
    _get_mm_processor_kwargs = AgentLoopWorker._get_mm_processor_kwargs
    _compute_score = AgentLoopWorker._compute_score
    _compute_teacher_logprobs = AgentLoopWorker._compute_teacher_logprobs
    distillation_enabled = False
    processor = None
    mm_processor_kwargs: dict[str, Any] = {}
    reward_loop_worker_handles = None

    def __init__(self, cfg: Any, tokenizer: Any) -> None:
        self.config = cfg
        self.tokenizer = tokenizer
        self.rollout_config = cfg.actor_rollout_ref.rollout


def store(
    storage: Storage,
    cfg: Any,
    tokenizer: Any,
    episodes: list[tuple[list[Any], dict[str, Any]]],
    processor: Any = None,
) -> list[str]:
    """Put each episode's outputs into ``storage`` with verl's v1 worker code; return the keys in order.

    With a VLM's ``processor`` the worker encodes each sample's ``multi_modal_data`` as verl does.
    """
    postprocess = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__._agent_loop_postprocess
    worker = _Worker(cfg, tokenizer)
    worker.processor = processor
    saved = agent_loop_tq.tq
    agent_loop_tq.tq = storage
    try:
        for outputs, fields in episodes:
            asyncio.run(postprocess(worker, outputs, False, **fields))
    finally:
        agent_loop_tq.tq = saved
    return [key for (_, key) in storage.samples]


class _Trainer:
    """The state the v1 ``PPOTrainer`` methods under test read (no workers, no GPUs)."""

    use_critic = False
    kl_ctrl_in_reward = None

    def __init__(self, cfg: Any) -> None:
        self.config = cfg
        self._rollout_moe_lb_metrics_accumulator = None

    def _get_n_gpus_for_throughput(self) -> int:
        return 1


def compute_advantage(storage: Storage, cfg: Any, keys: list[str]) -> tuple[dict[str, Any], Any]:
    """Run verl's ``PPOTrainer._compute_advantage`` on the stored samples; returns its metrics and the padded batch."""
    saved = trainer_base.tq
    trainer_base.tq = storage
    metrics: dict[str, Any] = {}
    try:
        trainer_base.PPOTrainer._compute_advantage(_Trainer(cfg), storage.meta(keys), metrics)
        fields = ["advantages", "returns", "response_mask", "rm_scores", "gem_turn_ids"]
        data = storage.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
    finally:
        trainer_base.tq = saved
    return metrics, data


def compute_metrics(storage: Storage, cfg: Any, keys: list[str], global_steps: int = 5) -> dict[str, Any]:
    """Run verl's ``PPOTrainer._compute_metrics`` (the per-step metrics) on the stored samples."""
    saved = trainer_base.tq
    trainer_base.tq = storage
    metrics: dict[str, Any] = {}
    try:
        trainer_base.PPOTrainer._compute_metrics(
            _Trainer(cfg), storage.meta(keys), metrics, {"step": 1.0, "gen": 0.5}, global_steps, 0
        )
    finally:
        trainer_base.tq = saved
    return metrics


def padded(nested: Any, fill: float = 0.0) -> np.ndarray:
    """A jagged nested tensor as a ``[batch, max length]`` array."""
    rows = [t.numpy() for t in nested.unbind()]
    out = np.full((len(rows), max(len(r) for r in rows)), fill, dtype=np.float64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
