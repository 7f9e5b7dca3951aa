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
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, build_tiny_tokenizer, make_prompt_dataset
from transformers.trainer_callback import PrinterCallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="core:NumberGuess-v0")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16, help="episodes per step")
    parser.add_argument("--turn-tokens", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64, help="model width (64 = the tiny test model)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", FutureWarning)

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
