"""Where a TRL training step goes: generation, env, gem adapter work, and TRL's own update.

Runs a real ``GemGRPOTrainer.train()`` on the CPU with the tiny local model (the worst
case for the adapter's share: generation and the update are as cheap as they get) and
reads the per-step timings the rollout and trainer log:

* ``generate``: the model's ``generate`` calls (one per turn, batched over episodes);
* ``env``: ``reset`` and ``step`` of the envs;
* ``adapter``: everything else gem does in the rollout (the episode engine's first prompts,
  per-turn template bridges and records, the conversion to TRL's dict) plus the ReBN advantages;
* ``trl``: the rest of the step (log-probs, loss, backward, optimizer).

The first step is dropped as warm-up; medians over the rest. GEM (``gem-llm``) has no TRL
integration, so there is nothing to run side by side. The adapter before the episode engine
(commit 2c221ed, which re-rendered the history several times per turn) runs with the same
command from an export of that commit::

    git archive 2c221ed adapters/trl bench/trl_rollout.py | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/adapters/trl python /tmp/old/bench/trl_rollout.py

    python bench/trl_rollout.py [--env game:GuessTheNumber-v0-easy] [--steps 6] [--batch 16]

``--per-turn`` measures the rollout alone instead (no model, no TRL step): adapter
milliseconds per episode turn at 1, 16 and 64 turns with a trivial policy answering
precomputed ids; ``--old /tmp/old`` adds the pre-engine adapter from that export, side by side::

    python bench/trl_rollout.py --per-turn --old /tmp/old
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, build_tiny_tokenizer, make_prompt_dataset
from transformers.trainer_callback import PrinterCallback

ANSWER = "My guess is 0"  # always wrong: episodes run to their turn limit


def _new_ms_per_turn(tokenizer: Any, turns: int, episodes: int) -> float:
    from types import SimpleNamespace

    from gem_trl import GemRollout

    from gem_core.episode import Generation, TurnRequest

    answer = [*tokenizer.encode(ANSWER, add_special_tokens=False), tokenizer.eos_token_id]
    rollout = GemRollout(max_turn_tokens=16, max_turns=turns, env_kwargs={"max_turns": turns + 1})
    rollout.setup(SimpleNamespace(processing_class=tokenizer, chat_template_kwargs={}, max_completion_length=1 << 20))

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        return [Generation(token_ids=list(answer)) for _ in requests]

    sessions = rollout.play([("core:NumberGuess-v0", s) for s in range(episodes)], generate)
    started = time.perf_counter()
    rollout.to_trl(sessions)
    adapter = rollout.last_timings.adapter + time.perf_counter() - started
    return 1000 * adapter / (turns * episodes)


def _old_ms_per_turn(old_root: str, tokenizer: Any, turns: int, episodes: int) -> float:
    path = os.path.join(old_root, "adapters", "trl", "gem_trl", "rollout.py")
    spec = importlib.util.spec_from_file_location("gem_trl_before_engine", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    answer = [*tokenizer.encode(ANSWER, add_special_tokens=False), tokenizer.eos_token_id]
    rollout = module.GemRollout(max_turn_tokens=16, max_turns=turns, env_kwargs={"max_turns": turns + 1})

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], None]]:
        return [(list(answer), None) for _ in contexts]

    episodes_played = rollout.play([("core:NumberGuess-v0", s) for s in range(episodes)], generate, tokenizer, 1 << 20)
    started = time.perf_counter()
    rollout.to_trl(episodes_played)
    adapter = rollout.last_timings.adapter + time.perf_counter() - started
    return 1000 * adapter / (turns * episodes)


def per_turn(old_root: str | None, episodes: int, repeats: int) -> None:
    """Adapter ms per episode turn at 1, 16 and 64 turns (new, and the pre-engine adapter if given)."""
    tokenizer = build_tiny_tokenizer()
    print(
        f"{episodes} episodes per rollout, median of {repeats}; adapter ms per episode turn (policy and env excluded)"
    )
    print(
        f"{'turns':>6} {'engine adapter':>15}" + (f" {'before (2c221ed)':>17} {'before/now':>11}" if old_root else "")
    )
    for turns in (1, 16, 64):
        now = statistics.median(_new_ms_per_turn(tokenizer, turns, episodes) for _ in range(repeats))
        line = f"{turns:>6} {now:>15.3f}"
        if old_root:
            before = statistics.median(_old_ms_per_turn(old_root, tokenizer, turns, episodes) for _ in range(repeats))
            line += f" {before:>17.3f} {before / now:>10.1f}x"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="core:NumberGuess-v0")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16, help="episodes per step")
    parser.add_argument("--turn-tokens", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64, help="model width (64 = the tiny test model)")
    parser.add_argument("--per-turn", action="store_true", help="time the rollout alone at 1, 16, 64 turns")
    parser.add_argument("--old", default=None, help="with --per-turn: an export of commit 2c221ed to compare")
    parser.add_argument("--repeats", type=int, default=5, help="with --per-turn: rollouts per setting")
    args = parser.parse_args()
    warnings.simplefilter("ignore", FutureWarning)
    if args.per_turn:
        per_turn(args.old, 8, args.repeats)
        return

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=args.hidden)
    with tempfile.TemporaryDirectory() as out:
        config = GemGRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            max_steps=args.steps + 1,
            per_device_train_batch_size=args.batch,
            num_generations=4,
            max_turns=args.max_turns,
            max_turn_tokens=args.turn_tokens,
            max_completion_length=1024,
            seed=0,
        )
        trainer = GemGRPOTrainer(
            model=model,
            args=config,
            train_dataset=make_prompt_dataset(args.env, (args.steps + 1) * args.batch),
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
    logs = [e for e in trainer.state.log_history if "step_time" in e][1:]  # drop the warm-up step

    def median(key: str) -> float:
        return statistics.median(e.get(key, 0.0) for e in logs)

    step = median("step_time")
    parts = {
        "generate": median("gem/time_generate"),
        "env": median("gem/time_env"),
        "adapter": median("gem/time_adapter") + median("gem/time_advantages"),
    }
    parts["trl (logprobs, loss, update)"] = step - sum(parts.values())
    turns = median("gem/num_turns")
    print(
        f"env {args.env}, {args.batch} episodes/step, {turns:.2f} turns/episode, hidden {args.hidden}, "
        f"{len(logs)} measured steps, {wall:.1f}s wall"
    )
    print(f"{'part':<30} {'median s/step':>14} {'share':>7}")
    for name, seconds in parts.items():
        print(f"{name:<30} {seconds:>14.4f} {seconds / step:>7.1%}")
    print(f"{'step':<30} {step:>14.4f} {1:>7.0%}")
    per_turn_ms = 1000 * parts["adapter"] / max(args.batch * turns, 1)
    print(
        f"adapter work per episode turn: {per_turn_ms:.2f} ms; env+adapter share of the step: "
        f"{(parts['env'] + parts['adapter']) / step:.1%}"
    )


if __name__ == "__main__":
    main()
