"""A verl agent loop that plays one gem env episode per dataset row, token in / token out.

verl's ``AgentLoopWorker`` builds one :class:`GemEnvAgentLoop` per sample (per row and
``rollout.n`` session) and awaits :meth:`GemEnvAgentLoop.run` with the row's fields.
The loop makes the env named in the row (``extra_info["gem"]``, written by
:mod:`gem_verl.dataset`), resets it with the row's seed and options, and alternates:
the LLM server generates from the running token ids, the decoded text goes to
``env.step``, the env's reply is appended as a user message through verl's
continuous-token builder (so the prompt of turn ``t+1`` is the prompt of turn ``t``
plus exactly the sampled ids plus the reply's tokens: nothing is re-tokenized).

Per-turn rewards reach the advantage estimator through :class:`GemAgentLoopOutput`,
whose ``as_dict`` (what verl's v1 trainer stores) writes ``rm_scores`` from the
turn rewards instead of verl's one-scalar-at-the-end. Two layouts, from the core
(:mod:`gem_core.rl.layouts`):

* ``sequence`` (default): one output per episode; each turn's reward on its last
  generated token. Tokens grow linearly with turns.
* ``transition``: one output per turn (prompt = history, response = that turn's
  tokens); its reward is the turn's return ``G_t`` with ``algorithm.gamma``, because
  verl's estimator cannot tell which rows belong to one episode.

The ``rebn`` estimator (:mod:`gem_verl.advantage`) handles both.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from uuid import uuid4

import torch
from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

import gem_core
from gem_core.core import to_async
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_core.rl.types import Episode, Turn

__all__ = ["AGENT_NAME", "EpisodeRequest", "GemAgentLoopOutput", "GemEnvAgentLoop", "GemLoopConfig"]

#: The name rows select in their ``agent_name`` column (or ``rollout.agent.default_agent_loop``).
AGENT_NAME = "gem_env_agent"


class GemLoopConfig(BaseModel):
    """Settings of the loop, from the trainer config's top-level ``gem`` section (``+gem.layout=...``).

    Attributes:
        layout: ``"sequence"`` (one output per episode) or ``"transition"`` (one per turn).
        max_turns: Stop an episode after this many turns (its last turn counts as
            truncated); ``None`` leaves it to the env and the response budget.
        env_kwargs: Constructor overrides for every env (rows may add their own).
        wrappers: Registered wrapper names applied to every env.
    """

    model_config = ConfigDict(extra="forbid")

    layout: Literal["sequence", "transition"] = "sequence"
    max_turns: int | None = Field(default=None, ge=1)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    wrappers: list[str] = Field(default_factory=list)


class EpisodeRequest(BaseModel):
    """What one dataset row asks for (``extra_info["gem"]``, see :func:`gem_verl.dataset.make_rows`).

    Attributes:
        env_id: A registered env id, e.g. ``"core:NumberGuess-v0"``.
        seed: ``reset`` seed; ``rollout.n`` sessions of one row share it (one start state).
        options: ``reset`` options.
        env_kwargs: Constructor overrides for this row's env.
        system_prompt: Optional system message before the first observation.
    """

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field(min_length=1)
    seed: int | None = None
    options: dict[str, Any] | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EpisodeRequest:
        """Parse the request out of a row's fields as verl passes them to ``run``.

        ``options`` and ``env_kwargs`` are stored as JSON strings (one Parquet type for
        every row); dicts are accepted too.

        Raises:
            ConfigError: The row has no ``extra_info["gem"]`` or it is malformed.
        """
        extra_info = row.get("extra_info") or {}
        raw = extra_info.get("gem") if isinstance(extra_info, Mapping) else None
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"dataset row {row.get('index', '?')} has no extra_info['gem'] with the env to play; "
                "build the Parquet files with gem_verl.dataset (gem-verl-dataset --env-id ... --seeds ...)"
            )
        data = dict(raw)
        for key in ("options", "env_kwargs"):
            if isinstance(data.get(key), str):
                try:
                    data[key] = json.loads(data[key]) if data[key] else None
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"extra_info['gem']['{key}'] is not valid JSON: {exc}") from None
        if data.get("env_kwargs") is None:
            data.pop("env_kwargs", None)
        if data.get("system_prompt") == "":
            data["system_prompt"] = None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"bad extra_info['gem'] in dataset row {row.get('index', '?')}: {exc}") from None


class GemAgentLoopOutput(AgentLoopOutput):
    """An ``AgentLoopOutput`` that carries a reward per response token.

    verl's ``as_dict`` turns the scalar ``reward_score`` into ``rm_scores`` with the
    value on the last response token, and its v1 worker copies the last output's
    score onto every earlier output of the episode. Overriding ``as_dict`` (the only
    way v1 stores outputs) keeps each turn's own reward where the estimator sees it.
    """

    token_rewards: list[float]
    """One reward per response token; non-zero only on each turn's last generated token."""

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        output.pop("token_rewards", None)
        if len(self.token_rewards) != len(self.response_ids):
            raise TrajectoryError(
                f"{len(self.token_rewards)} token_rewards for {len(self.response_ids)} response tokens"
            )
        output["rm_scores"] = torch.tensor(self.token_rewards, dtype=torch.float32)
        return output


@dataclass(slots=True)
class _Played:
    """An episode as played, plus verl's own view of its token stream."""

    episode: Episode
    timing: AgentLoopMetrics
    token_ids: list[int]
    response_mask: list[int]


def _metrics_value(value: Any) -> bool | float | str | None:
    """A JSON-safe scalar for ``extra_fields`` (info values are the env's own objects)."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return str(value)


class GemEnvAgentLoop(AgentLoopBase):
    """Plays one gem env episode against verl's LLM server and returns it as verl samples.

    Registered as ``gem_env_agent`` by :mod:`gem_verl.plugin`. Reads
    ``rollout.response_length`` (token budget after the first prompt, shared by all
    turns), ``algorithm.gamma`` (for the transition layout) and the ``gem`` section
    (:class:`GemLoopConfig`) of the trainer config.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        section = self.config.get("gem", None)
        try:
            self.gem_config = GemLoopConfig.model_validate(
                OmegaConf.to_container(section, resolve=True) if section is not None else {}
            )
        except ValidationError as exc:
            raise ConfigError(f"bad `gem` section in the trainer config: {exc}") from None
        trainer = self.config.get("trainer", None)
        if trainer is not None and not trainer.get("use_v1", True):
            raise ConfigError(
                "gem_env_agent needs verl's v1 trainer (trainer.use_v1=true, the default): the legacy trainer keeps "
                "one reward per sample, so per-turn rewards would be lost"
            )
        algorithm = self.config.get("algorithm", None)
        self.gamma = check_gamma(algorithm.get("gamma", 1.0) if algorithm is not None else 1.0)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # type: ignore[override]  # verl v1 takes a list
        """Play one episode for the row ``kwargs`` and return its samples.

        Args:
            sampling_params: verl's sampling parameters; ``max_tokens`` is set per turn
                to what is left of ``rollout.response_length``.
            **kwargs: The row's fields (``extra_info``, ``index``, ``uid``, ...).

        Returns:
            One :class:`GemAgentLoopOutput` (sequence layout) or one per turn (transition
            layout); verl's v1 worker stores each as a sample.
        """
        request = EpisodeRequest.from_row(kwargs)
        env = to_async(
            gem_core.make(
                request.env_id,
                wrappers=list(self.gem_config.wrappers) or None,
                **{**self.gem_config.env_kwargs, **request.env_kwargs},
            )
        )
        try:
            played = await self._play(env, request, sampling_params)
        finally:
            await env.close()
        return self._outputs(played)

    async def _play(self, env: Any, request: EpisodeRequest, sampling_params: dict[str, Any]) -> _Played:
        timing = AgentLoopMetrics(num_preempted=0)
        observation, _ = await env.reset(seed=request.seed, options=request.options)
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        messages.append({"role": "user", "content": str(observation)})
        runtime_ids = await self.ct_build_initial_tokens(messages)
        response_mask: list[int] = []
        response_logprobs: list[float] | None = None
        turns: list[Turn] = []
        request_id = uuid4().hex
        max_turns = self.gem_config.max_turns
        while True:
            budget = self.response_length - len(response_mask)
            if budget <= 0:
                break
            started = time.perf_counter()
            generated = await self.server_manager.generate(
                request_id, prompt_ids=list(runtime_ids), sampling_params={**sampling_params, "max_tokens": budget}
            )
            timing.generate_sequences += time.perf_counter() - started
            if generated.num_preempted is not None:
                timing.num_preempted += generated.num_preempted
            action_ids = list(generated.token_ids[:budget])
            logprobs = list(generated.log_probs[:budget]) if generated.log_probs else None
            if not action_ids:
                break  # nothing generated: no token could carry this turn's reward
            if logprobs is not None and response_logprobs is None:
                response_logprobs = [0.0] * len(response_mask)
            prompt_ids = list(runtime_ids)
            merged, response_mask, response_logprobs = await self.ct_merge_assistant_token(
                runtime_ids, action_ids, response_mask, response_logprobs, assistant_logprobs=logprobs
            )
            runtime_ids = merged.token_ids
            action = self.tokenizer.decode(action_ids, skip_special_tokens=True)
            started = time.perf_counter()
            next_observation, reward, terminated, truncated, info = await env.step(action)
            timing.tool_calls += time.perf_counter() - started
            turns.append(
                Turn(
                    observation=str(observation),
                    action=action,
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    next_observation=str(next_observation),
                    info=dict(info),
                    prompt_token_ids=prompt_ids,
                    action_token_ids=action_ids,
                    action_logprobs=logprobs,
                )
            )
            if terminated or truncated:
                break
            if max_turns is not None and len(turns) >= max_turns:
                turns[-1].truncated = True
                break
            previous = [*messages, {"role": "assistant", "content": action}]
            messages = [*previous, {"role": "user", "content": str(next_observation)}]
            merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                previous, messages, runtime_ids, response_mask, response_logprobs
            )
            if len(new_mask) >= self.response_length:
                turns[-1].truncated = True  # the reply leaves no room for another turn
                break
            if merged.removed_prefix_token_count:
                # Some templates (GLM, Gemma) reuse the stop token as the next message's start: the
                # builder drops it from the stream, so it is no longer part of what the model generated.
                self._drop_generated_tail(turns[-1], merged.removed_prefix_token_count)
            runtime_ids, response_mask, response_logprobs = merged.token_ids, new_mask, new_logprobs
            observation = next_observation
        episode = Episode(
            turns=turns,
            start_state_id=f"{request.env_id}/seed={request.seed}",
            episode_id=request_id,
            env_id=request.env_id,
            seed=request.seed,
        )
        return _Played(episode, timing, runtime_ids, response_mask)

    @staticmethod
    def _drop_generated_tail(turn: Turn, count: int) -> None:
        ids = list(turn.action_token_ids or [])
        if count >= len(ids):
            raise TrajectoryError(
                f"the chat template builder removed {count} tokens but the turn generated only {len(ids)}"
            )
        turn.action_token_ids = ids[:-count]
        if turn.action_logprobs is not None:
            turn.action_logprobs = turn.action_logprobs[:-count]

    def _extra_fields(self, episode: Episode) -> dict[str, Any]:
        last_info = episode.turns[-1].info if episode.turns else {}
        return {
            # verl's own key for per-turn scores (kept in the batch's non-tensor fields).
            "turn_scores": [t.reward for t in episode.turns],
            # The v1 worker reads this from the last output once reward_score is set.
            "reward_extra_info": {},
            "gem": {
                "env_id": episode.env_id,
                "seed": episode.seed,
                "episode_return": episode.total_reward,
                "num_turns": episode.num_turns,
                "terminated": episode.terminated,
                "truncated": episode.truncated,
                "success": _metrics_value(last_info.get("success")),
                "format_errors": sum(bool(t.info.get("format_error")) for t in episode.turns),
            },
        }

    def _outputs(self, played: _Played) -> list[AgentLoopOutput]:
        episode, timing = played.episode, played.timing
        if not episode.turns:
            raise TrajectoryError(
                f"episode of {episode.env_id} (seed {episode.seed}) has no turns: the server generated nothing or "
                f"rollout.response_length={self.response_length} leaves no room"
            )
        extra = self._extra_fields(episode)
        if self.gem_config.layout == "sequence":
            sequence = episode_to_sequence(episode)
            start = sequence.prompt_length
            response_ids = sequence.input_ids[start:].tolist()
            response_mask = sequence.loss_mask[start:].astype(int).tolist()
            # The core's layout and verl's continuous-token stream must be the same tokens and mask.
            if sequence.input_ids.tolist() != played.token_ids or response_mask != played.response_mask:
                raise TrajectoryError(
                    "the episode's token-in/token-out sequence differs from the stream verl's continuous-token "
                    "builder produced; use +gem.layout=transition with this tokenizer"
                )
            output = GemAgentLoopOutput(
                prompt_ids=sequence.input_ids[:start].tolist(),
                response_ids=response_ids,
                response_mask=response_mask,
                response_logprobs=None if sequence.token_logprobs is None else sequence.token_logprobs[start:].tolist(),
                token_rewards=sequence.token_rewards[start:].tolist(),
                reward_score=episode.total_reward,
                num_turns=2 * episode.num_turns,
                metrics=timing,
                extra_fields=extra,
            )
            return [output]
        returns = discounted_returns(episode, self.gamma)
        outputs: list[AgentLoopOutput] = []
        samples = episode_to_transitions(episode, returns)
        for sample in samples:
            token_rewards = [0.0] * len(sample.response_ids)
            token_rewards[-1] = sample.advantage  # the return G_t: see the module docstring
            outputs.append(
                GemAgentLoopOutput(
                    prompt_ids=sample.prompt_ids,
                    response_ids=sample.response_ids,
                    response_mask=[1] * len(sample.response_ids),
                    response_logprobs=sample.response_logprobs,
                    token_rewards=token_rewards,
                    reward_score=sample.advantage,
                    num_turns=2 * sample.turn_index + 2,
                    metrics=timing,
                    extra_fields={**extra, "gem_turn_index": sample.turn_index},
                )
            )
        return outputs
