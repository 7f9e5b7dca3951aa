"""A verl agent loop that plays one gem env episode per dataset row: verl's generate in, verl's samples out.

verl's ``AgentLoopWorker`` builds one :class:`GemEnvAgentLoop` per sample (per row and
``rollout.n`` session) and awaits :meth:`GemEnvAgentLoop.run` with the row's fields.
Everything between the server and the samples is the core's episode engine
(:class:`gem_core.episode.EpisodeEngine`): the message history, the token context
(sampled ids are never re-tokenized; each env reply is appended as a per-turn bridge
from :class:`gem_core.chat.ChatRenderer`), the per-turn cap and the episode budget,
cut generations (an invalid action by default), truncation flags and the records.
This module only does two conversions:

* **generate in**: :meth:`GemEnvAgentLoop._generate` sends the engine's request to
  verl's LLM server client and maps its ``TokenOutput`` to a
  :class:`~gem_core.episode.Generation`;
* **samples out**: :meth:`GemEnvAgentLoop._outputs` turns the finished episode into
  :class:`GemAgentLoopOutput` s, carrying the server's ``extra_fields`` across turns the
  way verl's own loops do (the v1 trainer's per-step metrics read
  ``min_global_steps``/``max_global_steps`` of every sample).

With a VLM (verl passes the model's ``processor``), images go where verl documents them:
``image_data`` of each request and ``multi_modal_data`` of each sample (:mod:`gem_verl.vision`).

Per-turn rewards and explicit turn boundaries reach the ``rebn`` estimator through
:class:`GemAgentLoopOutput` (``rm_scores`` per token and ``gem_turn_ids``). Two layouts,
from the core (:mod:`gem_core.rl.layouts`):

* ``sequence`` (default): one output per episode; each turn's reward on its last
  generated token. Tokens grow linearly with turns.
* ``transition``: one output per turn (prompt = history, response = that turn's
  tokens); its reward is the turn's return ``G_t`` with ``algorithm.gamma``, because
  verl's estimator cannot tell which rows belong to one episode.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

import gem_core
from gem_core.chat import ChatRenderer
from gem_core.episode import (
    EpisodeEngine,
    EpisodeLimits,
    EpisodeSession,
    Generation,
    TurnRequest,
    failed_by_env,
)
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_core.rl.types import Episode
from gem_verl.async_hook import TOKEN_FIELDS
from gem_verl.options import GemLoopConfig, check_trainer_config, episode_metrics
from gem_verl.plugin import AGENT_NAME
from gem_verl.vision import PilCache, multi_modal_fields

__all__ = [
    "AGENT_NAME",
    "TOKEN_FIELDS",
    "EpisodeRequest",
    "GemAgentLoopOutput",
    "GemEnvAgentLoop",
    "GemLoopConfig",
    "finish_reason",
    "merge_extra_fields",
    "turn_versions",
]

_logger = logging.getLogger(__name__)

#: Per-request counters verl's tool loop sums over turns (speculative decoding stats).
_SUMMED_EXTRA_KEYS = ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_verify_steps")


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
    """An ``AgentLoopOutput`` that carries a reward, a turn index and a policy version per response token.

    verl's ``as_dict`` turns the scalar ``reward_score`` into ``rm_scores`` with the
    value on the last response token, and its v1 worker copies the last output's
    score onto every earlier output of the episode. Overriding ``as_dict`` (the only
    way v1 stores outputs) keeps each turn's own reward where the estimator sees it,
    and stores ``gem_turn_ids``: the explicit turn boundaries ``rebn`` reads (see
    :mod:`gem_verl.advantage`), so a response mask changed later (verl's token-level
    rejection sampling) cannot split a turn.
    """

    token_rewards: list[float]
    """One reward per response token; non-zero only on each turn's last generated token."""
    turn_ids: list[int]
    """Per response token: the index of the turn that generated it, ``-1`` on env/template tokens."""
    policy_versions: list[int] = []
    """Per response token: the policy version (verl's ``global_steps``) that sampled it, ``-1`` on other tokens;
    empty when the server reported no version. ``response_logprobs`` are the behaviour logprobs under it."""

    def per_token_fields(self) -> dict[str, list[Any]]:
        """The per-response-token fields under the names verl's storage gets (:data:`TOKEN_FIELDS`), checked."""
        fields = {"gem_token_rewards": self.token_rewards, "gem_turn_ids": self.turn_ids}
        fields["gem_policy_versions"] = self.policy_versions or [-1] * len(self.response_ids)
        for name, values in fields.items():
            if len(values) != len(self.response_ids):
                raise TrajectoryError(f"{len(values)} {name} for {len(self.response_ids)} response tokens")
        return fields

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        for name in ("token_rewards", "turn_ids", "policy_versions"):
            output.pop(name, None)
        fields = self.per_token_fields()
        output["rm_scores"] = torch.tensor(fields["gem_token_rewards"], dtype=torch.float32)
        output["gem_turn_ids"] = torch.tensor(fields["gem_turn_ids"], dtype=torch.int64)
        output["gem_policy_versions"] = torch.tensor(fields["gem_policy_versions"], dtype=torch.int64)
        return output


def turn_versions(episode: Episode, generations: list[Any]) -> list[list[int]] | None:
    """The policy version of every generated token, per turn; ``None`` when neither the engine nor verl told it.

    Turns the engine recorded ``policy_versions`` for keep them. Otherwise verl's server
    reports versions per request, not per token (``min_global_steps`` / ``max_global_steps``:
    a partial rollout resumed across a weight sync spans both): every token of the turn
    gets the request's oldest version, so a staleness bound over-counts a lag, never under-counts it.
    """
    out: list[list[int]] = []
    for index, turn in enumerate(episode.turns):
        n = len(turn.action_token_ids or [])
        if turn.policy_versions is not None:
            out.append(list(turn.policy_versions))
            continue
        extra = generations[index].extra if index < len(generations) else {}
        version = extra.get("min_global_steps", extra.get("global_steps"))
        if isinstance(version, bool) or not isinstance(version, int | np.integer):
            return None
        out.append([int(version)] * n)
    return out


def finish_reason(stop_reason: Any, token_ids: Any, max_tokens: int | None, stop_ids: set[int]) -> Any:
    """The engine's ``finish_reason`` for a verl ``TokenOutput``.

    verl's servers disagree: vLLM reports ``"completed"`` for both a stop and a cut at
    ``max_tokens`` (``"aborted"`` when aborted), SGLang passes its own ``"stop"`` /
    ``"length"`` / ``"abort"``, the fully-async client says ``"length"``. So a reply is
    cut when the server says so, or when it used all of ``max_tokens`` without ending
    in a stop token. Any other reason (``"error"``, a reason no server documents, a
    non-``str``) is passed on as it is, for the engine's generate contract to refuse
    naming the episode: read as a stop, a failed request would be scored as a reply.
    """
    if stop_reason is not None and not isinstance(stop_reason, str):
        return stop_reason
    reason = (stop_reason or "").lower()
    if reason in ("aborted", "abort"):
        return "abort"
    if reason in ("length", "repetition"):
        return reason
    if reason not in ("", "completed", "stop"):
        return stop_reason
    cut_at_cap = isinstance(token_ids, list) and max_tokens is not None and len(token_ids) >= max_tokens
    if cut_at_cap and (not token_ids or token_ids[-1] not in stop_ids):
        return "length"
    return "stop"


def merge_extra_fields(per_turn: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One episode's ``extra_fields`` from its turns' server ``extra_fields``, as verl's loops merge them.

    The first turn's fields are kept (verl's ``ToolAgentLoop`` does the same), then:
    ``min_global_steps`` is the smallest and ``max_global_steps`` the largest seen (the
    weight versions the episode was generated across; verl's v1 trainer builds
    ``np.array(..., dtype=int)`` from them every step), ``global_steps`` the last, and the
    speculative-decoding counters are summed.
    """
    merged: dict[str, Any] = {}
    for index, fields in enumerate(per_turn):
        if index == 0:
            merged.update(fields)
            continue
        for key, value in fields.items():
            if value is None:
                continue
            current = merged.get(key)
            if key == "min_global_steps":
                merged[key] = value if current is None else min(current, value)
            elif key == "max_global_steps":
                merged[key] = value if current is None else max(current, value)
            elif key == "global_steps":
                merged[key] = value
            elif key in _SUMMED_EXTRA_KEYS:
                merged[key] = int(current or 0) + int(value)
            else:
                merged.setdefault(key, value)
    return merged


def _metrics_value(value: Any) -> bool | float | str | None:
    """A JSON-safe scalar for ``extra_fields`` (info values are the env's own objects)."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return str(value)


# One template probe per tokenizer and chat-template settings per process: verl builds a loop per sample.
_RENDERERS: dict[tuple[int, str], ChatRenderer] = {}


def _renderer(tokenizer: Any, chat_template_kwargs: Mapping[str, Any]) -> ChatRenderer:
    key = (id(tokenizer), json.dumps(dict(chat_template_kwargs), sort_keys=True, default=str))
    renderer = _RENDERERS.get(key)
    if renderer is None or renderer.tokenizer is not tokenizer:
        renderer = _RENDERERS[key] = ChatRenderer(tokenizer, chat_template_kwargs)
    return renderer


def _config_get(section: Any, name: str, default: Any = None) -> Any:
    if section is None:
        return default
    getter = getattr(section, "get", None)
    return getter(name, default) if callable(getter) else getattr(section, name, default)


class GemEnvAgentLoop(AgentLoopBase):
    """Plays one gem env episode against verl's LLM server and returns it as verl samples.

    Registered as ``gem_env_agent`` by :mod:`gem_verl.plugin`. Reads
    ``rollout.response_length`` (the episode budget: everything after the first prompt),
    ``data.apply_chat_template_kwargs``, ``algorithm.gamma`` / ``adv_estimator`` and the
    ``gem`` section (:class:`GemLoopConfig`) of the trainer config.

    Raises:
        ConfigError: At construction: a refused option
            (:func:`gem_verl.options.check_trainer_config`, the table in ``docs/verl.md``).
        TemplatePrefixError: At construction: the tokenizer's chat template cannot be
            bridged turn by turn (the start-up probe).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the driver ran the same check before any model loaded (gem_verl.plugin); this covers other launchers
        self.gem_config = check_trainer_config(self.config)
        self.gamma = check_gamma(_config_get(self.config.get("algorithm", None), "gamma", 1.0))
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        limits = EpisodeLimits(
            max_turns=self.gem_config.max_turns,
            max_turn_tokens=self.gem_config.max_turn_tokens,
            max_episode_tokens=self.response_length,
            on_cut=self.gem_config.on_cut,
            on_env_error=self.gem_config.on_env_error,
        )
        chat_kwargs = dict(self.apply_chat_template_kwargs or {})
        if self.processor is not None:  # a VLM: its processor places the image tokens (gem_verl.vision)
            self.engine = EpisodeEngine(None, limits, chat_template_kwargs=chat_kwargs, processor=self.processor)
        else:
            self.engine = EpisodeEngine(
                self.tokenizer,
                limits,
                chat_template_kwargs=chat_kwargs,
                renderer=_renderer(self.tokenizer, chat_kwargs),
            )
        #: Decoded images of the episode, sent with every request and put into the samples.
        self._pil = PilCache()
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self._stop_ids = {int(eos)} if isinstance(eos, int) else set()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # type: ignore[override]  # verl v1 takes a list
        """Play one episode for the row ``kwargs`` and return its samples.

        Args:
            sampling_params: verl's sampling parameters; ``max_tokens`` is set per turn
                by the engine (per-turn cap, what is left of ``rollout.response_length``).
            **kwargs: The row's fields (``extra_info``, ``index``, ``uid``, ``session_id``, ...).

        Returns:
            One :class:`GemAgentLoopOutput` (sequence layout) or one per turn (transition
            layout); verl's v1 worker stores each as a sample. An episode an env error
            ended (``on_env_error="end"``) gives one sample that trains nothing.

        Raises:
            Exception: Whatever the server or the layout raised (and the env, under
                ``on_env_error="raise"``), after logging it at error level with the
                episode named (env id, seed, row uid and session, turn).
        """
        request = EpisodeRequest.from_row(kwargs)
        name = (
            f"{request.env_id} seed={request.seed} uid={kwargs.get('uid', '?')} session={kwargs.get('session_id', '?')}"
        )
        env: Any = None
        outputs_of_server: list[Any] = []
        request_id = uuid4().hex  # one sticky session on the server for the whole episode

        async def generate(turn: TurnRequest) -> Generation:
            return await self._generate(request_id, turn, sampling_params, outputs_of_server)

        try:
            env = gem_core.make(
                request.env_id,
                wrappers=list(self.gem_config.wrappers) or None,
                **{**self.gem_config.env_kwargs, **request.env_kwargs},
            )
            session = await self.engine.play(
                env,
                generate,
                env_id=request.env_id,
                seed=request.seed,
                options=request.options,
                episode_id=request_id,
                system_prompt=request.system_prompt,
            )
            return self._outputs(session, outputs_of_server, kwargs.get("global_steps"))
        except Exception as exc:
            # the engine's note names the episode's start state and turn
            where = "; ".join(getattr(exc, "__notes__", [])) or "before the first turn"
            _logger.error("gem episode failed: %s: %s", name, where, exc_info=True)
            raise
        finally:
            if env is not None:
                env.close()

    async def _generate(
        self, request_id: str, turn: TurnRequest, sampling_params: dict[str, Any], seen: list[Any]
    ) -> Generation:
        """Verl's generate: the engine's request to the LLM server client, its ``TokenOutput`` back as a Generation."""
        if turn.turn == 0 and len(turn.prompt_ids or []) > self.prompt_length:
            # verl's loops cut the prompt's head; that would break token in / token out, so say so instead
            raise TrajectoryError(
                f"the first prompt has {len(turn.prompt_ids or [])} tokens, more than "
                f"rollout.prompt_length={self.prompt_length}; raise it (and data.max_prompt_length) or shorten the "
                "env's first observation / system prompt"
            )
        params = dict(sampling_params)
        if turn.max_tokens is not None:
            params["max_tokens"] = turn.max_tokens
        # a VLM's context images, in token order, as verl's own loops send them
        images = {"image_data": self._pil(turn.images)} if turn.images else {}
        output = await self.server_manager.generate(
            request_id, prompt_ids=list(turn.prompt_ids or []), sampling_params=params, **images
        )
        seen.append(output)
        # ids and log_probs as the server sent them: the engine's generate contract checks them (types,
        # vocabulary, finite logprobs) and names the episode, where int()/float() here would raise raw
        # TypeErrors or silently truncate a float id.
        ids: Any = output.token_ids
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids) if isinstance(ids, list | tuple) else ids
        stop_ids = self._stop_ids | {int(t) for t in (params.get("stop_token_ids") or [])}
        log_probs: Any = output.log_probs
        empty = log_probs is None or (isinstance(log_probs, list | tuple) and not log_probs)
        extra = dict(output.extra_fields or {})
        versioned: dict[str, Any] = {}
        version = extra.get("min_global_steps", extra.get("global_steps"))
        # an engine that records per-token versions takes the request's (oldest) weight version, see turn_versions
        if "policy_version" in Generation.__dataclass_fields__ and type(version) is int:
            versioned["policy_version"] = version
        return Generation(
            token_ids=ids,
            logprobs=None if empty else log_probs,
            finish_reason=finish_reason(output.stop_reason, ids, turn.max_tokens, stop_ids),
            extra=extra,
            **versioned,
        )

    def _summary(self, episode: Episode) -> dict[str, Any]:
        last_info = episode.turns[-1].info if episode.turns else {}
        failed = failed_by_env(episode)
        return {
            "env_id": episode.env_id,
            "seed": episode.seed,
            "start_state_id": episode.start_state_id,
            "episode_return": episode.total_reward,
            "num_turns": episode.num_turns,
            "terminated": episode.terminated,
            "truncated": episode.truncated,
            "end_reason": episode.metadata.get("end_reason"),
            "cut_turns": episode.metadata.get("cut_turns", 0),
            "success": _metrics_value(last_info.get("success")),
            "format_errors": sum(bool(t.info.get("format_error")) for t in episode.turns),
            # per turn: what the env got (INVALID_ACTION for a cut reply) and its flags
            "actions": [t.action for t in episode.turns],
            "turn_terminated": [t.terminated for t in episode.turns],
            "turn_truncated": [t.truncated for t in episode.turns],
            # an env error that ended the episode (on_env_error="end"): counted as gem/env_errors
            "error": episode.metadata.get("error") if failed else None,
            "error_phase": episode.metadata.get("error_phase") if failed else None,
        }

    @staticmethod
    def _metrics(episode: Episode, outputs_of_server: list[Any]) -> AgentLoopMetrics:
        preempted = [o.num_preempted for o in outputs_of_server]
        # verl's loops: -1 when the server never reports it, else the sum of what it reported
        num_preempted = -1 if all(p is None for p in preempted) else sum(p or 0 for p in preempted)
        return AgentLoopMetrics(
            generate_sequences=float(sum(episode.metadata.get("policy_s", []))),
            tool_calls=float(sum(episode.metadata.get("env_s", []))),
            num_preempted=num_preempted,
        )

    def _outputs(
        self, session: EpisodeSession, outputs_of_server: list[Any], global_steps: Any = None
    ) -> list[AgentLoopOutput]:
        episode = session.episode()
        if failed_by_env(episode):
            return [self._failed_output(session, outputs_of_server, global_steps)]
        if not episode.turns:
            raise TrajectoryError(
                f"episode {episode.start_state_id} has no turns (ended by {session.end_reason!r}): the server "
                f"generated nothing or aborted, or rollout.response_length={self.response_length} leaves no room"
            )
        played = outputs_of_server[: len(episode.turns)]
        extra = merge_extra_fields([g.extra for g in session.generations])
        summary = self._summary(episode)
        extra.update(
            {
                # verl's own keys (kept in the batch's non-tensor fields by its worker)
                "turn_scores": [t.reward for t in episode.turns],
                "tool_rewards": [],
                # per episode, on each of its samples: DAPO's filter_groups metrics, verl's validation metrics
                "reward_extra_info": episode_metrics(summary),
                "gem": summary,
            }
        )
        metrics = self._metrics(episode, outputs_of_server)
        versions = turn_versions(episode, session.generations)
        if self.gem_config.layout == "sequence":
            sequence = episode_to_sequence(episode)
            start = sequence.prompt_length
            if sequence.input_ids.tolist() != session.context:
                raise TrajectoryError(f"episode {episode.start_state_id}: the layout differs from the engine's context")
            turn_ids = [-1] * (len(sequence.input_ids) - start)
            token_versions = [-1] * len(turn_ids) if versions is not None else []
            for index, (begin, end) in enumerate(sequence.turn_spans):
                turn_ids[begin - start : end - start] = [index] * (end - begin)
                if versions is not None:
                    token_versions[begin - start : end - start] = versions[index]
            output = GemAgentLoopOutput(
                prompt_ids=sequence.input_ids[:start].tolist(),
                response_ids=sequence.input_ids[start:].tolist(),
                response_mask=sequence.loss_mask[start:].astype(int).tolist(),
                response_logprobs=None if sequence.token_logprobs is None else sequence.token_logprobs[start:].tolist(),
                routed_experts=self._routed_experts(played[-1], len(sequence.input_ids)),
                token_rewards=sequence.token_rewards[start:].tolist(),
                turn_ids=turn_ids,
                policy_versions=token_versions,
                reward_score=episode.total_reward,
                num_turns=2 * episode.num_turns,
                metrics=metrics,
                extra_fields=extra,
                **multi_modal_fields(sequence.images, self._pil),
            )
            return [output]
        returns = discounted_returns(episode, self.gamma)
        outputs: list[AgentLoopOutput] = []
        for sample, server_output in zip(episode_to_transitions(episode, returns), played, strict=True):
            token_rewards = [0.0] * len(sample.response_ids)
            token_rewards[-1] = sample.advantage  # the return G_t: see the module docstring
            outputs.append(
                GemAgentLoopOutput(
                    prompt_ids=sample.prompt_ids,
                    response_ids=sample.response_ids,
                    response_mask=[1] * len(sample.response_ids),
                    response_logprobs=sample.response_logprobs,
                    routed_experts=self._routed_experts(
                        server_output, len(sample.prompt_ids) + len(sample.response_ids)
                    ),
                    token_rewards=token_rewards,
                    turn_ids=[0] * len(sample.response_ids),
                    policy_versions=[] if versions is None else versions[sample.turn_index],
                    reward_score=sample.advantage,
                    num_turns=2 * sample.turn_index + 2,
                    metrics=metrics,
                    extra_fields={**extra, "gem_turn_index": sample.turn_index},
                    **multi_modal_fields(sample.prompt_images, self._pil),
                )
            )
        return outputs

    def _failed_output(
        self, session: EpisodeSession, outputs_of_server: list[Any], global_steps: Any
    ) -> AgentLoopOutput:
        """The one sample of an episode an env error ended: its tokens so far, none of them trained on.

        ``response_mask`` is all 0 (verl's loss aggregations skip such rows), no token
        belongs to a turn (``rebn`` leaves the row out of its mean and std) and the
        reward is 0. An env that failed before any turn gives a one-token response (the
        stop token) after a placeholder prompt, since a sample needs both.
        """
        episode = session.episode()
        if session.context is not None:
            prompt, response = session.context[: session.prompt_length], session.context[session.prompt_length :]
        else:  # reset failed: no observation to render
            prompt, response = self.engine.first_prompt_ids([{"role": "user", "content": ""}]), []
        if not response:
            response = [min(self._stop_ids, default=0)]
        wants_logprobs = bool(_config_get(self.rollout_config, "calculate_log_probs", False))
        extra = merge_extra_fields([g.extra for g in session.generations])
        if global_steps is not None:  # no server reply told the weight version: the row's step (v1 needs one)
            extra.setdefault("min_global_steps", global_steps)
            extra.setdefault("max_global_steps", global_steps)
        summary = self._summary(episode)
        extra.update(
            {"turn_scores": [], "tool_rewards": [], "reward_extra_info": episode_metrics(summary), "gem": summary}
        )
        return GemAgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response,
            response_mask=[0] * len(response),
            response_logprobs=[0.0] * len(response) if wants_logprobs else None,
            token_rewards=[0.0] * len(response),
            turn_ids=[-1] * len(response),
            reward_score=0.0,
            num_turns=2 * episode.num_turns,
            metrics=self._metrics(episode, outputs_of_server),
            extra_fields=extra,
            **multi_modal_fields(session.images if session.context is not None else None, self._pil),
        )

    @staticmethod
    def _routed_experts(server_output: Any, length: int) -> Any:
        """The server's routing of a turn's prompt and reply, cut to the sample (verl's loops keep the last turn's)."""
        routed = getattr(server_output, "routed_experts", None)
        return None if routed is None else routed[:length]
