"""The episode runner: N episodes of envs against an async policy, as typed records.

The runner keeps up to ``max_in_flight`` episodes going concurrently on the caller's
event loop. :meth:`EpisodeRunner.collect` returns exactly the number of *finished*
episodes asked for; episodes still running at that moment are not thrown away (GEM's
collection drops them, which biases batches toward short episodes): they pause before
their next policy call and resume in the next ``collect``.

Two policy interfaces, to suit both API-style and trainer-style inference:

* ``policy(messages) -> str``: gets the chat history (system, user, assistant and tool
  messages) and returns the action text.
* ``token_policy(prompt_ids) -> completion_ids`` (or ``(completion_ids, logprobs)``), with a
  ``tokenizer``: token in, token out. The prompt of turn ``t+1`` is the prompt of turn
  ``t`` + the completion + the rendered new observation (one small render per turn,
  never a re-render of the history), so trainers see exactly the tokens the model saw.
  The completion should end with the model's end-of-turn token, as inference servers
  return it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Union

import numpy as np

from gem_core.core import AsyncEnv, Env, to_async
from gem_core.errors import ConfigError
from gem_core.registry import WrapperRef
from gem_core.vector.base import episode_seed
from gem_core.wrappers.chat import ChatTokenizer, Conversation, Message

try:
    from gem_core.rl.types import Episode, Turn  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - until gem_core.rl (issue 4) is merged; same field names
    from dataclasses import dataclass, field

    @dataclass(slots=True)
    class Turn:  # type: ignore[no-redef,unused-ignore]
        """One step (minimal stand-in for ``gem_core.rl.types.Turn``)."""

        observation: str
        action: str
        reward: float
        terminated: bool = False
        truncated: bool = False
        next_observation: str = ""
        info: dict[str, Any] = field(default_factory=dict)
        prompt_messages: list[Message] | None = None
        prompt_token_ids: list[int] | None = None
        action_token_ids: list[int] | None = None
        action_logprobs: list[float] | None = None

    @dataclass(slots=True)
    class Episode:  # type: ignore[no-redef,unused-ignore]
        """One rollout (minimal stand-in for ``gem_core.rl.types.Episode``)."""

        turns: list[Turn]
        start_state_id: str
        episode_id: str = ""
        env_id: str | None = None
        seed: int | None = None
        metadata: dict[str, Any] = field(default_factory=dict)


__all__ = ["Episode", "EpisodeRunner", "MessagePolicy", "TokenPolicy", "Turn", "run_episodes"]

#: ``await policy(messages) -> action text``.
MessagePolicy = Callable[[list[Message]], Awaitable[str]]
#: ``await token_policy(prompt_ids) -> completion_ids`` or ``(completion_ids, logprobs)``.
TokenPolicy = Callable[[list[int]], Awaitable[Union[list[int], tuple[list[int], list[float]]]]]
EnvSource = Union[str, Callable[[], Union[Env, AsyncEnv]], Sequence[Union[Env, AsyncEnv]]]


class EpisodeRunner:
    """Runs episodes concurrently and hands back finished ones as :class:`Episode` records.

    Args:
        env: An env id (built with ``gem_core.make(id, wrappers=..., **env_kwargs)``), a
            callable returning an env, or a list of env instances to use as the pool.
        policy: ``async (messages) -> str``. Give this or ``token_policy``.
        token_policy: ``async (prompt_ids) -> completion_ids | (completion_ids, logprobs)``;
            needs ``tokenizer``.
        tokenizer: A tokenizer with a chat template (``apply_chat_template``, ``encode``, ``decode``).
        max_in_flight: At most this many episodes (and env instances) at once.
        seed: Root seed. Episode ``j`` (0-based, in start order) resets with seed
            ``episode_seed(seed, 0, j // group_size)``; ``None`` draws a root from OS entropy
            (kept in :attr:`root_seed`).
        group_size: Consecutive episodes sharing a start state (seed), e.g. GRPO's group;
            they get the same ``start_state_id``.
        system_prompt: Optional system message opening every conversation.
        max_turns: Cut an episode after this many turns (its last turn gets ``truncated=True``).
        env_kwargs: Constructor kwargs when ``env`` is an id.
        wrappers: Wrappers when ``env`` is an id.
        sync_envs: Run sync envs' calls in threads (``"thread"``) or inline on the loop (``"inline"``).
        reset_options: ``options`` passed to every ``reset``.
        keep_pool_full: While a ``collect`` waits, start a new episode whenever a slot frees
            (throughput: short episodes never leave slots idle; the surplus carries over to
            the next ``collect``). ``False`` starts only as many as the call needs, so a
            one-shot run does no extra work, but waits for its slowest episode.

    Raises:
        ConfigError: not exactly one policy, ``token_policy`` without a tokenizer, or a bad number.
    """

    def __init__(
        self,
        env: EnvSource,
        *,
        policy: MessagePolicy | None = None,
        token_policy: TokenPolicy | None = None,
        tokenizer: ChatTokenizer | None = None,
        max_in_flight: int = 8,
        seed: int | None = None,
        group_size: int = 1,
        system_prompt: str | None = None,
        max_turns: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        wrappers: Sequence[WrapperRef] | None = None,
        sync_envs: Literal["thread", "inline"] = "thread",
        reset_options: dict[str, Any] | None = None,
        keep_pool_full: bool = True,
    ) -> None:
        if (policy is None) == (token_policy is None):
            raise ConfigError("give exactly one of policy (messages -> text) or token_policy (ids -> ids)")
        if token_policy is not None and tokenizer is None:
            raise ConfigError("token_policy needs a tokenizer with a chat template, to render observations")
        for name, value in (("max_in_flight", max_in_flight), ("group_size", group_size), ("max_turns", max_turns)):
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        self.policy = policy
        self.token_policy = token_policy
        self.tokenizer = tokenizer
        self.group_size = group_size
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.reset_options = reset_options
        self.keep_pool_full = keep_pool_full
        self.sync_envs = sync_envs
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
        self._footer_ids: list[int] | None = None
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

        Raises:
            Exception: the first error an episode raised (env or policy); the other
                episodes are kept, paused.
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
        try:
            while len(self._done) < num_episodes:
                if self._errors:
                    raise self._errors.pop(0)
                free = self.max_in_flight - len(self._tasks)
                if not self.keep_pool_full:
                    free = min(free, num_episodes - len(self._done) - len(self._tasks))
                for _ in range(free):
                    self._start_episode()
                self._wake.clear()
                await self._wake.wait()
            if self._errors:
                raise self._errors.pop(0)
        finally:
            self._gate.clear()
        out, self._done = self._done[:num_episodes], self._done[num_episodes:]
        return out

    async def aclose(self) -> None:
        """Cancel in-flight episodes and close every env; idempotent."""
        if self.closed:
            return
        self.closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
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

    def _closing(self, generated: list[int]) -> list[int]:
        """The template's assistant footer, minus the part the model generated itself (its stop token)."""
        assert self.tokenizer is not None
        if self._footer_ids is None:
            footer = Conversation.answer_footer(self.tokenizer)
            self._footer_ids = list(self.tokenizer.encode(footer, add_special_tokens=False))
        footer_ids = self._footer_ids
        for k in range(min(len(footer_ids), len(generated)), 0, -1):
            if generated[-k:] == footer_ids[:k]:
                return footer_ids[k:]
        return list(footer_ids)

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
            healthy = True
            self._done.append(episode)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(f"in episode {index} of EpisodeRunner({self.env_id or 'env'})")
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
            self._wake.set()

    async def _play(self, env: AsyncEnv, index: int, batch: int) -> Episode:
        assert self._gate is not None
        seed = episode_seed(self.root_seed, 0, index // self.group_size)
        tok = self.tokenizer
        started = time.perf_counter()
        obs, _ = await env.reset(seed=seed, options=self.reset_options)
        reset_s = time.perf_counter() - started
        conv = Conversation(self.system_prompt)
        conv.add_observation(obs)
        prompt_ids: list[int] | None = None
        if self.token_policy is not None:
            assert tok is not None
            prompt_ids = list(tok.encode(conv.render(tok), add_special_tokens=False))
        turns: list[Turn] = []
        policy_s: list[float] = []
        env_s: list[float] = []
        while True:
            await self._gate.wait()  # paused between batches
            t0 = time.perf_counter()
            messages = conv.view()
            action_ids: list[int] | None = None
            logprobs: list[float] | None = None
            if self.token_policy is not None:
                assert tok is not None and prompt_ids is not None
                out = await self.token_policy(list(prompt_ids))
                action_ids, logprobs = (list(out[0]), list(out[1])) if isinstance(out, tuple) else (list(out), None)
                action = tok.decode(action_ids, skip_special_tokens=True)
            else:
                assert self.policy is not None
                action = await self.policy(messages)
            t1 = time.perf_counter()
            conv.add_action(action)
            next_obs, reward, terminated, truncated, info = await env.step(action)
            t2 = time.perf_counter()
            policy_s.append(t1 - t0)
            env_s.append(t2 - t1)
            if self.max_turns is not None and len(turns) + 1 >= self.max_turns and not terminated:
                truncated = True
            turns.append(
                Turn(
                    observation=obs,
                    action=action,
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    next_observation=next_obs,
                    info=info,
                    prompt_messages=messages if self.policy is not None else None,
                    prompt_token_ids=prompt_ids,
                    action_token_ids=action_ids,
                    action_logprobs=logprobs,
                )
            )
            if terminated or truncated:
                break
            message = conv.add_observation(next_obs, role="tool" if info.get("tool_calls") else "user")
            if prompt_ids is not None and action_ids is not None:
                assert tok is not None
                delta = tok.encode(Conversation.render_delta(tok, [message]), add_special_tokens=False)
                prompt_ids = prompt_ids + action_ids + self._closing(action_ids) + list(delta)
            obs = next_obs
        env_name = self.env_id or (env.spec.id if env.spec is not None else type(env).__name__)
        return Episode(
            turns=turns,
            start_state_id=f"{env_name}/seed={seed}",
            episode_id=f"{self.root_seed}-{index}",
            env_id=self.env_id or (env.spec.id if env.spec is not None else None),
            seed=seed,
            metadata={
                "index": index,
                "reset_s": reset_s,
                "policy_s": policy_s,
                "env_s": env_s,
                "wall_s": time.perf_counter() - started,
                "started_in_batch": batch,
                "finished_in_batch": self._batch,
            },
        )


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
