"""Episode engine memory per episode at 16, 64 and 128 turns: linear in the episode's length is the goal.

Each turn's record holds the prompt the policy saw. The engine records it as a
``PrefixView`` of the one growing context (the turns share it); the baseline column
keeps a copy of the context per turn instead (what the engine did before: the
request's list, kept in the record), which grows with turns x context.

Setup: ``core:NumberGuess-v0`` (a wrong guess every turn, so each episode runs to its
turn limit), the ChatML test tokenizer (a real ``PreTrainedTokenizerFast``), and a
scripted policy that answers ``--tokens`` fresh token ids per turn (a reasoning text
ending in "My guess is 0" and the stop token), driven through ``EpisodeSession``.
Reported per episode, median of ``--repeats``:

* held: traced bytes the finished session still holds (``tracemalloc`` current after
  the episode, the session alive), and peak: the most traced while it played;
* ms per turn: wall time of the whole loop (engine, scripted policy, env) without
  ``tracemalloc``;
* layout ms: ``episode_to_sequence`` on the finished episode (views let it check only
  each turn's new tokens; copies are compared in full).

GEM (``gem-llm``) has no token-level episode engine to compare with.

    python bench/engine_memory.py [--turns 16 64 128] [--tokens 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeSession, Generation
from gem_core.rl.layouts import episode_to_sequence
from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "core:NumberGuess-v0"


def answer_ids(tokenizer: Any, tokens: int) -> np.ndarray:
    """``tokens`` ids: filler reasoning, then "My guess is 0" and the stop token."""
    tail = [*tokenizer.encode(" My guess is 0", add_special_tokens=False), tokenizer.eos_token_id]
    filler = tokenizer.encode("Think about the hint, then halve the range. " * tokens, add_special_tokens=False)
    if tokens < len(tail):
        raise SystemExit(f"--tokens must be at least {len(tail)}")
    return np.asarray(filler[: tokens - len(tail)] + tail, dtype=np.int64)


def play(engine: EpisodeEngine, answer: np.ndarray, turns: int, seed: int, copies: bool) -> EpisodeSession:
    """One episode of exactly ``turns`` turns; with ``copies``, each record keeps its own prompt list."""
    env = make(ENV_ID, max_turns=turns + 1)
    session = engine.session(env_id=ENV_ID, seed=seed)
    session.begin(env.reset(seed=seed)[0])
    while not session.done:
        request = session.request()
        # .tolist() makes fresh int objects each turn, as a server's reply does.
        action = session.accept(Generation(token_ids=answer.tolist()))
        if action is not None:
            session.observe(*env.step(action))
        if copies and session.turns and request.prompt_ids is not None:
            # The old engine's record: the request's own copy of the context.
            turn = session.turns[-1]
            if turn.prompt_token_ids is not None and not isinstance(turn.prompt_token_ids, list):
                turn.prompt_token_ids = request.prompt_ids
    assert len(session.turns) == turns, "every episode must run to its turn limit"
    return session


@dataclass
class Measured:
    held_mb: float
    peak_mb: float
    ms_per_turn: float
    layout_ms: float
    context_tokens: float


def median(rows: list[Measured]) -> Measured:
    """The median of each column."""
    return Measured(*(statistics.median(getattr(m, f.name) for m in rows) for f in fields(Measured)))


def measure(engine: EpisodeEngine, answer: np.ndarray, turns: int, seed: int, copies: bool) -> Measured:
    """Memory of one episode (traced), then its time (untraced) and its layout time."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    session = play(engine, answer, turns, seed, copies)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del session
    gc.collect()
    started = time.perf_counter()
    session = play(engine, answer, turns, seed, copies)
    ms_per_turn = 1000 * (time.perf_counter() - started) / turns
    started = time.perf_counter()
    sequence = episode_to_sequence(session.episode())
    layout_ms = 1000 * (time.perf_counter() - started)
    assert sequence.input_ids.tolist() == session.context
    context_tokens = len(session.context or [])
    return Measured((held - before) / 2**20, (peak - before) / 2**20, ms_per_turn, layout_ms, context_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--tokens", type=int, default=256, help="generated tokens per turn")
    parser.add_argument("--repeats", type=int, default=3, help="episodes per setting (median)")
    parser.add_argument("--context", choices=["delta", "rerender"], default="delta")
    parser.add_argument("--batch", type=int, default=256, help="episodes of a batch, for the extrapolated column")
    args = parser.parse_args()
    tokenizer = build_chat_tokenizer("chatml")
    answer = answer_ids(tokenizer, args.tokens)
    engine = EpisodeEngine(tokenizer, max_turns=2, context=args.context)
    play(engine, answer, 2, 0, False)  # warm-up: template compilation, caches

    print(
        f"{args.tokens} generated tokens per turn, context={args.context}, median of {args.repeats} episodes; "
        f"'copy' = a prompt list per turn (the engine before), 'view' = prefix views (now)"
    )
    header = (
        f"{'turns':>5} {'context':>8} {'held MB copy':>13} {'view':>7} {'ratio':>7} {'peak MB copy':>13} "
        f"{'view':>7} {'ms/turn copy':>13} {'view':>6} {'layout ms copy':>15} {'view':>6} "
        f"{f'GB/{args.batch} ep. copy':>17} {'view':>6}"
    )
    print(header)
    for turns in args.turns:
        limited = EpisodeEngine(tokenizer, max_turns=turns, context=args.context, renderer=engine.renderer)
        rows: dict[bool, list[Measured]] = {True: [], False: []}
        for seed in range(args.repeats):
            for copies in (True, False):
                rows[copies].append(measure(limited, answer, turns, seed, copies))

        copy, view = median(rows[True]), median(rows[False])
        print(
            f"{turns:>5} {int(view.context_tokens):>8,} {copy.held_mb:>13.2f} {view.held_mb:>7.2f} "
            f"{copy.held_mb / view.held_mb:>6.1f}x {copy.peak_mb:>13.2f} {view.peak_mb:>7.2f} "
            f"{copy.ms_per_turn:>13.3f} {view.ms_per_turn:>6.3f} {copy.layout_ms:>15.2f} {view.layout_ms:>6.2f} "
            f"{copy.held_mb * args.batch / 1024:>17.2f} {view.held_mb * args.batch / 1024:>6.2f}"
        )
    print("linear means the view column grows with the context, the copy column with turns x context")


if __name__ == "__main__":
    main()
