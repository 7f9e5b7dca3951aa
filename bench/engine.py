"""Episode engine cost per turn at 1, 16 and 64 turns: flat per turn is the goal.

``EpisodeEngine.play_batch`` plays ``core:NumberGuess-v0`` episodes of exactly T turns
with a real Hugging Face tokenizer (the local ChatML test tokenizer, a
``PreTrainedTokenizerFast`` with a Jinja chat template) and a trivial policy that
answers precomputed ids (a wrong guess, so the episode runs to its turn limit). Time
per turn is the wall time minus the policy's and the env's, divided by the turns
played: the engine's own work (first prompt, per-turn bridge render, records).

Side by side with ``context="rerender"`` (the whole history rendered every turn, what
the TRL adapter did before the engine, and what GEM's per-transition prompts cost):
that column grows with T, the engine's stays flat. GEM (``gem-llm``) has no
token-level episode engine to time.

    python bench/engine.py [--turns 1 16 64] [--episodes 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
from gem_core.testing_tokenizers import build_chat_tokenizer


def per_turn_ms(tokenizer: Any, turns: int, episodes: int, context: str, answer: list[int]) -> float:
    """Engine milliseconds per turn for one batch of ``episodes`` episodes of ``turns`` turns."""
    engine = EpisodeEngine(tokenizer, max_turns=turns, context=context)  # type: ignore[arg-type]
    jobs = [
        EpisodeJob(env=make("core:NumberGuess-v0", max_turns=turns + 1), env_id="core:NumberGuess-v0", seed=s)
        for s in range(episodes)
    ]
    policy_s = 0.0

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        nonlocal policy_s
        started = time.perf_counter()
        out = [Generation(token_ids=list(answer)) for _ in requests]
        policy_s += time.perf_counter() - started
        return out

    started = time.perf_counter()
    sessions = engine.play_batch(jobs, generate)
    wall = time.perf_counter() - started
    env_s = sum(sum(s.episode().metadata["env_s"]) for s in sessions)
    played = sum(len(s.turns) for s in sessions)
    assert played == turns * episodes, "every episode must run to its turn limit"
    return 1000 * (wall - policy_s - env_s) / played


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--episodes", type=int, default=8, help="episodes per batch")
    parser.add_argument("--repeats", type=int, default=5, help="batches per setting (median)")
    args = parser.parse_args()
    tokenizer = build_chat_tokenizer("chatml")
    answer = [*tokenizer.encode("My guess is 0", add_special_tokens=False), tokenizer.eos_token_id]
    per_turn_ms(tokenizer, 2, 2, "delta", answer)  # warm-up: template compilation, caches

    print(f"{args.episodes} episodes per batch, median of {args.repeats} batches; ms of engine work per turn")
    print(f"{'turns':>6} {'delta (engine)':>15} {'rerender':>10} {'rerender/delta':>15}")
    for turns in args.turns:
        delta = statistics.median(
            per_turn_ms(tokenizer, turns, args.episodes, "delta", answer) for _ in range(args.repeats)
        )
        rerender = statistics.median(
            per_turn_ms(tokenizer, turns, args.episodes, "rerender", answer) for _ in range(args.repeats)
        )
        print(f"{turns:>6} {delta:>15.3f} {rerender:>10.3f} {rerender / delta:>14.1f}x")
    print("flat per turn means the delta column stays near its 1-turn value")


if __name__ == "__main__":
    main()
