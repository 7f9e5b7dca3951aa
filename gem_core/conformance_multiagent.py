"""The conformance suite's multi-agent cases: one trajectory per seat, with its role, exact everywhere.

A multi-agent episode played by a trainer adapter must give what the episode engine's
:func:`~gem_core.multiagent.engine.play_multiagent` gives: one record per model seat (a
:class:`MultiAgentRecord`, with the seat as its ``role``), each seat's own token context, loss
mask and per-turn rewards exact, and per-token advantages from the role-conditioned ReBN
(:func:`gem_core.rl.roles.role_rebn_advantages`: each role normalised among its own turns, over
the whole case). An adapter test looks like the single-agent one::

    from gem_core.conformance_multiagent import MA_CASES, assert_multiagent_conformant, scripted_seat_generation

    @pytest.mark.parametrize("case", MA_CASES, ids=lambda c: c.name)
    def test_multiagent_conformance(case):
        ...  # the trainer's rollout, its server answering scripted_seat_generation(case, tokenizer, ...)
        assert_multiagent_conformant(case, records)

Records are matched by ``(start_state_id, role)``, so an adapter may return them in any order.
Cases (on gem-core's ``core:Nim-v0``, so every trainer env has them): self-play (one model in
both seats); the model against a fixed scripted opponent (:func:`take_one`, importable as
``gem_core.conformance_multiagent:take_one``); self-play where a seat's first reply is cut at
the per-turn token limit (an invalid action: that seat forfeits).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gem_core.api import make
from gem_core.conformance import (
    ConformanceRecord,
    _fake_logprob,
    _first_mismatch,
    _tokenizer,
    record_from_episode,
)
from gem_core.episode import EpisodeEngine, EpisodeLimits, Generation, TurnRequest
from gem_core.errors import ConfigError
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multiagent.engine import Scripted, play_multiagent
from gem_core.rl.roles import role_rebn_advantages
from gem_core.rl.types import Episode, start_state_id

__all__ = [
    "MA_CASES",
    "MultiAgentCase",
    "MultiAgentRecord",
    "assert_multiagent_conformant",
    "multiagent_record",
    "reference_multiagent_episodes",
    "reference_multiagent_records",
    "scripted_seat_generation",
    "take_one",
]

_PILE = re.compile(r"Nim: (\d+) stones")
_LEFT = re.compile(r"(\d+) left\.")


def _pile(text: str) -> int:
    """Stones left, read off a Nim conversation (the last ``N left.``, else the starting pile)."""
    left = _LEFT.findall(text)
    if left:
        return int(left[-1])
    found = _PILE.search(text)
    return int(found.group(1)) if found else 1


def _reply_optimal(turn: int, text: str) -> str:
    """Leaves a multiple of 4 when it can (so both seats win some games over the seeds)."""
    return f"I take {_pile(text) % 4 or 1}"


def _reply_cut_second(turn: int, text: str) -> str:
    """The second player's first reply runs past the token limit: cut, so an invalid action (a forfeit)."""
    if turn == 0 and "You move second" in text:
        return "Let me count the stones very carefully, one by one, before I take 2"
    return _reply_optimal(turn, text)


def take_one(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """A fixed scripted Nim opponent: always takes one stone (a :class:`~gem_core.multiagent.seat.SeatPolicy`)."""
    return "1"


@dataclass(frozen=True)
class MultiAgentCase:
    """One multi-agent scenario of the suite.

    Attributes:
        name: Readable id (test ids).
        env_id: The registered multi-agent env id.
        seeds: Reset seeds, one game each, in this order.
        template: Chat template of the tokenizer (a key of :data:`gem_core.testing_tokenizers.CHAT_TEMPLATES`).
        limits: The engine's budgets, per seat.
        gamma: Discount of the per-turn returns behind the role ReBN advantages.
        opponents: Seats played by a fixed scripted policy, as ``"module:attr"`` references
            (no record); every other seat is the model (self-play when there is none).
        reply: ``(turn, decoded prompt) -> reply text`` of the scripted model (every model seat).
    """

    name: str
    env_id: str
    seeds: tuple[int, ...]
    template: str
    limits: EpisodeLimits
    gamma: float
    opponents: Mapping[str, str] = field(default_factory=dict)
    reply: Callable[[int, str], str] = _reply_optimal

    def tokenizer(self) -> Any:
        """The case's tokenizer (built locally, cached)."""
        return _tokenizer(self.template)

    def make_env(self) -> MultiAgentEnv:
        """A fresh env for one game."""
        env: Any = make(self.env_id)  # typed for single-agent envs; the registry builds both kinds
        if not isinstance(env, MultiAgentEnv):
            raise ConfigError(f"{self.env_id} is not a multi-agent env")
        return env

    @property
    def model_seats(self) -> tuple[str, ...]:
        """The seats the model plays, in the env's order (one record each per game)."""
        env = self.make_env()
        try:
            return tuple(a for a in env.possible_agents if a not in self.opponents)
        finally:
            env.close()


#: The multi-agent scenarios every adapter must reproduce.
MA_CASES: tuple[MultiAgentCase, ...] = (
    MultiAgentCase(
        name="nim-self-play",
        env_id="core:Nim-v0",
        seeds=(0, 1, 2, 3),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=16, max_episode_tokens=512),
        gamma=0.9,
    ),
    MultiAgentCase(
        name="nim-vs-scripted",
        env_id="core:Nim-v0",
        seeds=(4, 5, 6),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=16, max_episode_tokens=512),
        gamma=0.8,
        opponents={"second": "gem_core.conformance_multiagent:take_one"},
    ),
    MultiAgentCase(
        name="nim-cut-forfeit",
        env_id="core:Nim-v0",
        seeds=(7, 8),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=12, max_episode_tokens=512),
        gamma=0.9,
        reply=_reply_cut_second,
    ),
)


def scripted_seat_generation(
    case: MultiAgentCase, tokenizer: Any, prompt_ids: Sequence[int], max_tokens: int | None
) -> Generation:
    """The suite's model for every seat, as an inference server answers: a pure function of the seat's prompt ids.

    The seat is not an input: its own context tells (each seat's briefing differs), so a
    stand-in server answers every seat with this one function, as a shared model would.
    """
    text = tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
    turn = text.count("<|im_start|>assistant") - 1
    ids = [*tokenizer.encode(case.reply(turn, text), add_special_tokens=False), int(tokenizer.eos_token_id)]
    reason = "stop"
    if max_tokens is not None and len(ids) > max_tokens:
        ids, reason = ids[:max_tokens], "length"
    return Generation(token_ids=ids, logprobs=[_fake_logprob(i, t) for i, t in enumerate(ids)], finish_reason=reason)


def reference_multiagent_episodes(case: MultiAgentCase) -> list[Episode]:
    """The case played by :func:`play_multiagent` itself: one record per (seed, model seat), in that order."""
    from gem_core.registry import load_entry_point

    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)

    def generate(request: TurnRequest) -> Generation:
        return scripted_seat_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    episodes: list[Episode] = []
    for seed in case.seeds:
        env = case.make_env()
        try:
            policies: dict[str, Any] = {a: generate for a in env.possible_agents}
            policies.update({seat: Scripted(load_entry_point(ref)) for seat, ref in case.opponents.items()})
            result = play_multiagent(engine, env, policies, seed=seed, env_id=case.env_id)
            episodes += [result.episodes[seat] for seat in env.possible_agents if seat in result.episodes]
        finally:
            env.close()
    return episodes


@dataclass
class MultiAgentRecord(ConformanceRecord):
    """A :class:`~gem_core.conformance.ConformanceRecord` of one seat's trajectory, with its role.

    Attributes:
        role: The seat the trajectory was played from (what the role-conditioned advantages key on).
    """

    role: str = ""


def multiagent_record(episode: Episode, advantages: Sequence[float] | None = None) -> MultiAgentRecord:
    """The record of one seat's engine-played episode (its role is ``metadata["seat"]``)."""
    base = record_from_episode(episode, advantages)
    return MultiAgentRecord(**vars(base), role=str(episode.metadata.get("seat", "")))


def reference_multiagent_records(case: MultiAgentCase) -> list[MultiAgentRecord]:
    """The expected records of ``case``, with role ReBN advantages over every seat's turns of the case."""
    episodes = reference_multiagent_episodes(case)
    advantages = role_rebn_advantages(episodes, gamma=case.gamma)
    return [multiagent_record(ep, np.asarray(adv).tolist()) for ep, adv in zip(episodes, advantages, strict=True)]


def assert_multiagent_conformant(
    case: MultiAgentCase, records: Sequence[MultiAgentRecord], *, check_advantages: bool = True
) -> None:
    """Check an adapter's per-seat records against the reference, matched by ``(start_state_id, role)``.

    Raises:
        AssertionError: Naming the case, the start state and seat, the field and the first difference
            (a seat missing, a seat too many, a role not carried, tokens, masks, rewards, advantages).
    """
    expected = {(r.start_state_id, r.role): r for r in reference_multiagent_records(case)}
    got: dict[tuple[str, str], MultiAgentRecord] = {}
    for record in records:
        key = (record.start_state_id, record.role)
        if key in got:
            raise AssertionError(f"[{case.name}] two records for {key[0]} seat {key[1]!r}")
        got[key] = record
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        raise AssertionError(
            f"[{case.name}] records by (start state, role): missing {missing}, unexpected {extra} "
            f"(one per model seat {list(case.model_seats)} and seed {list(case.seeds)})"
        )
    for key, want in expected.items():
        have = got[key]
        where = f"[{case.name}] {key[0]} seat {key[1]!r}"
        for name in ("actions", "rewards", "terminated", "truncated", "input_ids", "loss_mask"):
            problem = _first_mismatch(getattr(have, name), getattr(want, name), close=name == "rewards")
            if problem:
                raise AssertionError(f"{where}: {name}: {problem}")
        if check_advantages:
            if have.token_advantages is None or want.token_advantages is None:
                raise AssertionError(f"{where}: token_advantages missing")
            problem = _first_mismatch(have.token_advantages, want.token_advantages, close=True)
            if problem:
                raise AssertionError(f"{where}: token_advantages (role ReBN): {problem}")


def case_start_states(case: MultiAgentCase) -> list[str]:
    """The start-state ids of the case's games, in seed order."""
    return [start_state_id(case.env_id, seed) for seed in case.seeds]
