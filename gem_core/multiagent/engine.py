"""Multi-agent episodes on the episode engine: one :class:`~gem_core.episode.EpisodeSession` per seat.

Each model seat has its own session, so its own chat history and, in token mode, its own token
context (token in, token out per seat); each yields its own :class:`~gem_core.rl.types.Episode`
record with ``metadata["seat"]`` (the role :mod:`gem_core.rl.roles` reads), ``metadata["outcome"]``
and the start state shared by all seats of the game. A seat's turn is one user message holding
everything it was told since its last action (its briefing, its own move's result, the others'
moves); its reward is the sum of what it earned since its last action, so a loss that comes on an
opponent's move lands on the seat's last turn.

A seat is played by a model (a ``generate`` callable, as :meth:`EpisodeEngine.play_batch` takes per
request: ``TurnRequest -> Generation | str``) or by a :class:`Scripted` player (a
:class:`~gem_core.multiagent.seat.SeatPolicy`, which gets no session and no record). One generate for
every seat is self-play.

If a seat's session ends before the game (its ``max_turns``, its token budget, a cut reply under
``on_cut="truncate"``), the game cannot go on without it: every other model seat's last turn is
marked truncated and the episode stops there (``metadata["stopped_by"]`` names the seat).

Two drivers: :func:`play_multiagent` asks the seats one after the other in this thread;
:func:`play_multiagent_async` takes async ``generate`` s and asks every seat that acts in a step
(all live seats of a parallel env) at once, and :func:`play_multiagent_many` plays many episodes
concurrently, so an async server (or a batching policy) sees all their requests together. Each
async request is bounded by ``request_timeout`` (:class:`~gem_core.errors.GenerateTimeout`); a
``generate`` that cancels itself is a :class:`~gem_core.errors.GenerateCancelled`, as in
:class:`~gem_core.scheduling.RolloutScheduler`.

A model seat the game ended before it acted (an opponent's first move ended it) has a finished
session with no turns, ``end_reason == "not_acted"``; it gets no record in
:attr:`MultiAgentEpisode.episodes`, and an adapter that needs a row for it trains nothing on it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from gem_core.episode import EpisodeEngine, EpisodeSession, Generation, TurnRequest, describe_request
from gem_core.errors import ConfigError, GenerateCancelled, GenerateTimeout
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multiagent.seat import SeatPolicy
from gem_core.rl.types import Episode

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "AsyncSeatGenerate",
    "MultiAgentEpisode",
    "MultiAgentJob",
    "Scripted",
    "SeatGenerate",
    "play_multiagent",
    "play_multiagent_async",
    "play_multiagent_many",
]

#: A model seat's policy: one request in, its answer out (ids in token mode, text in message mode).
SeatGenerate = Callable[[TurnRequest], Union[Generation, str]]
#: The async form (an async server's client, or a policy that batches the requests it is sent).
AsyncSeatGenerate = Callable[[TurnRequest], Awaitable[Union[Generation, str]]]
#: Seconds an async request may take before it is given up (the scheduler's default).
DEFAULT_REQUEST_TIMEOUT = 600.0


@dataclass(frozen=True)
class Scripted:
    """Marks a seat played by a scripted player (no session, no record), e.g. a reference opponent."""

    policy: SeatPolicy


@dataclass
class MultiAgentEpisode:
    """A finished multi-agent episode.

    Attributes:
        sessions: The model seats' sessions, by agent.
        returns: Every seat's summed reward (scripted seats too).
        outcomes: Every seat's final ``info["outcome"]`` (``"win"``/``"loss"``/``"draw"``), when the env gave one.
        stopped_by: The seat whose session ended the episode early, else ``None``.
        error: What ended the episode under :func:`play_multiagent_many` (its sessions are marked
            failed), else ``None``.
    """

    sessions: dict[str, EpisodeSession]
    returns: dict[str, float]
    outcomes: dict[str, str | None] = field(default_factory=dict)
    stopped_by: str | None = None
    error: BaseException | None = None

    @property
    def episodes(self) -> dict[str, Episode]:
        """One record per model seat that took at least one turn."""
        return {agent: s.episode() for agent, s in self.sessions.items() if s.turns}


@dataclass
class MultiAgentJob:
    """One episode for :func:`play_multiagent_many`: its env (one per job) and how to reset it.

    Attributes:
        env: The multi-agent env.
        seed: ``reset`` seed.
        options: ``reset`` options.
        env_id: Names the start state (default ``env.spec.id``).
        episode_id: Prefix of the seats' episode ids.
    """

    env: MultiAgentEnv
    seed: int | None = None
    options: dict[str, Any] | None = None
    env_id: str | None = None
    episode_id: str | None = None


class _Game:
    """The bookkeeping both drivers share: sessions, each seat's news and reward since its last action."""

    def __init__(
        self,
        engine: EpisodeEngine,
        env: MultiAgentEnv,
        policies: Any,
        *,
        seed: int | None,
        env_id: str | None,
        episode_id: str | None,
        system_prompts: str | Mapping[str, str] | None,
    ) -> None:
        agents = env.possible_agents
        if not isinstance(policies, Mapping):
            policies = dict.fromkeys(agents, policies)
        missing = [a for a in agents if a not in policies]
        if missing:
            raise ConfigError(f"no policy for seat(s) {missing}; give one per agent of {list(agents)} (or one for all)")
        prompts = (
            dict.fromkeys(agents, system_prompts) if isinstance(system_prompts, str) else dict(system_prompts or {})
        )
        stray = [a for a in prompts if a not in agents]
        if stray:
            raise ConfigError(f"system_prompts names {stray}, who are not agents of {list(agents)}")
        env_id = env_id or (env.spec.id if env.spec is not None else type(env.unwrapped).__name__)
        base = episode_id or f"{env_id}/seed={seed}"
        self.env = env
        self.policies: Mapping[str, Any] = policies
        self.sessions = {
            agent: engine.session(
                env_id=env_id, seed=seed, episode_id=f"{base}/{agent}", index=i, system_prompt=prompts.get(agent)
            )
            for i, agent in enumerate(agents)
            if not isinstance(policies[agent], Scripted)
        }
        for agent, session in self.sessions.items():
            session.metadata["seat"] = agent
        self.news: dict[str, list[str]] = {a: [] for a in agents}
        self.earned = dict.fromkeys(agents, 0.0)  # since the seat's last action
        self.last_info: dict[str, dict[str, Any]] = {a: {} for a in agents}
        self.waiting: set[str] = set()  # model seats whose action awaits the env's answer in their session
        self.result = MultiAgentEpisode(sessions=self.sessions, returns=dict.fromkeys(agents, 0.0))

    def told(self, agent: str) -> str:
        """Everything ``agent`` was told since its last action (and forget it)."""
        text = "\n\n".join(t for t in self.news[agent] if t)
        self.news[agent] = []
        return text

    def shown(self, observations: Mapping[str, str]) -> None:
        for agent, text in observations.items():
            self.news[agent].append(text)

    def prepare(self, agent: str) -> TurnRequest | None:
        """Show a model seat its news; its next request, or ``None`` when its session ended."""
        session, told = self.sessions[agent], self.told(agent)
        if not session.messages:
            session.begin(told)
        elif agent in self.waiting:
            session.observe(told, self.earned[agent], False, False, self.last_info[agent])
        self.earned[agent] = 0.0
        if session.done:
            self.waiting.discard(agent)
            return None
        return session.request()

    def accept(self, agent: str, answer: Generation | str) -> str | None:
        """Hand a model seat its answer; its action, or ``None`` when its session ended."""
        session = self.sessions[agent]
        action = session.accept(answer)
        if session.done or action is None:
            self.waiting.discard(agent)
            return None
        self.waiting.add(agent)
        return action

    def stepped(
        self,
        observations: Mapping[str, str],
        rewards: Mapping[str, float],
        terms: Mapping[str, bool],
        truncs: Mapping[str, bool],
        infos: Mapping[str, dict[str, Any]],
    ) -> None:
        """Take an env step's results; a model seat whose part ended sees its last observation now."""
        self.shown(observations)
        for agent, reward in rewards.items():
            self.earned[agent] += reward
            self.result.returns[agent] += reward
            self.last_info[agent] = infos[agent]
            if (terms[agent] or truncs[agent]) and agent in self.waiting:
                self.sessions[agent].observe(
                    self.told(agent), self.earned[agent], terms[agent], truncs[agent], infos[agent]
                )
                self.earned[agent] = 0.0
                self.waiting.discard(agent)

    def stop(self, by: str) -> MultiAgentEpisode:
        """End the game early because ``by``'s session ended: the other waiting seats' last turns truncate."""
        self.result.stopped_by = by
        for agent in sorted(self.waiting):
            self.sessions[agent].observe(self.told(agent), self.earned[agent], False, True, self.last_info[agent])
            self.sessions[agent].metadata["stopped_by"] = by
        self.waiting.clear()
        return self.finish()

    def fail(self, exc: BaseException) -> None:
        for session in self.sessions.values():
            if not session.done:
                session.fail(exc, "step")

    def finish(self) -> MultiAgentEpisode:
        result = self.result
        result.outcomes = {a: info.get("outcome") for a, info in self.last_info.items()}
        for agent, session in result.sessions.items():
            if not session.done and not session.messages:  # the game ended before this seat acted
                session._finish("not_acted")
            session.metadata["outcome"] = result.outcomes.get(agent)
            session.metadata["seat_return"] = result.returns[agent]
            if result.stopped_by is not None:
                session.metadata["stopped_by"] = result.stopped_by
        return result


def play_multiagent(
    engine: EpisodeEngine,
    env: MultiAgentEnv,
    policies: SeatGenerate | Scripted | Mapping[str, SeatGenerate | Scripted],
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    env_id: str | None = None,
    episode_id: str | None = None,
    system_prompts: str | Mapping[str, str] | None = None,
) -> MultiAgentEpisode:
    """Play one episode of ``env`` with a policy per seat (or one policy in every seat: self-play).

    The seats are asked one after the other in this thread (:func:`play_multiagent_async` asks the
    seats of a parallel env at once).

    Args:
        engine: The episode engine (tokenizer, limits) every model seat's session uses.
        env: A multi-agent env, turn-based or simultaneous.
        policies: One ``generate`` for all seats, or a mapping agent -> ``generate`` or :class:`Scripted`.
        seed: ``reset`` seed; the seats' records share the start state ``env_id/seed``.
        options: ``reset`` options.
        env_id: Names the start state (default ``env.spec.id``).
        episode_id: Prefix of the seats' episode ids (``{episode_id}/{agent}``).
        system_prompts: A system prompt per seat (or one for all); default the engine's.

    Raises:
        ConfigError: a seat without a policy, or a system prompt for an unknown seat.
        Exception: whatever a ``generate``, a scripted player or the env raised (sessions marked failed).
    """
    game = _Game(engine, env, policies, seed=seed, env_id=env_id, episode_id=episode_id, system_prompts=system_prompts)
    try:
        observations, _ = env.reset(seed=seed, options=options)
        game.shown(observations)
        while not env.episode_over:
            actions: dict[str, str] = {}
            for agent in env.acting_agents():
                policy = game.policies[agent]
                if isinstance(policy, Scripted):
                    actions[agent] = policy.policy(env, agent, game.told(agent))
                    continue
                request = game.prepare(agent)
                action = None if request is None else game.accept(agent, policy(request))
                if action is None:  # the seat's session ended (budget, max_turns, cut): the game cannot go on
                    return game.stop(agent)
                actions[agent] = action
            game.stepped(*env.step(actions))
    except BaseException as exc:
        game.fail(exc)
        raise
    return game.finish()


async def play_multiagent_async(
    engine: EpisodeEngine,
    env: MultiAgentEnv,
    policies: AsyncSeatGenerate | Scripted | Mapping[str, AsyncSeatGenerate | Scripted],
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    env_id: str | None = None,
    episode_id: str | None = None,
    system_prompts: str | Mapping[str, str] | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> MultiAgentEpisode:
    """:func:`play_multiagent` with async ``generate`` s: the seats that act in a step are asked at once.

    In a parallel env every live model seat's request is out at the same time (in a turn-based
    env one seat acts per step, so it plays as :func:`play_multiagent` does). The env's ``reset``
    and ``step`` run in a worker thread, so other episodes on the loop go on meanwhile; scripted
    seats are called on the loop. The seats asked together all keep their replies: if one's
    session ends on its reply, the others' replies are their last turns (truncated).

    Args:
        engine: As :func:`play_multiagent`.
        env: As :func:`play_multiagent`.
        policies: One async ``generate`` for all seats, or a mapping agent -> async ``generate`` or
            :class:`Scripted`.
        seed: As :func:`play_multiagent`.
        options: As :func:`play_multiagent`.
        env_id: As :func:`play_multiagent`.
        episode_id: As :func:`play_multiagent`.
        system_prompts: As :func:`play_multiagent`.
        request_timeout: Seconds each request may take (finite, positive); then it is cancelled.

    Raises:
        ConfigError: as :func:`play_multiagent`, or a ``request_timeout`` that is not finite and positive.
        GenerateTimeout: a request got no answer within ``request_timeout`` (the other seats' requests
            of that step are cancelled).
        GenerateCancelled: a ``generate`` raised ``asyncio.CancelledError`` of its own.
        Exception: whatever a ``generate``, a scripted player or the env raised (sessions marked failed).
    """
    _check_timeout(request_timeout)
    game = _Game(engine, env, policies, seed=seed, env_id=env_id, episode_id=episode_id, system_prompts=system_prompts)
    await _play_async(game, seed, options, request_timeout)
    return game.result


async def play_multiagent_many(
    engine: EpisodeEngine,
    jobs: Sequence[MultiAgentJob],
    policies: AsyncSeatGenerate | Scripted | Mapping[str, AsyncSeatGenerate | Scripted],
    *,
    max_in_flight: int | None = None,
    system_prompts: str | Mapping[str, str] | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> list[MultiAgentEpisode]:
    """Play many episodes concurrently (each as :func:`play_multiagent_async`); results in job order.

    Faults stay in their episode: a ``generate``, scripted player or env that raises (a
    :class:`~gem_core.errors.GenerateTimeout` too) ends only that episode, whose result carries
    the exception in ``error`` and whose sessions are marked failed (their records'
    ``end_reason`` is ``"error"``). Cancelling this call cancels every episode in flight.

    Args:
        engine: The episode engine every session uses.
        jobs: One per episode, each with its own env (an env plays one episode at a time).
        policies: As :func:`play_multiagent_async`, shared by every episode.
        max_in_flight: Episodes at once (default: all).
        system_prompts: As :func:`play_multiagent`.
        request_timeout: As :func:`play_multiagent_async`.

    Raises:
        ConfigError: ``max_in_flight`` below 1, a bad ``request_timeout``, two jobs sharing an env, a seat
            without a policy (before any episode starts).
    """
    _check_timeout(request_timeout)
    if max_in_flight is not None and (isinstance(max_in_flight, bool) or max_in_flight < 1):
        raise ConfigError(f"max_in_flight must be an int >= 1 (or None: all jobs at once), got {max_in_flight!r}")
    seen: dict[int, int] = {}
    for i, job in enumerate(jobs):
        if id(job.env) in seen:
            raise ConfigError(f"jobs {seen[id(job.env)]} and {i} share one env object; give each job its own env")
        seen[id(job.env)] = i
    games = [
        _Game(
            engine,
            job.env,
            policies,
            seed=job.seed,
            env_id=job.env_id,
            episode_id=job.episode_id,
            system_prompts=system_prompts,
        )
        for job in jobs
    ]
    gate = asyncio.Semaphore(max_in_flight or max(1, len(jobs)))

    async def run(game: _Game, job: MultiAgentJob) -> None:
        async with gate:
            try:
                await _play_async(game, job.seed, job.options, request_timeout)
            except Exception as exc:  # stays in its episode; cancellation propagates
                game.result.error = exc

    tasks = [asyncio.ensure_future(run(game, job)) for game, job in zip(games, jobs, strict=True)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [game.result for game in games]


def _check_timeout(request_timeout: float) -> None:
    if isinstance(request_timeout, bool) or not (
        isinstance(request_timeout, (int, float)) and math.isfinite(request_timeout) and request_timeout > 0
    ):
        raise ConfigError(f"request_timeout must be a finite number of seconds > 0, got {request_timeout!r}")


async def _play_async(game: _Game, seed: int | None, options: dict[str, Any] | None, timeout: float) -> None:
    env = game.env
    try:
        observations, _ = await asyncio.to_thread(env.reset, seed=seed, options=options)
        game.shown(observations)
        while not env.episode_over:
            actions: dict[str, str] = {}
            requests: dict[str, TurnRequest] = {}
            stopped: str | None = None
            for agent in env.acting_agents():
                policy = game.policies[agent]
                if isinstance(policy, Scripted):
                    actions[agent] = policy.policy(env, agent, game.told(agent))
                    continue
                request = game.prepare(agent)
                if request is None:  # ended before asking: the seats after it are not asked
                    stopped = agent
                    break
                requests[agent] = request
            answers = await _ask_together(game, requests, timeout)
            for agent, answer in answers.items():  # in acting order
                action = game.accept(agent, answer)
                if action is None:
                    stopped = stopped or agent
                else:
                    actions[agent] = action
            if stopped is not None:
                game.stop(stopped)
                return
            game.stepped(*await asyncio.to_thread(env.step, actions))
    except BaseException as exc:
        game.fail(exc)
        raise
    game.finish()


async def _ask_together(game: _Game, requests: dict[str, TurnRequest], timeout: float) -> dict[str, Any]:
    """Every request at once, each bounded; the first failure (in seat order) cancels the rest."""
    if not requests:
        return {}
    tasks = {
        agent: asyncio.ensure_future(_bounded(game.policies[agent], request, game.sessions[agent], timeout))
        for agent, request in requests.items()
    }
    try:
        await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
        failed = [task for task in tasks.values() if task.done() and task.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        return {agent: task.result() for agent, task in tasks.items()}
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def _bounded(generate: AsyncSeatGenerate, request: TurnRequest, session: EpisodeSession, timeout: float) -> Any:
    """``await generate(request)`` within ``timeout`` seconds, with the scheduler's typed errors."""
    task = asyncio.ensure_future(generate(request))
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:  # we are cancelled (a sibling failed, or the caller): so is the request
        task.cancel()
        raise
    label = describe_request(request)
    if not done:
        task.cancel()
        raise GenerateTimeout(
            f"episode {session.episode_id} ({label}), request {request.request_id}: no answer within "
            f"request_timeout={timeout}s; the request was cancelled and the episode ended",
            episodes=[label],
            request_ids=[request.request_id],
        )
    if task.cancelled():
        raise GenerateCancelled(
            f"generate raised asyncio.CancelledError for request {request.request_id} (episode {label}) while "
            "the episode was not cancelled; a request the server aborted is answered with "
            "Generation(finish_reason='abort'), not a CancelledError",
            episodes=[label],
        )
    return task.result()
