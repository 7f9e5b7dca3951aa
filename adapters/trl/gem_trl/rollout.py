"""Multi-turn gem episodes as a TRL ``rollout_func``.

TRL's ``GRPOTrainer`` calls ``rollout_func(prompts, trainer)`` with this process's
prompts (already repeated ``num_generations`` times) and expects one completion per
prompt. :class:`GemRollout` reads each prompt as an *episode key* (env id and seed,
see :func:`make_prompt_dataset`), plays one whole episode per key with the trainer's
model and returns the episode in the core's token-in/token-out layout
(:func:`gem_core.rl.layouts.episode_to_sequence`): the first observation is the
prompt, every later token is the completion, and ``env_mask`` is 1 exactly on the
tokens the model generated.

Generation is batched across the episodes still running: each turn, all of them go to
``model.generate`` together (or to TRL's vLLM engine when ``use_vllm=True``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gem_core
from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.errors import ConfigError
from gem_core.registry import WrapperRef
from gem_core.rl.layouts import EpisodeSequence, episode_to_sequence, render_ids
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_core.rl.types import Episode, Message, Turn

__all__ = [
    "EPISODE_KEY_SEPARATOR",
    "GemRollout",
    "GenerateFn",
    "RolloutTimings",
    "episode_key",
    "episode_return_reward",
    "make_prompt_dataset",
    "parse_episode_key",
]

#: Joins env id and seed in an episode key: ``"core:NumberGuess-v0#17"``. Env ids never contain it.
EPISODE_KEY_SEPARATOR = "#"

#: ``(contexts, max_new_tokens) -> [(generated_ids, logprobs or None), ...]``, one entry per context.
GenerateFn = Callable[[list[list[int]], int], list[tuple[list[int], list[float] | None]]]


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


@dataclass
class _Running:
    """One episode being played."""

    env: Env
    env_id: str
    seed: int
    messages: list[Message]
    context: list[int]
    observation: str
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    cut_by_budget: bool = False


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

    def close(self) -> None:
        for envs in self.free.values():
            for env in envs:
                env.close()
        self.free.clear()


class GemRollout:
    """A TRL ``rollout_func`` that plays one whole gem episode per prompt.

    Args:
        wrappers: Wrappers added to every env (registered names, ``(name, kwargs)`` or callables).
        gamma: Per-turn discount of the ``episode_return`` field (the GRPO reward).
        max_turns: Stop an episode after this many turns (``None``: the env decides).
        max_turn_tokens: Most tokens the model may generate in one turn.
        max_completion_length: Most completion tokens (generated plus env replies) per
            episode; ``None`` takes the trainer's ``max_completion_length``. An episode that
            would exceed it ends after its current turn (``truncated``).
        system_prompt: Optional system message before the first observation.
        env_kwargs: Constructor overrides passed to every ``gem_core.make``.
        chat_template_kwargs: Extra arguments for ``apply_chat_template``; ``None`` takes the trainer's.

    Each call returns TRL's keys ``prompt_ids``, ``completion_ids``, ``logprobs``
    (vLLM only; ``None`` with ``model.generate``, as in TRL's own transformers path)
    and ``env_mask``, plus per-episode fields that TRL hands to reward functions and to
    :class:`~gem_trl.trainer.GemGRPOTrainer`: ``episode`` (the core's
    :class:`~gem_core.rl.types.Episode`), ``turn_rewards``, ``turn_spans`` (``[start,
    end)`` of each turn's generated tokens in the completion), ``episode_return``,
    ``num_turns``, ``success``, ``terminated``, ``truncated``.
    """

    def __init__(
        self,
        *,
        wrappers: Sequence[WrapperRef] = (),
        gamma: float = 1.0,
        max_turns: int | None = None,
        max_turn_tokens: int = 64,
        max_completion_length: int | None = None,
        system_prompt: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.gamma = check_gamma(gamma)
        if max_turns is not None and max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1 or None, got {max_turns}")
        if max_turn_tokens < 1:
            raise ConfigError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        if max_completion_length is not None and max_completion_length < 1:
            raise ConfigError(f"max_completion_length must be >= 1 or None, got {max_completion_length}")
        self.max_turns = max_turns
        self.max_turn_tokens = max_turn_tokens
        self.max_completion_length = max_completion_length
        self.system_prompt = system_prompt
        self.chat_template_kwargs = chat_template_kwargs
        self.pool = _EnvPool(wrappers, env_kwargs or {})
        #: Timings of the latest call (read by benchmarks and logged as ``gem/time_*``).
        self.last_timings = RolloutTimings()

    # ------------------------------------------------------------------ TRL entry point

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt with ``trainer``'s model; TRL's ``rollout_func`` signature."""
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor wraps its tokenizer
        generate = vllm_generate_fn(trainer) if trainer.use_vllm else hf_generate_fn(trainer)
        limit = self.max_completion_length or trainer.max_completion_length
        kwargs = self.chat_template_kwargs if self.chat_template_kwargs is not None else trainer.chat_template_kwargs
        sync = _turn_sync(trainer) if trainer.use_vllm else None
        episodes = self.play([parse_episode_key(p) for p in prompts], generate, tokenizer, limit, kwargs, sync)
        started = time.perf_counter()
        out = self.to_trl(episodes)
        self.last_timings.adapter += time.perf_counter() - started
        self._log(trainer, out)
        return out

    # ------------------------------------------------------------------ episode loop

    def play(
        self,
        keys: Sequence[tuple[str, int]],
        generate: GenerateFn,
        tokenizer: Any,
        max_completion_length: int,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        batch_size_across_ranks: Callable[[int], int] | None = None,
    ) -> list[Episode]:
        """Play one episode per ``(env_id, seed)`` and return them, in order.

        Args:
            keys: Env id and reset seed of each episode.
            generate: Generation backend; gets the token contexts of all running episodes.
            tokenizer: Renders observations with its chat template and decodes actions.
            max_completion_length: Completion token budget per episode.
            chat_template_kwargs: Extra ``apply_chat_template`` arguments.
            batch_size_across_ranks: For collective backends (TRL's vLLM server, or colocated
                vLLM with tensor parallelism), which need the same number of prompts from every
                rank: called once per turn with this rank's running episodes, returns the most
                on any rank. Short ranks fill up with a copy of a prompt and drop its answers;
                ranks stop together when no rank has an episode left.
        """
        timings = self.last_timings = RolloutTimings()
        started = time.perf_counter()
        running = [self._start(env_id, seed, tokenizer, chat_template_kwargs, timings) for env_id, seed in keys]
        timings.adapter += time.perf_counter() - started - timings.env
        filler = running[0].context if running else []
        while True:
            active = [ep for ep in running if not ep.done]
            wanted = len(active) if batch_size_across_ranks is None else batch_size_across_ranks(len(active))
            if wanted == 0:
                break
            turn_started = time.perf_counter()
            contexts = [ep.context for ep in active] + [filler] * (wanted - len(active))
            outputs = generate(contexts, self.max_turn_tokens)[: len(active)]
            timings.generate += time.perf_counter() - turn_started
            env_before = timings.env
            adapter_started = time.perf_counter()
            for ep, (ids, logprobs) in zip(active, outputs, strict=True):
                self._advance(ep, ids, logprobs, tokenizer, max_completion_length, chat_template_kwargs, timings)
            timings.adapter += time.perf_counter() - adapter_started - (timings.env - env_before)
            timings.turns += 1
        started = time.perf_counter()
        episodes = []
        for ep in running:
            self.pool.release(ep.env_id, ep.env)
            episodes.append(
                Episode(
                    turns=ep.turns,
                    start_state_id=episode_key(ep.env_id, ep.seed),
                    episode_id=f"{episode_key(ep.env_id, ep.seed)}/{len(episodes)}",
                    env_id=ep.env_id,
                    seed=ep.seed,
                    metadata={"cut_by_budget": ep.cut_by_budget},
                )
            )
        timings.adapter += time.perf_counter() - started
        return episodes

    def _start(
        self,
        env_id: str,
        seed: int,
        tokenizer: Any,
        kwargs: Mapping[str, Any] | None,
        timings: RolloutTimings,
    ) -> _Running:
        env = self.pool.acquire(env_id)
        env_started = time.perf_counter()
        observation, _ = env.reset(seed=seed)
        timings.env += time.perf_counter() - env_started
        messages: list[Message] = (
            [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
        )
        messages.append({"role": "user", "content": observation})
        context = render_ids(tokenizer, messages, add_generation_prompt=True, chat_template_kwargs=kwargs)
        return _Running(env=env, env_id=env_id, seed=seed, messages=messages, context=context, observation=observation)

    def _advance(
        self,
        ep: _Running,
        generated: list[int],
        logprobs: list[float] | None,
        tokenizer: Any,
        budget: int,
        kwargs: Mapping[str, Any] | None,
        timings: RolloutTimings,
    ) -> None:
        """Send one generated answer to the env and extend the episode's context."""
        prompt_length = len(ep.turns[0].prompt_token_ids or []) if ep.turns else len(ep.context)
        room = budget - (len(ep.context) - prompt_length)
        generated = list(generated[: max(room, 1)])
        logprobs = None if logprobs is None else list(logprobs[: len(generated)])
        timings.generated_tokens += len(generated)
        action = tokenizer.decode(generated, skip_special_tokens=True)
        env_started = time.perf_counter()
        observation, reward, terminated, truncated, info = ep.env.step(action)
        timings.env += time.perf_counter() - env_started
        ep.turns.append(
            Turn(
                observation=ep.observation,
                action=action,
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                next_observation=observation,
                info=dict(info),
                prompt_messages=list(ep.messages),
                prompt_token_ids=list(ep.context),
                action_token_ids=generated,
                action_logprobs=logprobs,
            )
        )
        ep.observation = observation
        if terminated or truncated or (self.max_turns is not None and len(ep.turns) >= self.max_turns):
            ep.done = True
            return
        messages = [*ep.messages, {"role": "assistant", "content": action}, {"role": "user", "content": observation}]
        between = self._between_turns(ep, generated, messages, tokenizer, kwargs)
        if len(ep.context) + len(generated) + len(between) - prompt_length >= budget:
            # No room for another answer: end here, as TRL wants, on the model's own tokens.
            ep.done = ep.cut_by_budget = True
            return
        ep.context = [*ep.context, *generated, *between]
        ep.messages = messages

    def _between_turns(
        self,
        ep: _Running,
        generated: list[int],
        messages: list[Message],
        tokenizer: Any,
        kwargs: Mapping[str, Any] | None,
    ) -> list[int]:
        """Tokens the chat template puts between this answer and the next (end of answer, observation, header).

        Computed by the core's layout on a two-turn probe episode, so the rollout and the
        training sequence share one definition of the env's tokens.
        """
        probe = Episode(
            turns=[
                Turn(observation="", action="", reward=0.0, prompt_messages=ep.messages, action_token_ids=generated),
                Turn(observation="", action="", reward=0.0, prompt_messages=messages, action_token_ids=[0]),
            ],
            start_state_id="probe",
        )
        sequence = episode_to_sequence(probe, tokenizer, chat_template_kwargs=kwargs)
        (_, end), (next_start, _) = sequence.turn_spans
        return sequence.input_ids[end:next_start].tolist()

    # ------------------------------------------------------------------ TRL output

    def to_trl(self, episodes: Sequence[Episode]) -> dict[str, Any]:
        """Lay out finished episodes the way ``GRPOTrainer`` takes a ``rollout_func``'s output."""
        sequences: list[EpisodeSequence] = [episode_to_sequence(ep) for ep in episodes]
        with_logprobs = all(s.token_logprobs is not None for s in sequences)
        out: dict[str, Any] = {
            "prompt_ids": [s.input_ids[: s.prompt_length].tolist() for s in sequences],
            "completion_ids": [s.input_ids[s.prompt_length :].tolist() for s in sequences],
            "logprobs": [s.token_logprobs[s.prompt_length :].tolist() for s in sequences] if with_logprobs else None,  # type: ignore[index]
            "env_mask": [s.loss_mask[s.prompt_length :].astype(int).tolist() for s in sequences],
            "episode": list(episodes),
            "turn_rewards": [ep.rewards.tolist() for ep in episodes],
            "turn_spans": [[[a - s.prompt_length, b - s.prompt_length] for a, b in s.turn_spans] for s in sequences],
            "episode_return": [float(discounted_returns(ep, self.gamma)[0]) for ep in episodes],
            "num_turns": [ep.num_turns for ep in episodes],
            "success": [bool(ep.turns[-1].info.get("success", False)) for ep in episodes],
            "terminated": [ep.terminated for ep in episodes],
            "truncated": [not ep.terminated for ep in episodes],
        }
        return out

    def _log(self, trainer: Any, out: Mapping[str, Any]) -> None:
        log = getattr(trainer, "_log_metric", None)  # TRL averages these across processes per step
        if log is None:
            return
        t = self.last_timings
        log("gem/episode_return", float(np.mean(out["episode_return"])))
        log("gem/num_turns", float(np.mean(out["num_turns"])))
        log("gem/success", float(np.mean(out["success"])))
        log("gem/time_generate", t.generate)
        log("gem/time_env", t.env)
        log("gem/time_adapter", t.adapter)

    def close(self) -> None:
        """Close the pooled envs."""
        self.pool.close()


# ---------------------------------------------------------------------- generation backends


def _cut_at_stop(ids: list[int], stop_ids: set[int]) -> list[int]:
    """Keep tokens up to and including the first stop token."""
    for i, token in enumerate(ids):
        if token in stop_ids:
            return ids[: i + 1]
    return ids


def hf_generate_fn(trainer: Any) -> GenerateFn:
    """Batched ``model.generate`` with the trainer's sampling settings (``use_vllm=False``)."""
    import torch
    from trl.models.utils import unwrap_model_for_generation

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stop_ids = set(trainer.eos_token_ids)
    device = trainer.accelerator.device
    configs: dict[int, Any] = {}  # the trainer's sampling settings, with a turn's token limit

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        if max_new_tokens not in configs:
            configs[max_new_tokens] = copy.deepcopy(trainer.generation_config)
            configs[max_new_tokens].max_new_tokens = max_new_tokens
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):  # left padding: every row's next token lands in one column
            input_ids[row, width - len(context) :] = torch.tensor(context)
            attention_mask[row, width - len(context) :] = 1
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            sequences = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=configs[max_new_tokens],
            )
        new = sequences[:, width:].tolist()
        return [(_cut_at_stop(row, stop_ids), None) for row in new]

    return generate


def vllm_generate_fn(trainer: Any) -> GenerateFn:
    """Generation through TRL's vLLM engine (``use_vllm=True``, server or colocate), with sampling logprobs."""
    engine = trainer.vllm_generation
    stop_ids = set(trainer.eos_token_ids)

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        # The engine reads its token limit at call time; a turn needs the per-turn limit, not the episode's.
        saved = engine.max_completion_length
        engine.max_completion_length = max_new_tokens
        try:
            _, completion_ids, logprobs, _ = engine.generate(prompts=contexts, images=None, num_generations=1)
        finally:
            engine.max_completion_length = saved
        out: list[tuple[list[int], list[float] | None]] = []
        for i, ids in enumerate(completion_ids):
            ids = _cut_at_stop(list(ids), stop_ids)
            lps = None
            if logprobs is not None:
                lps = [float("nan") if top[0] is None else float(top[0]) for top in logprobs[i][: len(ids)]]
            out.append((ids, lps))
        return out

    return generate


def _turn_sync(trainer: Any) -> Callable[[int], int] | None:
    """Per-turn batch size agreement for vLLM modes whose ``generate`` is collective, else ``None``.

    TRL's server mode gathers every rank's prompts and hands back equal slices, and colocated
    vLLM with tensor parallelism does the same within its group; both need equal prompt
    counts on every rank, every turn.
    """
    accelerator = trainer.accelerator
    if accelerator.num_processes == 1:
        return None
    engine = trainer.vllm_generation
    if engine.mode != "server" and getattr(engine, "tensor_parallel_size", 1) == 1:
        return None
    import torch

    def most_on_any_rank(local: int) -> int:
        return int(accelerator.gather(torch.tensor([local], device=accelerator.device)).max().item())

    return most_on_any_rank
