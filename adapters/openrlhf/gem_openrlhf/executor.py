"""The gem agent executor: one env episode per OpenRLHF prompt sample, played by gem's episode engine.

OpenRLHF 0.11 builds the class named ``AgentExecutor`` in the file given as
``--train.agent_func_path`` once per vLLM actor (no constructor arguments) and awaits
``execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)`` for
each of the ``--rollout.n_samples_per_prompt`` samples of a prompt, concurrently on
the actor's event loop. :class:`GemAgentExecutor` reads the episode from the prompt
(:class:`~gem_openrlhf.dataset.EpisodeRequest`), makes the env, and lets
:meth:`gem_core.episode.EpisodeEngine.play` run it token in, token out: each turn
``llm_engine.generate(context_ids, sampling_params)`` returns a vLLM ``RequestOutput``,
the env steps in a worker thread (the loop never blocks), and its reply is appended as
a small chat-template bridge. The result is the dict OpenRLHF's
``SamplesGenerator._process_response_into_experience`` reads; the per-turn rewards and
turn boundaries that ReBN needs travel in its ``label`` (:class:`EpisodeLabel`).

Settings (:class:`ExecutorConfig`) come from the environment variable
``GEM_OPENRLHF_CONFIG``: a JSON object, or the path of a JSON file.
``gem-openrlhf-train --gem.config ...`` sets it for every Ray worker.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
from collections.abc import Mapping
from copy import deepcopy
from typing import Any, Literal

from openrlhf.utils.agent import AgentExecutorBase
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import gem_core
from gem_core.chat import ChatRenderer
from gem_core.core import to_async
from gem_core.episode import EpisodeEngine, EpisodeLimits, EpisodeSession, Generation, TurnRequest, failed_by_env
from gem_core.errors import ConfigError, TrajectoryError
from gem_openrlhf.dataset import EpisodeRequest

__all__ = [
    "CONFIG_ENV",
    "EXTRA_LOG_KEYS",
    "EpisodeLabel",
    "ExecutorConfig",
    "GemAgentExecutor",
    "generation_from_request_output",
]

#: Environment variable holding the executor settings (JSON text or a JSON file path).
CONFIG_ENV = "GEM_OPENRLHF_CONFIG"

#: ``extra_logs`` keys of every sample (OpenRLHF batches them per key, so every sample has all of them;
#: it logs their mean over the batch's samples: ``gem_env_errors`` is the share an env error ended).
EXTRA_LOG_KEYS = ("gem_turns", "gem_cut_turns", "gem_terminated", "gem_truncated", "gem_env_errors")


class ExecutorConfig(BaseModel):
    """How episodes are played, the same for every prompt row.

    Attributes:
        max_turns: Stop an episode after this many turns (the last turn counts as
            truncated); ``None`` leaves it to the env and the token budget.
        max_turn_tokens: Most tokens one turn may generate; defaults to
            ``--rollout.max_new_tokens`` when set. The whole context (first prompt
            included) is always capped at ``--data.max_len``.
        on_cut: A turn cut at its token limit is sent to the env as gem's invalid action
            (``"invalid"``, GEM's rule), as its text (``"pass"``), or ends the episode
            (``"truncate"``).
        env_kwargs: Constructor overrides for every env (rows may add their own).
        wrappers: Wrappers for every env: registered names or ``[name, {kwargs}]``.
        system_prompt: A system message before every first observation (rows may override it).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments (e.g. ``{"enable_thinking": false}``).
        on_env_error: ``"end"`` (default): an env that raises in ``reset`` or ``step`` ends
            only its episode, returned as a sample with no action token (empty
            ``action_ranges``, reward 0) that ReBN leaves out; ``"raise"``: the error
            propagates out of ``execute`` (and OpenRLHF's rollout fails).
    """

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(default=None, ge=1)
    max_turn_tokens: int | None = Field(default=None, ge=1)
    on_cut: Literal["invalid", "pass", "truncate"] = "invalid"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    wrappers: list[str | tuple[str, dict[str, Any]]] = Field(default_factory=list)
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    on_env_error: Literal["end", "raise"] = "end"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExecutorConfig:
        """Read :data:`CONFIG_ENV` (JSON text or a JSON file path); defaults when unset.

        Raises:
            ConfigError: Unreadable file, bad JSON or unknown/invalid settings.
        """
        text = (os.environ if environ is None else environ).get(CONFIG_ENV, "").strip()
        if not text:
            return cls()
        source = f"${CONFIG_ENV}"
        if not text.startswith("{"):
            source = text
            try:
                with open(os.path.expanduser(text), encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise ConfigError(
                    f"{CONFIG_ENV}={source!r} is neither a JSON object nor a readable file: {exc}"
                ) from None
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise ConfigError(f"bad gem executor settings in {source}: {exc}") from None


class EpisodeLabel(BaseModel):
    """What an episode tells the trainer beyond OpenRLHF's scalar reward; returned as the sample's ``label``.

    OpenRLHF keeps ``label`` as per-sample metadata all the way into
    ``compute_advantages_and_returns``, where the ReBN estimator
    (:mod:`gem_openrlhf.rebn`) reads it.

    Attributes:
        start_state_id: ``"{env_id}/seed={seed}"``.
        turn_rewards: The env's reward per turn.
        turn_actions: The text each turn sent to ``env.step`` (gem's invalid-action
            marker for a turn cut at its token limit).
        turn_ranges: ``[start, end)`` of each turn's generated tokens in ``observation_tokens``
            (the same positions as the sample's ``action_ranges``).
        terminated: The episode reached a terminal state.
        truncated: It was cut (by the env, ``max_turns`` or the token budget).
        end_reason: Why it ended (:attr:`gem_core.episode.EpisodeSession.end_reason`).
        label: The dataset row's own label, unchanged.
        env_error: ``"Type: message"`` of the env error that ended the episode
            (``on_env_error="end"``); the turn lists are then empty (nothing to train on)
            and ``error_phase`` says where (``reset`` or ``step``).
        env_id: The env id (names the failed episode in the batch's warning).
        seed: The reset seed.
    """

    model_config = ConfigDict(extra="forbid")

    start_state_id: str
    turn_rewards: list[float]
    turn_actions: list[str]
    turn_ranges: list[tuple[int, int]]
    terminated: bool
    truncated: bool
    end_reason: str | None = None
    label: Any = None
    env_error: str | None = None
    error_phase: str | None = None
    env_id: str | None = None
    seed: int | None = None

    @classmethod
    def parse(cls, label: Any) -> EpisodeLabel:
        """Read a label written by :class:`GemAgentExecutor`.

        Raises:
            TrajectoryError: It is not one, e.g. the samples came from another executor.
        """
        try:
            return cls.model_validate_json(label) if isinstance(label, str) else cls.model_validate(label)
        except ValidationError as exc:
            raise TrajectoryError(
                f"sample label {str(label)[:80]!r} is not a gem episode label: per-turn ReBN needs the samples of "
                f"gem_openrlhf's AgentExecutor (--train.agent_func_path, set by gem-openrlhf-train); {exc}"
            ) from None


def generation_from_request_output(output: Any) -> Generation:
    """A :class:`~gem_core.episode.Generation` from a vLLM ``RequestOutput`` (its first completion).

    Reads ``outputs[0].token_ids``, ``.finish_reason`` and, when sampling asked for
    them, ``.logprobs`` (one ``{token_id: Logprob}`` per generated token; the sampled
    token's ``.logprob`` is kept). Ids, log-probs and the finish reason go on as vLLM
    sent them: the engine's generate contract refuses wrong types, ids outside the
    vocabulary, non-finite log-probs and a reason other than ``"stop"``, ``"length"``,
    ``"abort"`` or ``"repetition"`` (``None``, an unfinished request, included), naming
    the episode.

    Raises:
        TrajectoryError: No completion, or logprobs that do not cover the sampled tokens.
    """
    outputs = getattr(output, "outputs", None)
    if not outputs:
        raise TrajectoryError(f"vLLM request {getattr(output, 'request_id', None)!r} returned no completion")
    completion = outputs[0]
    token_ids: Any = completion.token_ids
    try:
        token_ids = [operator.index(t) for t in token_ids]
    except TypeError:  # not a sequence of ints: the contract refuses it, the logprobs cannot be looked up
        return Generation(token_ids=token_ids, finish_reason=completion.finish_reason)
    logprobs = None
    if completion.logprobs is not None:
        try:
            logprobs = [entry[token].logprob for entry, token in zip(completion.logprobs, token_ids, strict=True)]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise TrajectoryError(
                f"vLLM request {getattr(output, 'request_id', None)!r}: logprobs do not cover the sampled tokens "
                f"({type(exc).__name__}: {exc}); sample with SamplingParams(logprobs=1)"
            ) from None
    return Generation(token_ids=token_ids, logprobs=logprobs, finish_reason=completion.finish_reason, text=None)


class GemAgentExecutor(AgentExecutorBase):
    """Plays one gem env episode per ``execute`` call and returns it as an OpenRLHF sample.

    Reads :class:`ExecutorConfig` from :data:`CONFIG_ENV` at construction, so a bad
    setting fails when OpenRLHF builds its vLLM actors, not mid-rollout.
    """

    def __init__(self) -> None:
        self.config = ExecutorConfig.from_env()
        self._renderers: dict[tuple[Any, ...], ChatRenderer] = {}

    def _renderer(self, tokenizer: Any) -> ChatRenderer:
        # OpenRLHF ships the tokenizer with every generate_responses call (a fresh copy each
        # time): key the start-up template probe by what it depends on, not by identity.
        key = (
            type(tokenizer).__name__,
            getattr(tokenizer, "name_or_path", None),
            getattr(tokenizer, "chat_template", None),
            len(tokenizer),
            json.dumps(self.config.chat_template_kwargs, sort_keys=True, default=str),
        )
        renderer = self._renderers.get(key)
        if renderer is None:
            renderer = self._renderers[key] = ChatRenderer(tokenizer, self.config.chat_template_kwargs)
        return renderer

    def _limits(self, max_length: int, sampling_params: Any, system_prompt: str | None) -> EpisodeLimits:
        max_new_tokens = getattr(sampling_params, "max_tokens", None)
        return EpisodeLimits(
            max_turns=self.config.max_turns,
            max_turn_tokens=self.config.max_turn_tokens or max_new_tokens or None,
            max_context_tokens=int(max_length),
            on_cut=self.config.on_cut,
            system_prompt=system_prompt,
            on_env_error=self.config.on_env_error,
        )

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        """Play the episode named by ``prompt`` and return OpenRLHF's sample dict.

        Args:
            prompt: The row's prompt: ``{"gem": {"env_id": ..., "seed": ...}}`` as JSON.
            label: The row's label (kept inside the returned :class:`EpisodeLabel`).
            sampling_params: vLLM ``SamplingParams``; copied per turn with ``max_tokens`` set.
            max_length: ``--data.max_len``: most tokens in the whole sample.
            hf_tokenizer: The policy's tokenizer (its chat template renders the conversation).
            llm_engine: OpenRLHF's vLLM actor: ``await llm_engine.generate(token_ids, sampling_params)``.
            images: Unused (text envs).

        Returns:
            ``prompt``, ``label`` (an :class:`EpisodeLabel` as JSON), ``observation_tokens``,
            ``action_ranges``, ``rollout_log_probs``, ``reward`` and ``scores`` (the sum of
            turn rewards), ``truncated`` (the last turn was cut at its token limit),
            ``extra_logs`` (:data:`EXTRA_LOG_KEYS`), ``images`` and ``mm_train_inputs``.
            An episode an env error ended has no ``action_ranges`` (no token is trained on).

        Raises:
            ConfigError: The prompt names no gem episode, or the env cannot be made.
            Exception: What ``llm_engine`` raised, or the env under ``on_env_error="raise"``,
                noted with the episode it happened in.
        """
        request = EpisodeRequest.from_prompt(prompt)
        wants_logprobs = getattr(sampling_params, "logprobs", None) is not None
        env = await asyncio.to_thread(
            gem_core.make,
            request.env_id,
            wrappers=list(self.config.wrappers) or None,
            **{**self.config.env_kwargs, **request.env_kwargs},
        )
        system_prompt = request.system_prompt if request.system_prompt is not None else self.config.system_prompt
        engine = EpisodeEngine(
            hf_tokenizer,
            self._limits(max_length, sampling_params, system_prompt),
            chat_template_kwargs=self.config.chat_template_kwargs,
            renderer=self._renderer(hf_tokenizer),
        )

        async def generate(turn: TurnRequest) -> Generation:
            params = deepcopy(sampling_params)
            params.max_tokens = turn.max_tokens
            output = await llm_engine.generate(turn.prompt_ids, params)
            generation = generation_from_request_output(output)
            if not wants_logprobs:
                generation.logprobs = None
            return generation

        try:
            session = await engine.play(
                env, generate, env_id=request.env_id, seed=request.seed, options=request.options
            )
        finally:
            await to_async(env, in_thread=True).close()
        return self.sample(session, prompt, label, wants_logprobs)

    @staticmethod
    def sample(session: EpisodeSession, prompt: Any, label: Any, wants_logprobs: bool) -> dict[str, Any]:
        """OpenRLHF's sample dict for a finished session (see :meth:`execute`)."""
        episode = session.episode()
        failed = failed_by_env(episode)
        context = list(session.context or [])
        if not context:  # the env failed in reset: a sample still needs a token
            eos = session.engine.stop_token_ids
            context = [min(eos) if eos else 0]
        ranges: list[tuple[int, int]] = []
        log_probs: list[float] | None = [0.0] * len(context) if wants_logprobs else None
        turns = [] if failed else session.turns  # a failed episode trains nothing: no action range, no reward
        for turn in turns:
            start = len(turn.prompt_token_ids or [])
            ids = turn.action_token_ids or []
            ranges.append((start, start + len(ids)))
            if log_probs is not None and turn.action_logprobs is not None:
                log_probs[start : start + len(ids)] = turn.action_logprobs
        rewards = [float(t.reward) for t in turns]
        total = float(sum(rewards))
        episode_label = EpisodeLabel(
            start_state_id=session.start_state_id,
            turn_rewards=rewards,
            turn_actions=[t.action for t in turns],
            turn_ranges=ranges,
            terminated=episode.terminated,
            truncated=episode.truncated,
            end_reason=session.end_reason,
            label=label,
            env_error=episode.metadata["error"] if failed else None,
            error_phase=episode.metadata["error_phase"] if failed else None,
            env_id=session.env_id,
            seed=session.seed,
        )
        return {
            "prompt": prompt,
            "label": episode_label.model_dump_json(),
            "images": None,
            "mm_train_inputs": None,
            "observation_tokens": context,
            # Token positions [start, end) in observation_tokens, as OpenRLHF's own executors
            # return them; its sample generator marks them and shifts the mask by one.
            "action_ranges": ranges,
            "rollout_log_probs": log_probs,
            "reward": total,
            "scores": total,
            "truncated": bool(turns) and turns[-1].stop_reason == "length",
            "extra_logs": {
                "gem_turns": float(len(session.turns)),
                "gem_cut_turns": float(session.cut_turns),
                "gem_terminated": float(episode.terminated),
                "gem_truncated": float(episode.truncated),
                "gem_env_errors": float(failed),
            },
        }
