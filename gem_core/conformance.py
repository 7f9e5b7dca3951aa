"""The conformance suite: the same scripted policy, env ids and seeds must give the same numbers everywhere.

Every way of playing episodes (the runner, :meth:`EpisodeEngine.play` and
:meth:`~gem_core.episode.EpisodeEngine.play_batch`) and every trainer adapter (TRL,
verl, OpenRLHF, RL2, oat) runs the :data:`CASES` below with :func:`scripted_generation`
as its model, converts what it produced back into :class:`ConformanceRecord` s, and calls
:func:`assert_conformant`. The reference is the engine itself (:func:`reference_records`):
actions, per-turn rewards, truncation flags, ``start_state_id``, the token sequence, its
loss mask and the per-token ReBN advantages must match exactly (advantages to 1e-6).

An adapter test looks like this::

    from gem_core.conformance import CASES, assert_conformant, scripted_generation

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
    def test_conformance(case):
        tokenizer = case.tokenizer()
        ...  # run the trainer's rollout with a stand-in server answering scripted_generation(case, tokenizer, ...)
        assert_conformant(case, records)

Cases: bisection on ``core:NumberGuess-v0``; a generation cut at the per-turn token limit
(sent to the env as :data:`~gem_core.episode.INVALID_ACTION`, penalised by the env); a
template that rewrites history (ChatML that drops earlier ``<think>`` blocks); a 16-turn
episode cut by ``max_turns``; a tool env (``core:NumberGuess-v0-echo``: the ``tools``
wrapper with the reference ``echo`` tool). Needs the ``test`` extra (transformers, to build the tokenizers).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeLimits, Generation, TurnRequest
from gem_core.rl.advantages import rebn
from gem_core.rl.layouts import episode_to_sequence
from gem_core.rl.returns import discounted_returns
from gem_core.rl.types import Episode

__all__ = [
    "CASES",
    "ConformanceCase",
    "ConformanceRecord",
    "assert_conformant",
    "record_from_episode",
    "reference_episodes",
    "reference_records",
    "scripted_generation",
]

_HINT = re.compile(r"(-?\d+) is wrong; the number is (higher|lower)")
_RANGE = re.compile(r"between (\d+) and (\d+)")


def _bisect(text: str) -> tuple[int, int, int]:
    """Bounds and next guess from the hints in a NumberGuess conversation."""
    found = _RANGE.search(text)
    low, high = (int(found.group(1)), int(found.group(2))) if found else (1, 16)
    for guess, direction in _HINT.findall(text):
        if direction == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return low, high, (low + high) // 2


def _reply_bisect(turn: int, text: str) -> str:
    return f"My guess is {_bisect(text)[2]}"


def _reply_cut(turn: int, text: str) -> str:
    if turn == 1:  # longer than the case's max_turn_tokens: cut mid-number
        return "Let me think about this very carefully, step by step. My guess is 123456"
    return _reply_bisect(turn, text)


def _reply_think(turn: int, text: str) -> str:
    low, high, mid = _bisect(text)
    return f"<think>\nbetween {low} and {high}\n</think>\n\nMy guess is {mid}"


def _reply_wrong(turn: int, text: str) -> str:
    return "My guess is 0"  # below the range: always wrong, the episode runs to its turn limit


def _reply_tool(turn: int, text: str) -> str:
    if turn == 0:
        return "<echo>hello</echo>"
    return _reply_bisect(turn, text)


@dataclass(frozen=True)
class ConformanceCase:
    """One scenario of the suite.

    Attributes:
        name: Readable id (test ids).
        env_id: The registered env id.
        seeds: Reset seeds, one episode each, in this order.
        template: Chat template of the tokenizer (a key of
            :data:`gem_core.testing_tokenizers.CHAT_TEMPLATES`).
        limits: The engine's budgets (an adapter maps them onto its trainer's settings).
        gamma: Discount of the per-turn returns behind the ReBN advantages.
        env_kwargs: Constructor overrides.
        wrappers: Wrappers (registered names or ``(name, kwargs)``).
        reply: ``(turn, decoded prompt) -> reply text`` of the scripted policy.
    """

    name: str
    env_id: str
    seeds: tuple[int, ...]
    template: str
    limits: EpisodeLimits
    gamma: float
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: tuple[Any, ...] = ()
    reply: Callable[[int, str], str] = _reply_bisect

    def tokenizer(self) -> Any:
        """The case's tokenizer (built locally, cached)."""
        return _tokenizer(self.template)

    def make_env(self) -> Any:
        """A fresh env for one episode."""
        return make(self.env_id, wrappers=list(self.wrappers) or None, **dict(self.env_kwargs))


@functools.cache
def _tokenizer(template: str) -> Any:
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer(template)


#: The scenarios every adapter must reproduce.
CASES: tuple[ConformanceCase, ...] = (
    ConformanceCase(
        name="bisect",
        env_id="core:NumberGuess-v0",
        seeds=(0, 1, 2, 3),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=24, max_episode_tokens=256),
        gamma=0.9,
    ),
    ConformanceCase(
        name="cut-generation",
        env_id="core:NumberGuess-v0",
        seeds=(4, 5),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=12, max_episode_tokens=256),
        gamma=1.0,
        reply=_reply_cut,
    ),
    ConformanceCase(
        name="think-stripping-template",
        env_id="core:NumberGuess-v0",
        seeds=(6, 7, 8),
        template="chatml_drop_think",
        limits=EpisodeLimits(max_turn_tokens=48, max_episode_tokens=512),
        gamma=0.9,
        reply=_reply_think,
    ),
    ConformanceCase(
        name="16-turns",
        env_id="core:NumberGuess-v0",
        seeds=(9, 10),
        template="chatml",
        limits=EpisodeLimits(max_turns=16, max_turn_tokens=16, max_episode_tokens=1024),
        gamma=0.95,
        env_kwargs={"max_turns": 20},
        reply=_reply_wrong,
    ),
    ConformanceCase(
        name="tool-env",
        env_id="core:NumberGuess-v0-echo",
        seeds=(11, 12),
        template="chatml",
        limits=EpisodeLimits(max_turn_tokens=24, max_episode_tokens=512),
        gamma=0.9,
        reply=_reply_tool,
    ),
)


def _fake_logprob(position: int, token: int) -> float:
    return -0.05 - 0.001 * ((token * 7 + position) % 97)


def scripted_generation(
    case: ConformanceCase, tokenizer: Any, prompt_ids: Sequence[int], max_tokens: int | None
) -> Generation:
    """The suite's policy, as an inference server would answer: a pure function of the prompt ids.

    The reply text depends on the decoded prompt only (turn number and hints); its ids
    are the encoded text plus the stop token, cut at ``max_tokens`` (then without the
    stop token and with ``finish_reason="length"``), with made-up but deterministic
    log-probabilities. A stand-in for a trainer's inference engine returns exactly this.
    """
    text = tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
    turn = text.count("<|im_start|>assistant") - 1
    ids = [*tokenizer.encode(case.reply(turn, text), add_special_tokens=False), int(tokenizer.eos_token_id)]
    reason = "stop"
    if max_tokens is not None and len(ids) > max_tokens:
        ids, reason = ids[:max_tokens], "length"
    return Generation(token_ids=ids, logprobs=[_fake_logprob(i, t) for i, t in enumerate(ids)], finish_reason=reason)


def reference_episodes(case: ConformanceCase) -> list[Episode]:
    """The case played by the engine itself (one batched call per turn): the suite's reference."""
    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)
    jobs = [EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=seed) for seed in case.seeds]

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        return [scripted_generation(case, tokenizer, r.prompt_ids or [], r.max_tokens) for r in requests]

    try:
        return [session.episode() for session in engine.play_batch(jobs, generate)]
    finally:
        for job in jobs:
            job.env.close()


@dataclass
class ConformanceRecord:
    """What an adapter produced for one episode, in trainer-neutral terms.

    Attributes:
        start_state_id: The episode's group id.
        actions: Text sent to the env per turn.
        rewards: Per-turn rewards.
        terminated: Per-turn terminated flags.
        truncated: Per-turn truncated flags.
        input_ids: The whole token sequence (first prompt, then everything after it).
        loss_mask: 1 on generated tokens.
        token_advantages: Per-token advantages (ReBN with the case's gamma over the whole
            case); ``None`` when the adapter does not compute advantages.
    """

    start_state_id: str
    actions: list[str]
    rewards: list[float]
    terminated: list[bool]
    truncated: list[bool]
    input_ids: list[int]
    loss_mask: list[int]
    token_advantages: list[float] | None = None


def _rebn_per_episode(episodes: Sequence[Episode], gamma: float) -> list[np.ndarray]:
    returns = [discounted_returns(ep, gamma) for ep in episodes]
    flat = rebn(np.concatenate(returns)) if returns else np.zeros(0)
    return np.split(flat, np.cumsum([len(r) for r in returns])[:-1]) if returns else []


def record_from_episode(episode: Episode, advantages: Sequence[float] | None = None) -> ConformanceRecord:
    """A record of an engine-played episode (token mode), with per-turn ``advantages`` placed on its tokens."""
    sequence = episode_to_sequence(episode, advantages=advantages)
    return ConformanceRecord(
        start_state_id=episode.start_state_id,
        actions=[t.action for t in episode.turns],
        rewards=[t.reward for t in episode.turns],
        terminated=[t.terminated for t in episode.turns],
        truncated=[t.truncated for t in episode.turns],
        input_ids=sequence.input_ids.tolist(),
        loss_mask=sequence.loss_mask.astype(int).tolist(),
        token_advantages=None if sequence.token_advantages is None else sequence.token_advantages.tolist(),
    )


def reference_records(case: ConformanceCase) -> list[ConformanceRecord]:
    """The expected records of ``case``, in seed order, with ReBN advantages over the whole case."""
    episodes = reference_episodes(case)
    advantages = _rebn_per_episode(episodes, case.gamma)
    return [record_from_episode(ep, adv.tolist()) for ep, adv in zip(episodes, advantages, strict=True)]


def _first_mismatch(a: Sequence[Any], b: Sequence[Any], close: bool) -> str | None:
    if len(a) != len(b):
        return f"lengths differ: {len(a)} != {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        same = math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6) if close else x == y
        if not same:
            return f"first difference at [{i}]: {x!r} != {y!r}"
    return None


def assert_conformant(
    case: ConformanceCase, records: Sequence[ConformanceRecord], *, check_advantages: bool = True
) -> None:
    """Check an adapter's records against the reference, in seed order.

    Raises:
        AssertionError: Naming the case, the episode, the field and the first difference.
    """
    expected = reference_records(case)
    if len(records) != len(expected):
        raise AssertionError(f"[{case.name}] {len(records)} records, expected {len(expected)} (one per seed)")
    for index, (got, want) in enumerate(zip(records, expected, strict=True)):
        where = f"[{case.name}] episode {index} ({want.start_state_id})"
        if got.start_state_id != want.start_state_id:
            raise AssertionError(f"{where}: start_state_id {got.start_state_id!r} != {want.start_state_id!r}")
        for name in ("actions", "rewards", "terminated", "truncated", "input_ids", "loss_mask"):
            problem = _first_mismatch(getattr(got, name), getattr(want, name), close=name == "rewards")
            if problem:
                raise AssertionError(f"{where}: {name}: {problem}")
        if check_advantages:
            if got.token_advantages is None or want.token_advantages is None:
                raise AssertionError(f"{where}: token_advantages missing")
            problem = _first_mismatch(got.token_advantages, want.token_advantages, close=True)
            if problem:
                raise AssertionError(f"{where}: token_advantages: {problem}")
