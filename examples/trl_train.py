"""Train an LLM agent on a gem game with TRL's GRPOTrainer and per-turn ReBN advantages.

Run it as it is to train a tiny model, built here from a config (nothing is downloaded),
for a few steps on the CPU; it prints one line per step with the mean episode reward:

    python examples/trl_train.py
    python examples/trl_train.py --env core:NumberGuess-v0 --steps 8 --estimator grpo

Point ``--model`` at a local Hugging Face checkpoint (or a hub id, if you are online) to
train a real model; add ``--use-vllm`` on a GPU machine to generate with vLLM.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL 1.16

from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, build_tiny_tokenizer, make_prompt_dataset
from gem_trl.tiny import warm_up
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="game:GuessTheNumber-v0-easy", help="registered env id (see `gem list`)")
    parser.add_argument("--model", default=None, help="model path or id; default: a tiny random Qwen2 built locally")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps")
    parser.add_argument("--batch", type=int, default=8, help="episodes per step")
    parser.add_argument("--generations", type=int, default=4, help="episodes per start state (TRL's num_generations)")
    parser.add_argument("--estimator", choices=["rebn", "grpo"], default="rebn")
    parser.add_argument("--gamma", type=float, default=0.9, help="per-turn discount")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=12, help="tokens the model may generate per turn")
    parser.add_argument("--completion-tokens", type=int, default=512, help="token budget of a whole episode")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=40,
        help="tiny model only: supervised steps on random legal moves first, to learn the answer format",
    )
    parser.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU, `pip install trl[vllm]`)")
    parser.add_argument("--output-dir", default="runs/trl_train")
    return parser.parse_args()


class PrintRewardPerStep(TrainerCallback):
    """One line per optimizer step: reward, success, turns, loss and where the time went."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        columns = ("step", 9), ("reward", 8), ("success", 8), ("turns", 6), ("loss", 9), ("gen s", 6), ("env s", 6)
        print(" ".join(f"{name:>{width}}" for name, width in (*columns, ("gem s", 6), ("elapsed", 8))))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not logs or "reward" not in logs:
            return
        print(
            f"{state.global_step:>4}/{state.max_steps:<4} {logs['reward']:>8.3f} {logs.get('gem/success', 0):>8.2f} "
            f"{logs.get('gem/num_turns', 0):>6.2f} {logs.get('loss', float('nan')):>9.4f} "
            f"{logs.get('gem/time_generate', 0):>6.2f} {logs.get('gem/time_env', 0):>6.3f} "
            f"{logs.get('gem/time_adapter', 0):>6.3f} {time.perf_counter() - self.started:>7.1f}s",
            flush=True,
        )


def main() -> None:
    args = parse_args()

    # 1. The policy. By default a 2-layer Qwen2 with random weights and a BPE tokenizer trained in code:
    #    it plays badly, but every part of training runs for real in seconds on a CPU. Random weights never
    #    write a well-formed move, so a short supervised warm-up on random legal moves teaches the format first.
    if args.model is None:
        tokenizer = build_tiny_tokenizer()
        model: Any = build_tiny_model(tokenizer, seed=0)
        if args.warmup_steps > 0:
            started = time.perf_counter()
            losses = warm_up(model, tokenizer, args.env, steps=args.warmup_steps)
            print(
                f"warm-up: {len(losses)} supervised steps on random legal moves, loss {losses[0]:.2f} -> "
                f"{losses[-1]:.2f} ({time.perf_counter() - started:.1f}s)"
            )
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = args.model  # GRPOTrainer loads it

    # 2. The data: no dataset file, just start states. Each row is one (env id, seed); TRL repeats each row
    #    `--generations` times, and the rollout plays one whole episode per repeat.
    dataset = make_prompt_dataset(args.env, seeds=max(1, args.steps * args.batch // args.generations))

    # 3. The settings: TRL's GRPOConfig plus the episode and advantage settings of gem.
    config = GemGRPOConfig(
        output_dir=args.output_dir,
        advantage_estimator=args.estimator,
        gamma=args.gamma,
        max_turns=args.max_turns,
        max_turn_tokens=args.turn_tokens,
        max_completion_length=args.completion_tokens,
        per_device_train_batch_size=args.batch,
        num_generations=args.generations,
        max_steps=args.steps,
        learning_rate=args.lr,
        loss_type="dr_grpo",  # a constant normaliser: every token of every turn weighs the same
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_vllm=args.use_vllm,
        use_cpu=args.model is None,
        bf16=False if args.model is None else None,
        seed=0,
        disable_tqdm=True,  # PrintRewardPerStep shows the progress
    )

    # 4. The trainer: GRPOTrainer whose rollouts are gem episodes and whose advantages are per-turn ReBN.
    trainer = GemGRPOTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[PrintRewardPerStep()],
    )
    trainer.remove_callback(PrinterCallback)  # our one line per step replaces the raw log dicts

    print(f"training on {args.env} with {args.estimator}, {args.batch} episodes per step")
    trainer.train()


if __name__ == "__main__":
    main()
