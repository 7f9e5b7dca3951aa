"""Train on episodes that black-box agent programs play through ``gem gateway``: a TRL ``rollout_func``.

:class:`GatewayRollout` serves the trainer's model (``model.generate`` or TRL's vLLM engine)
behind a :class:`gem_gateway.capture.Gateway` on loopback for each rollout step, runs one
harness per prompt (trainer code that starts the agent program with the session's base URL
and returns its reward, :mod:`gem_gateway.harness`), and lays the captured episodes out as
:class:`~gem_trl.rollout.GemRollout` does: the prompt is the first call's prompt ids, the
completion every later token of the last call's context, the sampled ids trained as sampled
(``env_mask`` 1), everything else masked. :class:`~gem_trl.trainer.GemGRPOTrainer`'s ReBN reads
the same per-episode fields.

TRL trains one row per prompt, so an episode must be one consistent token sequence: an episode
with branch points (the agent program rewrote its history) is refused with a
:class:`~gem_core.errors.TrajectoryError` naming the calls; verl's ``gem_gateway_agent`` loop
trains such episodes (one sample per segment).

Needs ``gem-gateway`` (``pip install -e plugins/gateway``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gem_core.episode import BatchGenerate, Generation, TurnRequest
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.layouts import episode_to_sequence
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_core.rl.types import Episode
from gem_trl.rollout import (
    EPISODE_ROW_FIELDS,
    hf_generate,
    parse_episode_key,
    trainer_tokenizer,
    vllm_awake,
    vllm_generate,
)

__all__ = ["GatewayRollout"]


class GatewayRollout:
    """A TRL ``rollout_func``: each prompt's episode is played by a black-box harness through the gateway.

    Args:
        harness: ``harness(task) -> reward | Outcome`` (:data:`gem_gateway.harness.Harness`):
            runs the agent program against ``task.base_url`` for ``task.env_id`` / ``task.seed``
            (the prompt's episode key, :func:`~gem_trl.rollout.episode_key`) and returns its reward.
        gamma: Per-turn discount of the ``episode_return`` field (the GRPO reward).
        tool_parser: The model family's tool-call format (:data:`gem_gateway.tool_parsers.PARSERS`).
        max_turn_tokens: Most tokens one call may generate (the gateway's cap; a call asking for more: HTTP 400).
        max_calls: Most calls one episode may make (past it: HTTP 429 to the agent program).
        concurrency: Harnesses running at once (their generations are serialised on the one model).
        timeout_s: Longest one harness may run (its session is then closed and the step fails).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments (``None``: the trainer's).

    Each call returns the keys of :meth:`GemRollout.to_trl <gem_trl.rollout.GemRollout.to_trl>`
    (``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``, ``episode``, ``turn_rewards``,
    ``turn_spans``, ``episode_return``, ``num_turns``, ``success``, ``terminated``, ``truncated``,
    ``end_reason``, ``cut_turns``, ``env_error``) plus ``branch_points`` (always empty: see the
    module docstring).
    """

    def __init__(
        self,
        harness: Any,
        *,
        gamma: float = 1.0,
        tool_parser: str = "hermes",
        max_turn_tokens: int = 256,
        max_calls: int = 64,
        concurrency: int = 8,
        timeout_s: float = 600.0,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(harness):
            raise ConfigError(f"harness must be callable (task -> reward), got {type(harness).__name__}")
        if concurrency < 1 or max_calls < 1 or max_turn_tokens < 1:
            raise ConfigError("GatewayRollout needs concurrency, max_calls and max_turn_tokens of at least 1")
        self.harness = harness
        self.gamma = check_gamma(gamma)
        self.tool_parser = tool_parser
        self.max_turn_tokens = max_turn_tokens
        self.max_calls = max_calls
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.chat_template_kwargs = chat_template_kwargs
        self._step = itertools.count()
        #: Seconds of the latest call: ``generate`` (in the model) and ``total``.
        self.last_timings: dict[str, float] = {}

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one harness episode per prompt with ``trainer``'s model; TRL's ``rollout_func`` signature."""
        keys = [parse_episode_key(p) for p in prompts]
        if trainer.use_vllm:
            with vllm_awake(trainer):
                episodes = self.play(keys, vllm_generate(trainer), trainer)
        else:
            episodes = self.play(keys, hf_generate(trainer), trainer)
        return self.to_trl(episodes)

    def play(self, keys: Sequence[tuple[str, int]], generate: BatchGenerate, trainer: Any) -> list[Episode]:
        """Run the harness for each ``(env_id, seed)`` against a gateway over ``generate``; the episodes in order."""
        from gem_gateway.capture import Gateway, GatewayLimits
        from gem_gateway.harness import capture
        from gem_gateway.server import serve

        kwargs = self.chat_template_kwargs
        if kwargs is None:
            kwargs = getattr(trainer, "chat_template_kwargs", None) or {}
        timings = {"generate": 0.0}
        started = time.perf_counter()
        lock = asyncio.Lock()  # one model: its generate calls run one at a time, off the event loop

        async def one_at_a_time(request: TurnRequest) -> Generation:
            async with lock:
                began = time.perf_counter()
                (generation,) = await asyncio.to_thread(generate, [request])
                timings["generate"] += time.perf_counter() - began
                return generation

        limits = GatewayLimits(
            max_sessions=max(len(keys), 1),
            max_calls_per_session=self.max_calls,
            request_timeout_s=self.timeout_s,
            default_max_tokens=self.max_turn_tokens,
            max_tokens_cap=self.max_turn_tokens,
            max_context_tokens=max(self.max_turn_tokens, int(getattr(trainer, "max_completion_length", 0)) * 4, 32768),
        )
        gateway = Gateway(
            one_at_a_time,
            trainer_tokenizer(trainer),
            model_name="policy",
            tool_parser=self.tool_parser,
            limits=limits,
            chat_template_kwargs=kwargs,
        )
        gateway.policy_version = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        step = next(self._step)
        slots = asyncio.Semaphore(self.concurrency)

        async def run() -> list[Episode]:
            async with serve(gateway) as url:

                async def one(index: int, env_id: str, seed: int) -> Episode:
                    async with slots:
                        return await capture(
                            gateway,
                            url,
                            f"step{step}-{index}",
                            self.harness,
                            env_id=env_id,
                            seed=seed,
                            timeout_s=self.timeout_s,
                        )

                return list(await asyncio.gather(*(one(i, e, s) for i, (e, s) in enumerate(keys))))

        episodes = asyncio.run(run())
        self.last_timings = {**timings, "total": time.perf_counter() - started}
        return episodes

    def to_trl(self, episodes: Sequence[Episode]) -> dict[str, Any]:
        """Lay the captured episodes out as ``GRPOTrainer`` takes a ``rollout_func``'s output (one row each).

        Raises:
            TrajectoryError: an episode has branch points (TRL needs one sequence per episode).
        """
        out: dict[str, list[Any]] = {key: [] for key in (*EPISODE_ROW_FIELDS, "branch_points")}
        logprobs: list[list[float]] | None = []
        for episode in episodes:
            branches = episode.metadata.get("branch_points") or []
            if branches:
                raise TrajectoryError(
                    f"episode {episode.episode_id!r} ({episode.start_state_id}) has branch points at calls {branches}: "
                    "its agent program rewrote its history, so it is not one token sequence and TRL trains one row "
                    "per episode. Train such harnesses with verl's gem_gateway_agent loop (one sample per segment), "
                    "or keep the harness's history append-only"
                )
            sequence = episode_to_sequence(episode)
            start = sequence.prompt_length
            ids = sequence.input_ids.tolist()
            out["prompt_ids"].append(ids[:start])
            out["completion_ids"].append(ids[start:])
            out["env_mask"].append(sequence.loss_mask[start:].astype(int).tolist())
            out["episode"].append(episode)
            out["turn_rewards"].append([t.reward for t in episode.turns])
            out["turn_spans"].append([[b - start, e - start] for b, e in sequence.turn_spans])
            returns = discounted_returns(episode, self.gamma)
            out["episode_return"].append(float(returns[0]) if len(returns) else 0.0)
            out["num_turns"].append(episode.num_turns)
            out["success"].append(bool(episode.turns[-1].info.get("success", False)))
            out["terminated"].append(episode.terminated)
            out["truncated"].append(episode.truncated)
            out["end_reason"].append("truncated" if episode.truncated else "terminated")
            out["cut_turns"].append(sum(t.stop_reason == "length" for t in episode.turns))
            out["env_error"].append(None)
            out["branch_points"].append([])
            if logprobs is not None and sequence.token_logprobs is not None:
                logprobs.append(sequence.token_logprobs[start:].tolist())
            else:
                logprobs = None
        return {**out, "logprobs": logprobs}
