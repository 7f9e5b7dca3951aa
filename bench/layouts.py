"""Tokens a trainer processes per episode: per-transition vs per-episode (token-in/token-out) layout.

Episodes come from the reference env ``core:NumberGuess`` (real observations) played by a
scripted policy that answers with a short reasoning paragraph, so each turn adds a
realistic amount of text. Tokens are counted with the local ChatML test tokenizer
(no hub access here); the *ratio* between the layouts is what carries over to real
tokenizers, since both layouts tokenise the same text.

    python bench/layouts.py                      # 1..32 turns
    python bench/layouts.py --turns 1 8 32 --reasoning-words 120

GEM (``gem-llm``) has only the per-transition layout, so the first column is also
GEM's cost; there is no GEM function to time side by side.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions
from gem_core.rl.types import Episode
from gem_core.testing import NumberGuessEnv
from gem_core.testing_tokenizers import build_chat_tokenizer, synthetic_chat_episode

SYSTEM = "You are playing a game. Think step by step, then answer with a number."
REASONING_TEXT = (
    "The feedback says the target is lower than my guess, so I should move down and try the middle "
    "of the range that is left."
)
REASONING = REASONING_TEXT.split(" ")


def play(tokenizer: Any, turns: int, reasoning_words: int, seed: int) -> Episode:
    """One episode of exactly ``turns`` turns, recorded as a chat runner would."""
    env = NumberGuessEnv(low=1, high=10_000, max_turns=turns)
    first_prompt, _ = env.reset(seed=seed)
    assert env.target is not None
    thought = " ".join(REASONING[i % len(REASONING)] for i in range(reasoning_words))
    actions, replies, rewards = [], [], []
    for t in range(turns):
        # Wrong guesses until the last turn, so the episode lasts exactly `turns` turns.
        guess = env.target if t == turns - 1 else (env.target + 1 + t) % 10_000 + 1
        actions.append(f"<think>\n{thought}\n</think>\n\nMy guess is {guess}.")
        reply, reward, terminated, truncated, _ = env.step(actions[-1])
        replies.append(reply)
        rewards.append(reward)
        if terminated or truncated:
            break
    return synthetic_chat_episode(
        tokenizer,
        actions,
        replies,
        rewards,
        first_prompt=first_prompt,
        system=SYSTEM,
        start_state_id=f"core:NumberGuess-v0/seed={seed}",
        episode_id=f"{turns}-{seed}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--reasoning-words", type=int, default=40, help="words of reasoning per action")
    parser.add_argument("--episodes", type=int, default=5, help="episodes per row (medians are reported)")
    args = parser.parse_args()

    tokenizer = build_chat_tokenizer()
    header = (
        f"{'turns':>5} | {'per-transition':>14} | {'per-episode':>11} | {'ratio':>6} | "
        f"{'generated':>9} | {'build ms (trans / seq)':>22}"
    )
    print(f"tokens processed per episode (median of {args.episodes}), ChatML test tokenizer")
    print(header)
    print("-" * len(header))
    for turns in args.turns:
        transition_tokens, sequence_tokens, generated, t_trans, t_seq = [], [], [], [], []
        for seed in range(args.episodes):
            episode = play(tokenizer, turns, args.reasoning_words, seed)
            (advantages,) = rebn_advantages([episode], gamma=0.9)
            start = time.perf_counter()
            samples = episode_to_transitions(episode, advantages, tokenizer)
            t_trans.append(time.perf_counter() - start)
            start = time.perf_counter()
            sequence = episode_to_sequence(episode, tokenizer, advantages=advantages)
            t_seq.append(time.perf_counter() - start)
            transition_tokens.append(sum(s.num_tokens for s in samples))
            sequence_tokens.append(sequence.num_tokens)
            generated.append(sequence.num_generated_tokens)
        per_transition = statistics.median(transition_tokens)
        per_episode = statistics.median(sequence_tokens)
        print(
            f"{turns:>5} | {per_transition:>14,.0f} | {per_episode:>11,.0f} | {per_transition / per_episode:>5.2f}x | "
            f"{statistics.median(generated):>9,.0f} | "
            f"{statistics.median(t_trans) * 1e3:>10.1f} / {statistics.median(t_seq) * 1e3:>9.1f}"
        )


if __name__ == "__main__":
    main()
