"""The episode runner: N episodes of envs against an async policy, as typed records.

The runner keeps up to ``max_in_flight`` episodes going concurrently on the caller's
event loop. Each episode is played by the episode engine (:mod:`gem_core.episode`), the
same code every trainer adapter uses, so history, token contexts, budgets, cut
generations and truncation follow one set of rules. :meth:`EpisodeRunner.collect`
returns exactly the number of *finished* episodes asked for; episodes still running at
that moment are not thrown away (GEM's collection drops them, which biases batches
toward short episodes): they pause before their next policy call and resume in the next
``collect``.

Three policy interfaces:

* ``policy(messages) -> str`` (message mode): gets the chat history and returns the
  action text (or a :class:`~gem_core.episode.Generation`).
* ``token_policy(prompt_ids) -> completion_ids`` (or ``(completion_ids, logprobs)``, or a
  ``Generation`` with its ``finish_reason``), with a ``tokenizer``: token in, token out.
  The prompt of turn ``t+1`` is the prompt of turn ``t`` + the completion + a per-turn
  bridge rendered once (never a re-render of the history).
* ``generate(requests) -> generations`` (batched, async): one call with the
  :class:`~gem_core.episode.TurnRequest` of every running episode that waits for a turn,
  as a batched inference engine wants them. Token mode with a ``tokenizer``, message
  mode without.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np

from gem_core.chat import ChatTokenizer, Message
from gem_core.core import AsyncEnv, Env, to_async
from gem_core.episode import (
    CutPolicy,
    EnvErrorPolicy,
    EpisodeEngine,
    EpisodeLimits,
    Generation,
    TurnRequest,
    add_note,
    check_batch,
    describe_request,
)
from gem_core.errors import ConfigError, GenerateContractError
from gem_core.registry import WrapperRef
from gem_core.rl.types import Episode, Turn
from gem_core.seed_streams import episode_seed

__all__ = ["BatchPolicy", "Episode", "EpisodeRunner", "MessagePolicy", "TokenPolicy", "Turn", "run_episodes"]

#: ``await policy(messages) -> action text`` (or a ``Generation``).
MessagePolicy = Callable[[list[Message]], Awaitable[Union[str, Generation]]]
#: ``await token_policy(prompt_ids) -> completion_ids``, ``(completion_ids, logprobs)`` or a ``Generation``.
TokenPolicy = Callable[[list[int]], Awaitable[Union[list[int], tuple[list[int], list[float]], Generation]]]
#: ``await generate(requests) -> one Generation (or text) per request``.
BatchPolicy = Callable[[list[TurnRequest]], Awaitable[Sequence[Union[Generation, str]]]]
EnvSource = Union[str, Callable[[], Union[Env, AsyncEnv]], Sequence[Union[Env, AsyncEnv]]]


class EpisodeRunner:
    """Runs episodes concurrently and hands back finished ones as :class:`Episode` records.

    Args:
        env: An env id (built with ``gem_core.make(id, wrappers=..., **env_kwargs)``), a
            callable returning an env, or a list of env instances to use as the pool.
        policy: ``async (messages) -> str``. Give exactly one of ``policy``,
            ``token_policy`` and ``generate``.
        token_policy: ``async (prompt_ids) -> completion_ids | (completion_ids, logprobs) |
            Generation``; needs ``tokenizer``.
        generate: ``async (requests) -> generations``: batched, one call for every
            running episode waiting for a turn (token mode with ``tokenizer``).
        tokenizer: A tokenizer with a chat template (``apply_chat_template``, ``encode``,
            ``decode``); probed once here (:class:`~gem_core.chat.ChatRenderer`).
        max_in_flight: At most this many episodes (and env instances) at once.
        seed: Root seed. Episode ``j`` (0-based, in start order) resets with seed
            ``episode_seed(seed, 0, j // group_size)``; ``None`` draws a root from OS entropy
            (kept in :attr:`root_seed`).
        group_size: Consecutive episodes sharing a start state (seed), e.g. GRPO's group;
            they get the same ``start_state_id``.
        system_prompt: Optional system message opening every conversation.
        max_turns: Cut an episode after this many turns (its last turn gets ``truncated=True``).
        max_turn_tokens: Most tokens one turn may generate (passed to the policy as
            ``TurnRequest.max_tokens``; longer token replies are cut).
        max_episode_tokens: Token budget after the first prompt (token mode).
        on_cut: What a generation cut at its token limit becomes: ``"invalid"`` (GEM's
            rule, the env gets :data:`~gem_core.episode.INVALID_ACTION`), ``"pass"``, ``"truncate"``.
        on_env_error: What an exception from an env does: ``"raise"`` (``collect`` raises
            it) or ``"end"`` (that episode is collected with ``end_reason == "error"`` and
            the error in its metadata; its env is replaced when the runner builds them).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments.
        engine: A prebuilt :class:`~gem_core.episode.EpisodeEngine` (then leave out
            ``tokenizer`` and the limits).
        env_kwargs: Constructor kwargs when ``env`` is an id.
        wrappers: Wrappers when ``env`` is an id.
        sync_envs: Run sync envs' calls in threads (``"thread"``) or inline on the loop (``"inline"``).
        reset_options: ``options`` passed to every ``reset``.
        keep_pool_full: While a ``collect`` waits, start a new episode whenever a slot frees
            (throughput: short episodes never leave slots idle; the surplus carries over to
            the next ``collect``). ``False`` starts only as many as the call needs, so a
            one-shot run does no extra work, but waits for its slowest episode.
        start_seeds: Explicit reset seeds instead of ones derived from ``seed``: episode
            ``j`` resets with ``start_seeds[j // group_size]`` (an evaluation set, a
            conformance check); asking for more episodes than that is a ``ConfigError``.

    Raises:
        ConfigError: not exactly one policy, ``token_policy`` without a tokenizer, or a bad number.
        TemplatePrefixError: the tokenizer's template cannot be bridged (start-up probe).
    """

    def __init__(
        self,
        env: EnvSource,
        *,
        policy: MessagePolicy | None = None,
        token_policy: TokenPolicy | None = None,
        generate: BatchPolicy | None = None,
        tokenizer: ChatTokenizer | None = None,
        max_in_flight: int = 8,
        seed: int | None = None,
        group_size: int = 1,
        system_prompt: str | None = None,
        max_turns: int | None = None,
        max_turn_tokens: int | None = None,
        max_episode_tokens: int | None = None,
        on_cut: CutPolicy = "invalid",
        on_env_error: EnvErrorPolicy = "raise",
        chat_template_kwargs: dict[str, Any] | None = None,
        engine: EpisodeEngine | None = None,
        env_kwargs: dict[str, Any] | None = None,
        wrappers: Sequence[WrapperRef] | None = None,
        sync_envs: Literal["thread", "inline"] = "thread",
        reset_options: dict[str, Any] | None = None,
        keep_pool_full: bool = True,
        start_seeds: Sequence[int] | None = None,
    ) -> None:
        if sum(p is not None for p in (policy, token_policy, generate)) != 1:
            raise ConfigError(
                "give exactly one of policy (messages -> text), token_policy (ids -> ids) or generate (batched)"
            )
        for name, value in (("max_in_flight", max_in_flight), ("group_size", group_size)):
            if value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if engine is None:
            if policy is not None and tokenizer is not None:
                tokenizer = None  # a message policy renders its own prompts
            engine = EpisodeEngine(
                tokenizer,
                EpisodeLimits(
                    max_turns=max_turns,
                    max_turn_tokens=max_turn_tokens,
                    max_episode_tokens=max_episode_tokens,
                    on_cut=on_cut,
                    on_env_error=on_env_error,
                    system_prompt=system_prompt,
                ),
                chat_template_kwargs=chat_template_kwargs,
            )
        if token_policy is not None and not engine.token_mode:
            raise ConfigError("token_policy needs a tokenizer with a chat template, to render observations")
        if policy is not None and engine.token_mode:
            raise ConfigError("a message policy needs an engine without a tokenizer (message mode)")
        self.engine = engine
        self.policy = policy
        self.token_policy = token_policy
        self.batch_policy = generate
        self.tokenizer = engine.tokenizer
        self.group_size = group_size
        self.system_prompt = engine.limits.system_prompt
        self.max_turns = engine.limits.max_turns
        self.reset_options = reset_options
        self.keep_pool_full = keep_pool_full
        self.sync_envs = sync_envs
        self.start_seeds = None if start_seeds is None else [int(s) for s in start_seeds]
        self.root_seed = seed if seed is not None else int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        self.env_id = env if isinstance(env, str) else None
        self._idle: list[AsyncEnv] = []
        self._owned: list[AsyncEnv] = []  # every env this runner made or was given, for close
        if isinstance(env, str):
            self._factory: Callable[[], Env | AsyncEnv] | None = _id_factory(env, env_kwargs or {}, wrappers)
            self.max_in_flight = max_in_flight
        elif callable(env):
            self._factory = env
            self.max_in_flight = max_in_flight
        else:
            self._factory = None
            self._idle = [to_async(e, in_thread=sync_envs == "thread") for e in env]
            self._owned = list(self._idle)
            if not self._idle:
                raise ConfigError("the env list is empty")
            self.max_in_flight = min(max_in_flight, len(self._idle))
        self._started = 0
        self._batch = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._done: list[Episode] = []
        self._errors: list[BaseException] = []
        self._wake: asyncio.Event | None = None
        self._gate: asyncio.Event | None = None
        self._paused = 0
        self._queue: list[tuple[TurnRequest, asyncio.Future[Generation | str]]] = []
        # requests of a batched call that failed: their episodes wait, and the next collect() sends them again
        self._held: list[tuple[TurnRequest, asyncio.Future[Generation | str]]] = []
        self._flushing = False
        self.closed = False

    @property
    def in_flight(self) -> int:
        """Episodes started and not finished (running or paused between batches)."""
        return len(self._tasks)

    async def collect(self, num_episodes: int) -> list[Episode]:
        """Return exactly ``num_episodes`` finished episodes, in the order they finished.

        Episodes carried over from earlier calls are finished first; new ones fill free
        slots (see ``keep_pool_full``). When enough have finished, the others pause before
        their next policy call until the next ``collect``; none is thrown away.

        Faults (one raise per call, never one per episode):

        * a batched ``generate`` that raises, or breaks the contract as a whole (not a list,
          the wrong length: :class:`~gem_core.errors.GenerateContractError`): the call
          raises that error once, with a note naming every episode of the batch; those
          episodes lose nothing: they stay in flight, paused, and their requests go out
          again at the next ``collect``;
        * one answer that breaks the contract (a ``None``, ids outside the vocabulary,
          non-finite logprobs), a per-request policy that raises, or an env error under
          ``on_env_error="raise"``: that episode ends and the error is raised; the other
          episodes are kept, paused. Several such errors in one call are raised as the
          first, with a note naming the others.

        Raises:
            Exception: as above; the other episodes are kept, paused.
        """
        if self.closed:
            raise RuntimeError("EpisodeRunner is closed")
        if num_episodes < 0:
            raise ValueError(f"num_episodes must be >= 0, got {num_episodes}")
        if self._gate is None:
            self._gate, self._wake = asyncio.Event(), asyncio.Event()
        assert self._wake is not None
        self._batch += 1
        self._gate.set()
        if self._held:  # the requests of a failed batched call: send them again
            self._queue[:0], self._held = self._held, []
            self._maybe_flush()
        try:
            while len(self._done) < num_episodes:
                if self._errors:
                    self._raise_errors()
                free = self.max_in_flight - len(self._tasks)
                if not self.keep_pool_full:
                    free = min(free, num_episodes - len(self._done) - len(self._tasks))
                for _ in range(free):
                    self._start_episode()
                self._wake.clear()
                await self._wake.wait()
            if self._errors:
                self._raise_errors()
        finally:
            self._gate.clear()
        out, self._done = self._done[:num_episodes], self._done[num_episodes:]
        return out

    def _raise_errors(self) -> None:
        """Raise the first pending error once, naming the others on it (each is one episode, already ended)."""
        first, *others = self._errors
        self._errors.clear()
        if others:
            add_note(
                first,
                f"{len(others)} more error(s) in this collect: "
                + "; ".join(f"{type(e).__name__}: {e}" for e in others[:5])
                + ("; ..." if len(others) > 5 else ""),
            )
        raise first

    async def aclose(self) -> None:
        """Cancel in-flight episodes and close every env; idempotent."""
        if self.closed:
            return
        self.closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, future in (*self._queue, *self._held):
            future.cancel()
        await asyncio.gather(*(env.close() for env in self._owned), return_exceptions=True)
        self._idle.clear()

    async def __aenter__(self) -> EpisodeRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ internals
    def _start_episode(self) -> None:
        index = self._started
        self._started += 1
        task = asyncio.get_running_loop().create_task(self._run_episode(index, self._batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _acquire_env(self) -> AsyncEnv:
        if self._idle:
            return self._idle.pop()
        assert self._factory is not None  # a fixed pool is never asked for more than it holds
        env = to_async(self._factory(), in_thread=self.sync_envs == "thread")
        self._owned.append(env)
        return env

    async def _run_episode(self, index: int, batch: int) -> None:
        assert self._wake is not None
        env = self._acquire_env()
        healthy = False
        try:
            episode = await self._play(env, index, batch)
            healthy = episode.metadata.get("end_reason") != "error"
            self._done.append(episode)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            add_note(exc, f"in episode {index} of EpisodeRunner({self.env_id or 'env'})")
            self._errors.append(exc)
        finally:
            if healthy:
                self._idle.append(env)
            elif self._factory is not None:  # an env that raised may be broken: replace it
                self._owned.remove(env)
                await asyncio.shield(env.close())
            else:
                self._idle.append(env)
            # leave the in-flight set before waking collect(), which counts it (done callbacks run too late)
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)
            self._maybe_flush()
            self._wake.set()

    async def _pause_between_batches(self) -> None:
        assert self._gate is not None
        if self._gate.is_set():
            return
        self._paused += 1
        self._maybe_flush()  # the others may all be waiting for this one
        try:
            await self._gate.wait()
        finally:
            self._paused -= 1

    async def _generate(self, request: TurnRequest) -> Generation | str:
        if self.policy is not None:
            return await self.policy(request.messages)
        if self.token_policy is not None:
            assert request.prompt_ids is not None
            out: object = await self.token_policy(request.prompt_ids)  # typed, but checked: it may be anything
            if isinstance(out, Generation):
                return out
            if isinstance(out, tuple) and len(out) == 2 and not isinstance(out[0], int):
                return Generation(token_ids=out[0], logprobs=out[1])  # the engine checks both
            if not isinstance(out, (str, bytes, Mapping)) and isinstance(out, Iterable):
                return Generation(token_ids=out)  # type: ignore[arg-type]  # ids of any iterable kind, checked there
            raise GenerateContractError(
                f"token_policy returned {type(out).__name__} {out!r:.80} for {describe_request(request)}; "
                "a token_policy returns completion ids (a list of ints), (ids, logprobs) or a Generation",
                episodes=[describe_request(request)],
            )
        # batched: queue the request; the batch goes out once every running episode waits for a turn
        future: asyncio.Future[Generation | str] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        self._maybe_flush()
        return await future

    def _maybe_flush(self) -> None:
        if not self._queue or self._flushing:
            return
        if len(self._queue) < len(self._tasks) - self._paused:
            return  # some episodes are still at the env: their requests join this batch
        batch, self._queue = self._queue, []
        self._flushing = True
        asyncio.get_running_loop().create_task(self._flush(batch))

    async def _flush(self, batch: list[tuple[TurnRequest, asyncio.Future[Generation | str]]]) -> None:
        assert self.batch_policy is not None
        requests = [request for request, _ in batch]
        try:
            outputs = check_batch(await self.batch_policy(requests), requests, token_mode=self.engine.token_mode)
        except Exception as exc:
            # One error for the whole call; its episodes keep everything and wait for the next collect().
            add_note(
                exc,
                f"in the batched generate call for episodes {', '.join(map(describe_request, requests))}; "
                "they are kept, paused, and their requests are sent again at the next collect()",
            )
            self._held.extend(batch)
            self._errors.append(exc)
            if self._wake is not None:
                self._wake.set()
        except BaseException as exc:  # KeyboardInterrupt, cancellation: every waiting episode sees it
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        else:
            for (_, future), output in zip(batch, outputs, strict=True):
                if not future.done():
                    future.set_result(output)
        finally:
            self._flushing = False
            self._maybe_flush()

    async def _play(self, env: AsyncEnv, index: int, batch: int) -> Episode:
        group = index // self.group_size
        if self.start_seeds is None:
            seed = episode_seed(self.root_seed, 0, group)
        elif group < len(self.start_seeds):
            seed = self.start_seeds[group]
        else:
            raise ConfigError(
                f"episode {index} needs start seed {group}, but start_seeds has {len(self.start_seeds)}; "
                "collect fewer episodes or give more seeds"
            )
        started = time.perf_counter()
        env_id = self.env_id or (env.spec.id if env.spec is not None else None)
        session = await self.engine.play(
            env,
            self._generate,
            env_id=env_id,
            seed=seed,
            options=self.reset_options,
            episode_id=f"{self.root_seed}-{index}",
            index=index,
            before_generate=self._pause_between_batches,
        )
        episode = session.episode()
        episode.metadata.update(
            {
                "wall_s": time.perf_counter() - started,
                "started_in_batch": batch,
                "finished_in_batch": self._batch,
            }
        )
        return episode


def _id_factory(
    env_id: str, kwargs: dict[str, Any], wrappers: Sequence[WrapperRef] | None
) -> Callable[[], Env | AsyncEnv]:
    from gem_core.api import make

    def factory() -> Env | AsyncEnv:
        return make(env_id, wrappers=wrappers, **kwargs)

    return factory


async def run_episodes(env: EnvSource, num_episodes: int, **runner_kwargs: Any) -> list[Episode]:
    """Run exactly ``num_episodes`` episodes with a fresh :class:`EpisodeRunner`, then close it."""
    runner_kwargs.setdefault("keep_pool_full", False)
    async with EpisodeRunner(env, **runner_kwargs) as runner:
        return await runner.collect(num_episodes)
