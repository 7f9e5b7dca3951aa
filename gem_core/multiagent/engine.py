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

A model seat the game ended before it acted (an opponent's first move ended it) has a finished
session with no turns, ``end_reason == "not_acted"``; it gets no record in
:attr:`MultiAgentEpisode.episodes`, and an adapter that needs a row for it trains nothing on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from gem_core.episode import EpisodeEngine, EpisodeSession, Generation, TurnRequest
from gem_core.errors import ConfigError
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multiagent.seat import SeatPolicy
from gem_core.rl.types import Episode

__all__ = ["MultiAgentEpisode", "Scripted", "SeatGenerate", "play_multiagent"]

#: A model seat's policy: one request in, its answer out (ids in token mode, text in message mode).
SeatGenerate = Callable[[TurnRequest], Union[Generation, str]]


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
    """

    sessions: dict[str, EpisodeSession]
    returns: dict[str, float]
    outcomes: dict[str, str | None] = field(default_factory=dict)
    stopped_by: str | None = None

    @property
    def episodes(self) -> dict[str, Episode]:
        """One record per model seat that took at least one turn."""
        return {agent: s.episode() for agent, s in self.sessions.items() if s.turns}


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
    agents = env.possible_agents
    if not isinstance(policies, Mapping):
        policies = dict.fromkeys(agents, policies)
    missing = [a for a in agents if a not in policies]
    if missing:
        raise ConfigError(f"no policy for seat(s) {missing}; give one per agent of {list(agents)} (or one for all)")
    prompts = dict.fromkeys(agents, system_prompts) if isinstance(system_prompts, str) else dict(system_prompts or {})
    stray = [a for a in prompts if a not in agents]
    if stray:
        raise ConfigError(f"system_prompts names {stray}, who are not agents of {list(agents)}")
    env_id = env_id or (env.spec.id if env.spec is not None else type(env.unwrapped).__name__)
    base = episode_id or f"{env_id}/seed={seed}"
    sessions = {
        agent: engine.session(
            env_id=env_id, seed=seed, episode_id=f"{base}/{agent}", index=i, system_prompt=prompts.get(agent)
        )
        for i, agent in enumerate(agents)
        if not isinstance(policies[agent], Scripted)
    }
    for agent, session in sessions.items():
        session.metadata["seat"] = agent
    news: dict[str, list[str]] = {a: [] for a in agents}
    earned = dict.fromkeys(agents, 0.0)  # since the seat's last action
    returns = dict.fromkeys(agents, 0.0)
    last_info: dict[str, dict[str, Any]] = {a: {} for a in agents}
    waiting: set[str] = set()  # model seats whose action awaits the env's answer in their session
    result = MultiAgentEpisode(sessions=sessions, returns=returns)
    try:
        observations, _ = env.reset(seed=seed, options=options)
        for agent, text in observations.items():
            news[agent].append(text)
        while not env.episode_over:
            actions: dict[str, str] = {}
            for agent in env.acting_agents():
                policy = policies[agent]
                told = "\n\n".join(t for t in news[agent] if t)
                news[agent] = []
                if isinstance(policy, Scripted):
                    actions[agent] = policy.policy(env, agent, told)
                    continue
                action = _model_turn(sessions[agent], policy, told, agent in waiting, earned[agent], last_info[agent])
                earned[agent] = 0.0
                if action is None:  # the seat's session ended (budget, max_turns, cut): the game cannot go on
                    waiting.discard(agent)
                    result.stopped_by = agent
                    _stop_others(sessions, waiting, news, earned, last_info, agent)
                    return _finish(result, last_info)
                waiting.add(agent)
                actions[agent] = action
            _, rewards, terms, truncs, infos = env.step(actions)
            for agent, text in _.items():
                news[agent].append(text)
            for agent, reward in rewards.items():
                earned[agent] += reward
                returns[agent] += reward
                last_info[agent] = infos[agent]
                if (terms[agent] or truncs[agent]) and agent in waiting:
                    told = "\n\n".join(t for t in news[agent] if t)
                    sessions[agent].observe(told, earned[agent], terms[agent], truncs[agent], infos[agent])
                    earned[agent] = 0.0
                    waiting.discard(agent)
    except BaseException as exc:
        for session in sessions.values():
            if not session.done:
                session.fail(exc, "step")
        raise
    return _finish(result, last_info)


def _model_turn(
    session: EpisodeSession,
    generate: SeatGenerate,
    told: str,
    waiting: bool,
    earned: float,
    info: dict[str, Any],
) -> str | None:
    """Show the seat its news, ask its policy, return the action (``None``: its session ended)."""
    if not session.messages:
        session.begin(told)
    elif waiting:
        session.observe(told, earned, False, False, info)
    if session.done:
        return None
    action = session.accept(generate(session.request()))
    return None if session.done or action is None else action


def _stop_others(
    sessions: dict[str, EpisodeSession],
    waiting: set[str],
    news: dict[str, list[str]],
    earned: dict[str, float],
    last_info: dict[str, dict[str, Any]],
    by: str,
) -> None:
    for agent in sorted(waiting):
        told = "\n\n".join(t for t in news[agent] if t)
        sessions[agent].observe(told, earned[agent], False, True, last_info[agent])
        sessions[agent].metadata["stopped_by"] = by
    waiting.clear()


def _finish(result: MultiAgentEpisode, last_info: dict[str, dict[str, Any]]) -> MultiAgentEpisode:
    result.outcomes = {a: info.get("outcome") for a, info in last_info.items()}
    for agent, session in result.sessions.items():
        if not session.done and not session.messages:  # the game ended before this seat acted
            session._finish("not_acted")
        session.metadata["outcome"] = result.outcomes.get(agent)
        session.metadata["seat_return"] = result.returns[agent]
        if result.stopped_by is not None:
            session.metadata["stopped_by"] = result.stopped_by
    return result
