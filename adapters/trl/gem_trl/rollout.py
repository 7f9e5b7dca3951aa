"""Multi-turn gem episodes as a TRL ``rollout_func``: TRL's generate in, TRL's format out.

TRL's ``GRPOTrainer`` calls ``rollout_func(prompts, trainer)`` with this process's
prompts (already repeated ``num_generations`` times) and expects one completion per
prompt. :class:`GemRollout` reads each prompt as an *episode key* (env id and seed,
see :func:`make_prompt_dataset`) and has the core's episode engine
(:class:`gem_core.episode.EpisodeEngine`) play one episode per key. All the adapter
does is:

1. **generate**: one batched call per turn for every episode still running, through
   the trainer's ``model.generate`` (:func:`hf_generate`) or TRL's vLLM engine
   (:func:`vllm_generate`); both return the sampled ids and whether the reply was cut
   at its token limit;
2. **convert**: each finished episode's token context becomes TRL's ``prompt_ids``,
   ``completion_ids``, ``env_mask`` (1 exactly on generated tokens) and ``logprobs``.

History, chat template bridges, budgets, cut replies, truncation flags and
``start_state_id`` are the engine's.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

import gem_core
from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.episode import (
    BatchGenerate,
    CutPolicy,
    EnvErrorPolicy,
    EpisodeEngine,
    EpisodeJob,
    EpisodeLimits,
    EpisodeSession,
    Generation,
    TurnRequest,
    check_batch,
    cut_at_stop,
    env_error_report,
    failed_by_env,
)
from gem_core.errors import ConfigError, TemplatePrefixError, TrajectoryError
from gem_core.registry import WrapperRef
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_trl.vision import episode_features, generate_image_kwargs, image_token_id, is_processor

__all__ = [
    "EPISODE_KEY_SEPARATOR",
    "GemRollout",
    "RolloutTimings",
    "episode_key",
    "episode_return_reward",
    "hf_generate",
    "make_prompt_dataset",
    "parse_episode_key",
    "trainer_tokenizer",
    "vllm_awake",
    "vllm_generate",
]

_logger = logging.getLogger(__name__)

#: Joins env id and seed in an episode key: ``"core:NumberGuess-v0#17"``. Env ids never contain it.
EPISODE_KEY_SEPARATOR = "#"


def episode_key(env_id: str, seed: int) -> str:
    """The prompt string that asks :class:`GemRollout` for one episode of ``env_id`` reset with ``seed``."""
    if EPISODE_KEY_SEPARATOR in env_id:
        raise ConfigError(f"env id {env_id!r} must not contain {EPISODE_KEY_SEPARATOR!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative int, got {seed!r}")
    return f"{env_id}{EPISODE_KEY_SEPARATOR}{int(seed)}"


def parse_episode_key(prompt: Any) -> tuple[str, int]:
    """Split an episode key back into ``(env_id, seed)``.

    Raises:
        ConfigError: ``prompt`` is not a key made by :func:`episode_key`; the usual cause
            is a dataset not built with :func:`make_prompt_dataset`.
    """
    if isinstance(prompt, str):
        env_id, sep, seed = prompt.rpartition(EPISODE_KEY_SEPARATOR)
        if sep and env_id and seed.isdigit():
            return env_id, int(seed)
    raise ConfigError(
        f"prompt {prompt!r} is not an episode key like 'core:NumberGuess-v0#17'; build the training dataset with "
        "gem_trl.make_prompt_dataset(env_ids, seeds)"
    )


def make_prompt_dataset(env_ids: str | Sequence[str], seeds: int | Sequence[int] = 64, *, start_seed: int = 0) -> Any:
    """Build the prompt dataset GRPOTrainer iterates over: one row per (env id, seed).

    Args:
        env_ids: One env id or several; rows cycle through them seed by seed.
        seeds: How many seeds per env (``start_seed``, ``start_seed + 1``, ...) or the seeds themselves.
        start_seed: First seed when ``seeds`` is a count.

    Returns:
        A ``datasets.Dataset`` with a ``prompt`` column of episode keys (plus ``env_id`` and
        ``seed`` columns for reading). Ids are checked against the registry here, so a typo
        fails before training starts.

    Example:
        >>> ds = make_prompt_dataset("core:NumberGuess-v0", 3)
        >>> ds["prompt"]
        ['core:NumberGuess-v0#0', 'core:NumberGuess-v0#1', 'core:NumberGuess-v0#2']
    """
    from datasets import Dataset

    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    if not ids:
        raise ConfigError("env_ids is empty; give at least one registered env id")
    for env_id in ids:
        gem_core.spec(env_id)  # raises EnvNotFound with close matches
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ConfigError(f"seeds must be >= 1 when it is a count, got {seeds}")
        seed_list = list(range(start_seed, start_seed + int(seeds)))
    else:
        seed_list = [int(s) for s in seeds]
    rows = [(env_id, seed) for seed in seed_list for env_id in ids]
    return Dataset.from_dict(
        {
            "prompt": [episode_key(env_id, seed) for env_id, seed in rows],
            "env_id": [env_id for env_id, _ in rows],
            "seed": [seed for _, seed in rows],
        }
    )


def episode_return_reward(
    prompts: list[Any], completions: list[Any], episode_return: list[float], **_: Any
) -> list[float]:
    """A TRL reward function: each completion's (discounted) episode return, as computed by the rollout.

    GRPO uses it as the trajectory reward; with ReBN it only feeds TRL's ``reward`` log.
    """
    return [float(r) for r in episode_return]


def trainer_tokenizer(trainer: Any) -> Any:
    """The trainer's tokenizer (a multimodal processor wraps its tokenizer)."""
    processor = trainer.processing_class
    return getattr(processor, "tokenizer", processor)


@dataclass
class RolloutTimings:
    """Seconds spent in one call, split by who spent them."""

    generate: float = 0.0
    env: float = 0.0
    adapter: float = 0.0
    turns: int = 0
    generated_tokens: int = 0

    @property
    def total(self) -> float:
        return self.generate + self.env + self.adapter


#: The per-episode fields of every row gem hands TRL's ``rollout_func`` contract (the rollouts add their own).
EPISODE_ROW_FIELDS: tuple[str, ...] = (
    "prompt_ids",
    "completion_ids",
    "env_mask",
    "episode",
    "turn_rewards",
    "turn_spans",
    "episode_return",
    "num_turns",
    "success",
    "terminated",
    "truncated",
    "end_reason",
    "cut_turns",
    "env_error",
)


class _EnvPool:
    """Reusable env instances per id, so a rollout does not rebuild envs every step."""

    def __init__(self, wrappers: Sequence[WrapperRef], env_kwargs: Mapping[str, Any]) -> None:
        self.wrappers = list(wrappers)
        self.env_kwargs = dict(env_kwargs)
        self.free: dict[str, list[Env]] = {}

    def acquire(self, env_id: str) -> Env:
        free = self.free.setdefault(env_id, [])
        if free:
            return free.pop()
        env: Env | AsyncEnv = gem_core.make(env_id, wrappers=self.wrappers or None, **self.env_kwargs)
        return to_sync(env) if isinstance(env, AsyncEnv) else env

    def release(self, env_id: str, env: Env) -> None:
        self.free.setdefault(env_id, []).append(env)

    def discard(self, env: Env) -> None:
        """Close an env that raised (it may be broken) instead of reusing it."""
        try:
            env.close()
        except Exception as exc:  # a broken env may not close either; the next episode gets a new one
            _logger.warning("closing an env that raised failed too: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        for envs in self.free.values():
            for env in envs:
                env.close()
        self.free.clear()


class GemRollout:
    """A TRL ``rollout_func`` that plays one whole gem episode per prompt with the core's episode engine.

    Args:
        wrappers: Wrappers added to every env (registered names, ``(name, kwargs)`` or callables).
        gamma: Per-turn discount of the ``episode_return`` field (the GRPO reward).
        max_turns: Stop an episode after this many turns (``None``: the env decides).
        max_turn_tokens: Most tokens the model may generate in one turn.
        max_completion_length: Most completion tokens (generated plus env replies) per
            episode; ``None`` takes the trainer's ``max_completion_length``. An episode whose
            next env reply would leave no room for another generated token ends after its
            current turn (``truncated``).
        on_cut: What a reply cut at its token limit becomes: ``"invalid"`` (GEM's rule:
            the env gets an invalid action and gives its penalty), ``"pass"`` (the cut text
            is sent) or ``"truncate"`` (the episode ends there).
        system_prompt: Optional system message before the first observation.
        env_kwargs: Constructor overrides passed to every ``gem_core.make``.
        chat_template_kwargs: Extra arguments for ``apply_chat_template``; ``None`` takes the trainer's.
        on_env_error: ``"end"`` (default): an env that raises in ``reset`` or ``step`` ends
            only its own episode, which then carries no loss weight (``env_mask`` all 0);
            ``"raise"``: the error stops the rollout (and the training step).

    Each call returns TRL's keys ``prompt_ids``, ``completion_ids``, ``logprobs``
    (vLLM only; ``None`` with ``model.generate``, as in TRL's own transformers path)
    and ``env_mask``, plus per-episode fields that TRL hands to reward functions and to
    :class:`~gem_trl.trainer.GemGRPOTrainer`: ``episode`` (the core's
    :class:`~gem_core.rl.types.Episode`), ``turn_rewards``, ``turn_spans`` (``[start,
    end)`` of each turn's generated tokens in the completion), ``episode_return``,
    ``num_turns``, ``success``, ``terminated``, ``truncated``, ``end_reason``, ``cut_turns``,
    ``env_error`` (the ``"Type: message"`` of an env error that ended the episode, else ``None``),
    ``image_inputs`` (with a processor: the processor's features of the context's images, in
    token order, else ``None``; see :mod:`gem_trl.vision`).
    An episode an env error ended keeps its turns in the completion, all masked out; one
    that has no completion token left (the env failed in ``reset`` or its first step)
    gets a single masked stop token, since TRL needs a token per completion.
    """

    def __init__(
        self,
        *,
        wrappers: Sequence[WrapperRef] = (),
        gamma: float = 1.0,
        max_turns: int | None = None,
        max_turn_tokens: int = 64,
        max_completion_length: int | None = None,
        on_cut: CutPolicy = "invalid",
        system_prompt: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        on_env_error: EnvErrorPolicy = "end",
    ) -> None:
        self.gamma = check_gamma(gamma)
        self.max_completion_length = max_completion_length
        # Validates the limits now (ConfigError naming the field); the episode budget is set in setup().
        self.limits = EpisodeLimits(
            max_turns=max_turns,
            max_turn_tokens=max_turn_tokens,
            max_episode_tokens=max_completion_length,
            on_cut=on_cut,
            system_prompt=system_prompt,
            on_env_error=on_env_error,
        )
        self.chat_template_kwargs = chat_template_kwargs
        self.pool = _EnvPool(wrappers, env_kwargs or {})
        self.engine: EpisodeEngine | None = None
        #: Timings of the latest call (read by benchmarks and logged as ``gem/time_*``).
        self.last_timings = RolloutTimings()

    # ------------------------------------------------------------------ set-up

    def setup(self, trainer: Any) -> EpisodeEngine:
        """Build the episode engine for ``trainer``'s tokenizer once, probing its chat template.

        :class:`~gem_trl.trainer.GemGRPOTrainer` calls this in its constructor, so a
        template that cannot be bridged fails before training starts; a stock
        ``GRPOTrainer`` gets it on the first rollout.

        Raises:
            TemplatePrefixError: The chat template cannot be cut into per-turn bridges; names the template.
        """
        kwargs = self.chat_template_kwargs if self.chat_template_kwargs is not None else trainer.chat_template_kwargs
        budget = self.max_completion_length or trainer.max_completion_length
        limits = EpisodeLimits(
            max_turns=self.limits.max_turns,
            max_turn_tokens=self.limits.max_turn_tokens,
            max_episode_tokens=budget,
            on_cut=self.limits.on_cut,
            system_prompt=self.limits.system_prompt,
            on_env_error=self.limits.on_env_error,
        )
        try:
            if is_processor(trainer.processing_class):  # a VLM: the processor places each image's tokens
                self.engine = EpisodeEngine(
                    None, limits, chat_template_kwargs=kwargs, processor=trainer.processing_class
                )
            else:
                self.engine = EpisodeEngine(trainer_tokenizer(trainer), limits, chat_template_kwargs=kwargs)
        except TemplatePrefixError as exc:
            raise TemplatePrefixError(
                f"gem_trl: {exc} TRL trains one sequence per episode, so re-rendering every turn is not an "
                "option here: give the trainer a processing_class whose chat template renders earlier messages "
                "independently of later ones, or chat_template_kwargs that make it do so."
            ) from exc
        return self.engine

    # ------------------------------------------------------------------ TRL entry point

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt with ``trainer``'s model; TRL's ``rollout_func`` signature."""
        if self.engine is None:
            self.setup(trainer)
        keys = [parse_episode_key(p) for p in prompts]
        if trainer.use_vllm:
            with vllm_awake(trainer):  # a sleeping colocated engine wakes once per rollout, not per turn
                sessions = self.play(keys, vllm_generate(trainer), batch_size_across_ranks=_turn_sync(trainer))
        else:
            sessions = self.play(keys, hf_generate(trainer), batch_size_across_ranks=_turn_sync(trainer))
        started = time.perf_counter()
        out = self.to_trl(sessions)
        self.last_timings.adapter += time.perf_counter() - started
        self._log(trainer, out)
        return out

    # ------------------------------------------------------------------ generate

    def play(
        self,
        keys: Sequence[tuple[str, int]],
        generate: BatchGenerate,
        *,
        batch_size_across_ranks: Callable[[int], int] | None = None,
    ) -> list[EpisodeSession]:
        """Play one episode per ``(env_id, seed)`` with a batched ``generate``; return the sessions, in order.

        Args:
            keys: Env id and reset seed of each episode.
            generate: ``generate(requests) -> generations``, one call per turn for every running episode.
            batch_size_across_ranks: For collective backends (TRL's vLLM server, or colocated
                vLLM with tensor parallelism), which need the same number of prompts from every
                rank: called once per turn with this rank's running episodes, returns the most
                on any rank. Short ranks fill up with a copy of a request and drop its answers;
                ranks stop together when no rank has an episode left.
        """
        if self.engine is None:
            raise RuntimeError("call setup(trainer) before play(), or call the rollout as TRL does")
        timings = self.last_timings = RolloutTimings()
        started = time.perf_counter()
        timed = _Timed(generate, timings, batch_size_across_ranks, self._filler_request)
        envs = [self.pool.acquire(env_id) for env_id, _ in keys]
        jobs = [EpisodeJob(env=env, env_id=env_id, seed=seed) for env, (env_id, seed) in zip(envs, keys, strict=True)]
        sessions: list[EpisodeSession] = []
        try:
            sessions = self.engine.play_batch(jobs, timed)
            timed.drain()
        finally:
            for index, (env, (env_id, _)) in enumerate(zip(envs, keys, strict=True)):
                if index < len(sessions) and sessions[index].end_reason == "error":
                    self.pool.discard(env)
                else:
                    self.pool.release(env_id, env)
        timings.env = sum(sum(s.env_seconds) for s in sessions)
        timings.adapter += time.perf_counter() - started - timings.generate - timings.env
        return sessions

    # ------------------------------------------------------------------ convert

    def to_trl(self, sessions: Sequence[EpisodeSession]) -> dict[str, Any]:
        """Lay out finished episodes the way ``GRPOTrainer`` takes a ``rollout_func``'s output.

        The completion is the session's token context after the first prompt: the
        generated ids as sampled and the template's bridges with the env's replies. O(tokens) per episode.
        """
        out: dict[str, list[Any]] = {key: [] for key in (*EPISODE_ROW_FIELDS, "image_inputs")}
        logprobs: list[list[float]] | None = []
        for session in sessions:
            episode = session.episode()
            failed = failed_by_env(episode)
            if not failed and (not episode.turns or session.context is None):
                raise TrajectoryError(
                    f"episode {episode.episode_id} ended without a turn ({session.end_reason}); TRL needs at least "
                    "one generated token per completion"
                )
            context = session.context if session.context is not None else self._placeholder_prompt()
            start = session.prompt_length if session.context is not None else len(context)
            completion = context[start:]
            mask = [0] * len(completion)
            token_logprobs: list[float] | None = [0.0] * len(completion)
            spans = []
            for turn in episode.turns:
                generated = turn.action_token_ids or []
                begin = len(turn.prompt_token_ids or []) - start
                end = begin + len(generated)
                spans.append([begin, end])
                mask[begin:end] = [0 if failed else 1] * len(generated)
                if token_logprobs is not None and turn.action_logprobs is not None:
                    token_logprobs[begin:end] = turn.action_logprobs
                else:
                    token_logprobs = None
            if not completion:  # an env error before any turn: one masked token, as TRL needs one
                completion, mask = [self._stop_token()], [0]
                token_logprobs = None if token_logprobs is None else [0.0]
            out["prompt_ids"].append(context[:start])
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["episode"].append(episode)
            out["turn_rewards"].append([t.reward for t in episode.turns])
            out["turn_spans"].append(spans)
            returns = discounted_returns(episode, self.gamma)
            out["episode_return"].append(float(returns[0]) if len(returns) else 0.0)
            out["num_turns"].append(episode.num_turns)
            out["success"].append(bool(episode.turns and episode.turns[-1].info.get("success", False)) and not failed)
            out["terminated"].append(episode.terminated)
            out["truncated"].append(episode.truncated)
            out["end_reason"].append(session.end_reason)
            out["cut_turns"].append(session.cut_turns)
            out["env_error"].append(episode.metadata["error"] if failed else None)
            # the context's images, encoded once by the engine: GemGRPOTrainer feeds them to every forward
            out["image_inputs"].append(episode_features(session.image_inputs) if session.context is not None else None)
            if logprobs is not None and token_logprobs is not None:
                logprobs.append(token_logprobs)
            else:
                logprobs = None
        return {**out, "logprobs": logprobs}

    def _placeholder_prompt(self) -> list[int]:
        """The prompt of a row whose env failed in ``reset``: the system prompt (if any) and an empty user turn."""
        assert self.engine is not None
        messages: list[Any] = [{"role": "system", "content": self.limits.system_prompt}] * bool(
            self.limits.system_prompt
        )
        return self.engine.first_prompt_ids([*messages, {"role": "user", "content": ""}])

    def _stop_token(self) -> int:
        assert self.engine is not None
        eos = getattr(self.engine.tokenizer, "eos_token_id", None)
        return int(eos) if eos is not None else min(self.engine.stop_token_ids, default=0)

    def _filler_request(self) -> TurnRequest:
        """A request for a rank whose episodes all failed in ``reset`` but must join the others' collective calls."""
        return TurnRequest(episode_index=0, turn=0, prompt_ids=self._placeholder_prompt(), messages=[], max_tokens=1)

    def _log(self, trainer: Any, out: Mapping[str, Any]) -> None:
        log = getattr(trainer, "_log_metric", None)  # TRL averages these across processes per step
        if log is None:
            return
        t = self.last_timings
        log("gem/episode_return", float(np.mean(out["episode_return"])))
        log("gem/num_turns", float(np.mean(out["num_turns"])))
        log("gem/success", float(np.mean(out["success"])))
        log("gem/truncated", float(np.mean(out["truncated"])))
        log("gem/cut_turns", float(np.mean(out["cut_turns"])))
        log("gem/env_errors", float(sum(e is not None for e in out["env_error"])))
        report = env_error_report(out["episode"])
        if report is not None:
            _logger.warning("gem_trl: %s", report)
        log("gem/time_generate", t.generate)
        log("gem/time_env", t.env)
        log("gem/time_adapter", t.adapter)

    def close(self) -> None:
        """Close the pooled envs."""
        self.pool.close()


class _Timed:
    """Wraps a batched generate: times it, counts tokens, and keeps collective backends in step across ranks."""

    def __init__(
        self,
        generate: BatchGenerate,
        timings: RolloutTimings,
        batch_size_across_ranks: Callable[[int], int] | None,
        make_filler: Callable[[], TurnRequest],
    ) -> None:
        self.generate = generate
        self.timings = timings
        self.sync = batch_size_across_ranks
        self.make_filler = make_filler
        self.filler: TurnRequest | None = None

    def __call__(self, requests: list[TurnRequest]) -> list[Generation]:
        self.filler = self.filler or requests[0]
        wanted = len(requests) if self.sync is None else self.sync(len(requests))
        sent = [*requests, *[self.filler] * (wanted - len(requests))]
        started = time.perf_counter()
        # The batch's shape is checked here (the engine checks each answer): a backend returning None or a
        # dict is a GenerateContractError naming the episodes, not a TypeError.
        generations = check_batch(self.generate(sent), sent, token_mode=True)[: len(requests)]
        self.timings.generate += time.perf_counter() - started
        self.timings.turns += 1
        self.timings.generated_tokens += sum(
            len(g.token_ids) for g in generations if isinstance(g, Generation) and isinstance(g.token_ids, list)
        )
        return generations

    def drain(self) -> None:
        """Join the other ranks' collective calls until no rank has an episode left."""
        if self.sync is None:
            return
        while (wanted := self.sync(0)) > 0:
            self.filler = self.filler or self.make_filler()  # none when this rank's envs all failed in reset
            self.generate([self.filler] * wanted)


# ---------------------------------------------------------------------- generation backends


def _turn_limit(requests: Sequence[TurnRequest], trainer: Any) -> int:
    return max(r.max_tokens or trainer.max_completion_length for r in requests)


def hf_generate(trainer: Any) -> BatchGenerate:
    """One batched ``model.generate`` per turn with the trainer's sampling settings (``use_vllm=False``).

    Contexts are left-padded so every row's next token lands in one column. The call
    generates up to the largest token limit of the batch; each row is then cut at its
    first stop token and at its own limit (:func:`~gem_core.episode.cut_at_stop`: no stop
    token within the limit means the reply was cut, ``finish_reason="length"``).
    """
    import torch
    from trl.models.utils import unwrap_model_for_generation

    tokenizer = trainer_tokenizer(trainer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stop_ids = set(trainer.eos_token_ids)
    device = trainer.accelerator.device
    configs: dict[int, Any] = {}  # the trainer's sampling settings, with a turn's token limit
    image_token = image_token_id(trainer.processing_class)

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        limit = _turn_limit(requests, trainer)
        if limit not in configs:
            configs[limit] = copy.deepcopy(trainer.generation_config)
            configs[limit].max_new_tokens = limit
        contexts = [r.prompt_ids or [] for r in requests]
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            input_ids[row, width - len(context) :] = torch.tensor(context)
            attention_mask[row, width - len(context) :] = 1
        # a VLM reads each context's images (none for a text model or a text-only batch)
        images = generate_image_kwargs([r.image_inputs for r in requests], input_ids.to(device), image_token)
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),  # FSDP: whole weights, as TRL
        ):
            sequences = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=configs[limit],
                **images,
            )
        new = sequences[:, width:].tolist()
        return [
            cut_at_stop(row[: r.max_tokens or limit], stop_ids, r.max_tokens or limit)
            for row, r in zip(new, requests, strict=True)
        ]

    return generate


def vllm_generate(trainer: Any) -> BatchGenerate:
    """One call to TRL's vLLM engine per turn (``use_vllm=True``, server or colocate), with sampling logprobs.

    The engine reads its token limit from ``max_completion_length`` at call time; it is
    set to the turn's limit for the call and restored. The reply was cut when it holds no
    stop token and used its whole limit.
    """
    engine = trainer.vllm_generation
    stop_ids = set(trainer.eos_token_ids)

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        if any(r.images for r in requests):
            raise ConfigError(
                "gem_trl: an episode's context holds images, and gem-trl sends TRL's vLLM engine token ids only "
                "(vLLM's multimodal input is not wired here yet); train image envs with use_vllm=False "
                "(model.generate reads the images)"
            )
        limit = _turn_limit(requests, trainer)
        saved = engine.max_completion_length
        engine.max_completion_length = limit
        try:
            _, completion_ids, logprobs, _ = engine.generate(
                prompts=[r.prompt_ids or [] for r in requests], images=None, num_generations=1
            )
        finally:
            engine.max_completion_length = saved
        out = []
        for i, (ids, request) in enumerate(zip(completion_ids, requests, strict=True)):
            own = request.max_tokens or limit
            # vLLM's logprob is None where it is NaN; TRL maps that back to NaN, and so does this: the
            # engine's generate contract then refuses the turn by name instead of feeding NaN to the loss.
            lps = (
                None if logprobs is None else [float("nan") if top[0] is None else float(top[0]) for top in logprobs[i]]
            )
            out.append(cut_at_stop(list(ids)[:own], stop_ids, own, None if lps is None else lps[:own]))
        return out

    return generate


@contextmanager
def vllm_awake(trainer: Any) -> Iterator[None]:
    """Keep a colocated vLLM engine with ``vllm_enable_sleep_mode`` awake for a whole multi-turn rollout.

    TRL's ``VLLMGeneration.generate`` is built for one call per step: it wakes the engine,
    re-pushes every weight if they slept (``sleep(level=2)`` drops them) and sends it back
    to sleep. A multi-turn rollout calls it once per turn, so each turn would cost a full
    weight sync, and under ZeRO-3 or FSDP every sync gathers each parameter collectively:
    ranks whose episodes end after different numbers of turns would make different numbers
    of gathers and hang. Here the weights are pushed (if asleep) and the KV cache woken once,
    before the first turn, by every rank alike; the turns run with the engine's sleep switched
    off; and after the last turn the engine sleeps as TRL leaves it. Without sleep mode, or
    in server mode, it does nothing.
    """
    engine = trainer.vllm_generation
    if engine.mode != "colocate" or not engine.enable_sleep_mode:
        yield
        return
    if engine._llm_weights_sleeping:
        engine.sync_weights()  # wakes the weights and loads the trainer's; collective under ZeRO-3/FSDP
    engine.llm.wake_up(tags=["kv_cache"])
    engine.enable_sleep_mode = False  # generate() then neither syncs nor sleeps between turns
    try:
        yield
    finally:
        engine.enable_sleep_mode = True
        engine.llm.sleep(level=2)
        engine._llm_weights_sleeping = True


def _turn_sync(trainer: Any) -> Callable[[int], int] | None:
    """Per-turn batch size agreement for generate calls that are collective, else ``None``.

    TRL's server mode gathers every rank's prompts and hands back equal slices, and colocated
    vLLM with tensor parallelism does the same within its group; both need equal prompt
    counts on every rank, every turn. ``model.generate`` under DeepSpeed ZeRO-3 or FSDP gathers
    the sharded weights in every call: ranks must make the same number of calls, so a rank
    whose episodes ended keeps generating a filler until every rank is done.
    """
    accelerator = trainer.accelerator
    if accelerator.num_processes == 1:
        return None
    if trainer.use_vllm:
        engine = trainer.vllm_generation
        collective = engine.mode == "server" or engine.tensor_parallel_size > 1
    else:
        collective = _sharded_weights(trainer)
    if not collective:
        return None
    import torch

    def most_on_any_rank(local: int) -> int:
        return int(accelerator.gather(torch.tensor([local], device=accelerator.device)).max().item())

    return most_on_any_rank


def _sharded_weights(trainer: Any) -> bool:
    """Whether the trainer's weights are sharded across ranks (ZeRO-3 or FSDP), so each generate gathers them."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    zero3 = plugin is not None and getattr(plugin, "zero_stage", 0) == 3
    return zero3 or bool(getattr(trainer, "is_fsdp_enabled", False))
