"""The README's demo: a tiny model, built here from a config, learns a game with TRL and ReBN on a CPU.

``bash scripts/demo.sh`` runs ``python -m gem_trl.demo``. Nothing is downloaded: the
tokenizer is trained in code on the game's own text and the model is a small Qwen2 with
random weights. A short supervised warm-up on **random legal moves** (never the
expert's) teaches it the answer format, so it starts at chance; then ``GemGRPOTrainer``
trains it with per-turn ReBN advantages (``--estimator grpo``: TRL's own GRPO advantages),
one progress line per step. At the end it writes ``metrics.jsonl`` (one record per step),
``metrics.png`` (reward, success and turns per step) and prints the first fifth of the steps
against the last fifth.

The default game is the Tower of Hanoi with two disks in five turns (random legal moves
solve it about 3% of the time; three moves do it): the policy has to find the solution by
trial and keep it. ``--env``/``--env-kwargs`` pick any other game; see docs/trl.md for
what a model this small learns in minutes on a CPU and what it does not (GuessTheNumber:
reading the hints takes longer than the demo's budget).

    python -m gem_trl.demo --seed 1
    python -m gem_trl.demo --steps 40 --output-dir runs/demo
    python -m gem_trl.demo --env game:GuessTheNumber-v0-easy --steps 200
    python -m gem_trl.demo --estimator grpo             # the same run with TRL's GRPO advantages
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL 1.16

__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_ENV_KWARGS",
    "ESTIMATORS",
    "fifths",
    "main",
    "plot_metrics",
    "read_metrics",
    "resolve_env",
]

#: The demo's game, and its settings (used when ``--env`` is left at its default).
DEFAULT_ENV = "game:TowerofHanoi-v0-easy"
DEFAULT_ENV_KWARGS: dict[str, Any] = {"num_disks": 2, "max_turns": 5}

#: ``--estimator`` choices: what ``GemGRPOConfig.advantage_estimator`` accepts (not imported: keeps ``--help`` light).
ESTIMATORS = ("rebn", "grpo")

#: The per-step numbers the demo records, under TRL's log names.
LOGGED = {"reward": "reward", "success": "gem/success", "turns": "gem/num_turns", "loss": "loss"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gem_trl.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, the warm-up, the env seeds and TRL")
    parser.add_argument("--env", default=DEFAULT_ENV, help="registered env id (see `gem list`)")
    parser.add_argument(
        "--env-kwargs",
        default=None,
        help=f"env constructor overrides as JSON; default: {json.dumps(DEFAULT_ENV_KWARGS)} for {DEFAULT_ENV}, "
        "none for another --env",
    )
    parser.add_argument("--steps", type=int, default=64, help="RL optimizer steps")
    parser.add_argument("--batch", type=int, default=32, help="episodes per step")
    parser.add_argument("--generations", type=int, default=8, help="episodes per start state (TRL's num_generations)")
    parser.add_argument(
        "--estimator",
        default="rebn",
        choices=ESTIMATORS,
        help="rebn: per-turn ReBN advantages; grpo: TRL's own group advantages (one per episode)",
    )
    parser.add_argument("--gamma", type=float, default=0.9, help="per-turn discount of the ReBN returns")
    parser.add_argument("--lr", type=float, default=1e-3, help="RL learning rate")
    parser.add_argument("--loss-type", default="dapo", help="TRL's loss_type (dapo: mean over generated tokens)")
    parser.add_argument("--max-turns", type=int, default=None, help="default: the env's own turn limit")
    parser.add_argument("--turn-tokens", type=int, default=8, help="tokens the model may generate per turn")
    parser.add_argument(
        "--episode-tokens",
        type=int,
        default=1024,
        help="token budget of an episode after its first prompt, env replies included",
    )
    parser.add_argument("--hidden", type=int, default=64, help="width of the tiny model")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the tiny model")
    parser.add_argument("--warmup-steps", type=int, default=200, help="supervised steps on random legal moves")
    parser.add_argument("--warmup-batch", type=int, default=8, help="episodes per warm-up step (4x as many are played)")
    parser.add_argument("--warmup-lr", type=float, default=3e-3, help="learning rate of the warm-up")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the rollouts")
    parser.add_argument(
        "--iterations", type=int, default=1, help="optimizer passes over each batch (TRL's num_iterations)"
    )
    parser.add_argument("--output-dir", default="runs/demo", help="metrics.jsonl and metrics.png go here")
    return parser.parse_args(argv)


def resolve_env(env_id: str, env_kwargs: str | None) -> dict[str, Any]:
    """The env constructor overrides of a run: ``--env-kwargs`` parsed, or the demo's own for its default game.

    Raises:
        ConfigError: ``env_kwargs`` is not a JSON object.
    """
    from gem_core.cli_values import parse_json_object

    if env_kwargs is None:
        return dict(DEFAULT_ENV_KWARGS) if env_id == DEFAULT_ENV else {}
    return parse_json_object(env_kwargs, "--env-kwargs") or {}


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl``, one per step."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def fifths(records: Sequence[dict[str, float]], key: str) -> tuple[float, float]:
    """Mean of ``key`` over the first fifth of the steps and over the last fifth (at least one step each)."""
    if not records:
        raise ValueError("no records: the run logged no step")
    width = max(1, len(records) // 5)
    first = [r[key] for r in records[:width]]
    last = [r[key] for r in records[-width:]]
    return sum(first) / len(first), sum(last) / len(last)


def plot_metrics(records: Sequence[dict[str, float]], path: str | Path, title: str = "") -> Path:
    """Save reward, success and turns per step (raw and a 5-step moving mean) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    figure, axes = plt.subplots(3, 1, figsize=(7, 6.5), sharex=True)
    for axis, key in zip(axes, ("reward", "success", "turns"), strict=True):
        values = [r[key] for r in records]
        smooth = [sum(values[max(0, i - 4) : i + 1]) / len(values[max(0, i - 4) : i + 1]) for i in range(len(values))]
        axis.plot(steps, values, color="tab:blue", alpha=0.35, label="per step")
        axis.plot(steps, smooth, color="tab:blue", label="mean of 5 steps")
        axis.set_ylabel(key)
        axis.grid(alpha=0.3)
    axes[1].set_ylim(-0.02, 1.02)
    axes[0].legend(loc="lower right", fontsize="small")
    axes[-1].set_xlabel("RL step")
    if title:
        axes[0].set_title(title)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _progress_callback(metrics_path: Path) -> Any:
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class ProgressAndMetrics(TrainerCallback):  # type: ignore[misc]
        """A tqdm bar (with ETA), one line per step, and one ``metrics.jsonl`` record per step."""

        def __init__(self) -> None:
            self.records: list[dict[str, float]] = []
            self.bar: Any = None
            self.started = time.perf_counter()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            metrics_path.write_text("")
            self.started = time.perf_counter()
            self.bar = tqdm(total=state.max_steps, desc="RL", unit="step", dynamic_ncols=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if not logs or "reward" not in logs:
                return
            record = {"step": state.global_step}
            record.update({key: float(logs.get(name, float("nan"))) for key, name in LOGGED.items()})
            record["elapsed_s"] = round(time.perf_counter() - self.started, 2)
            self.records.append(record)
            with metrics_path.open("a") as out:
                out.write(json.dumps(record) + "\n")
            self.bar.write(
                f"step {state.global_step:>3}/{state.max_steps}  reward {record['reward']:6.3f}  "
                f"success {record['success']:4.2f}  turns {record['turns']:4.2f}  loss {record['loss']:8.4f}"
            )
            self.bar.set_postfix(success=f"{record['success']:.2f}", refresh=False)
            self.bar.update(1)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.close()

    return ProgressAndMetrics()


def main(argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    """Run the demo; returns the per-step records it wrote to ``metrics.jsonl``."""
    args = parse_args(argv)
    env_kwargs = resolve_env(args.env, args.env_kwargs)
    import numpy as np
    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    import gem_core
    from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, build_tiny_tokenizer, make_prompt_dataset
    from gem_trl.tiny import warm_up

    settings = f" {json.dumps(env_kwargs)}" if env_kwargs else ""
    print(
        f"seed {args.seed}; env {args.env}{settings}; {args.steps} steps of {args.batch} episodes; {args.estimator}",
        flush=True,
    )
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    max_turns = args.max_turns
    if max_turns is None:
        probe = gem_core.make(args.env, **env_kwargs)
        max_turns = int(getattr(probe.unwrapped, "params", probe).max_turns)
        probe.close()

    # 1. The policy: random weights, then the answer format from random legal moves over whole episodes.
    started = time.perf_counter()
    tokenizer = build_tiny_tokenizer(args.env, env_kwargs=env_kwargs)
    model = build_tiny_model(tokenizer, seed=args.seed, hidden_size=args.hidden, num_layers=args.layers)
    losses = warm_up(
        model,
        tokenizer,
        args.env,
        steps=args.warmup_steps,
        learning_rate=args.warmup_lr,
        batch_size=args.warmup_batch,
        max_turns=max_turns,
        seed=10_000 * args.seed,
        env_kwargs=env_kwargs,
    )
    print(
        f"warm-up: {len(losses)} supervised steps on random legal moves, loss {losses[0]:.2f} -> {losses[-1]:.2f} "
        f"({time.perf_counter() - started:.1f}s)",
        flush=True,
    )

    # 2. Start states: one row per env seed, each played `--generations` times; seeds differ per run seed.
    rows = max(1, args.steps * args.batch // args.generations)
    dataset = make_prompt_dataset(args.env, seeds=rows, start_seed=1_000_000 * (args.seed + 1))
    config = GemGRPOConfig(
        output_dir=str(output_dir / "trainer"),
        advantage_estimator=args.estimator,
        gamma=args.gamma,
        max_turns=max_turns,
        max_turn_tokens=args.turn_tokens,
        max_completion_length=args.episode_tokens,
        per_device_train_batch_size=args.batch,
        num_generations=args.generations,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        loss_type=args.loss_type,
        temperature=args.temperature,
        num_iterations=args.iterations,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        disable_tqdm=True,  # our bar below shows the progress
    )
    progress = _progress_callback(output_dir / "metrics.jsonl")
    trainer = GemGRPOTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[progress],
        env_kwargs=env_kwargs,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()

    records: list[dict[str, float]] = progress.records
    plot = plot_metrics(records, output_dir / "metrics.png", title=f"{args.env}{settings}, seed {args.seed}")
    width = max(1, len(records) // 5)
    for label, pick in (("first", 0), ("last ", 1)):
        numbers = {key: fifths(records, key)[pick] for key in ("success", "reward", "turns")}
        print(
            f"{label} fifth ({width} steps): success {numbers['success']:.2f}  reward {numbers['reward']:.3f}  "
            f"turns {numbers['turns']:.2f}"
        )
    print(f"wrote {output_dir / 'metrics.jsonl'} and {plot} ({time.perf_counter() - started:.0f}s)")
    return records


if __name__ == "__main__":
    main()
