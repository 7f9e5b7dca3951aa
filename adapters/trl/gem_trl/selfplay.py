"""Self-play on the CPU: a tiny model, built from a config, plays Kuhn Poker against itself and gets better.

``bash scripts/selfplay_demo.sh`` runs ``python -m gem_trl.selfplay``. Nothing is downloaded: the
tokenizer is trained in code on the game's text and the model is a small Qwen2 with random weights
(:mod:`gem_trl.tiny`, as the single-agent demo). A short supervised warm-up on **random legal moves**
(never the reference player's) teaches it the answer format, so it starts near a random player.
Then every RL step plays ``--games`` games with the same model in both seats
(:func:`gem_core.multiagent.engine.play_multiagent_many`: one trajectory per seat, token in / token
out, every game's requests batched into one forward), computes role-conditioned advantages
(:mod:`gem_core.rl.roles`: ReBN per seat by default, GRPO per (start state, seat), or SPIRAL's
per-seat moving baseline) and takes one policy-gradient step on the generated tokens.

Why not ``GemGRPOTrainer``: TRL's rollout hook maps one prompt to one completion, while a self-play
game yields one trajectory per seat with a per-seat baseline; fitting that in would change the
adapter's internals. The loop here is short and on-policy (one update per batch of fresh games,
so the plain policy gradient ``-A * log p`` is exact; no ratio or clipping is needed).

Before training, every ``--eval-every`` steps and after, the model plays ``--eval-games`` games
against a random player and against the scripted reference player (each seat half the time, the
same deals every time), greedy and sampled; ``metrics.jsonl`` gets one record per RL step
(``"kind": "train"``) and per evaluation (``"kind": "eval"``: wins, draws, losses, the win rate
with its 95% Wilson interval, mean chips), ``metrics.png`` the win rates with their intervals.

    python -m gem_trl.selfplay --seed 1
    python -m gem_trl.selfplay --estimator spiral --steps 80 --output-dir runs/selfplay-spiral
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["GAMES", "OPPONENTS", "BatchedSampler", "evaluate", "main", "plot_selfplay", "wilson_interval"]

#: The games the demo plays: its multi-agent id and the single-agent id whose random legal moves warm up the format.
GAMES = {
    "kuhn_poker": ("multiagent:KuhnPoker-v0", "multiagent:KuhnPoker-v0-vs-random"),
}
#: The opponents of the evaluation.
OPPONENTS = ("random", "scripted")
#: ``--estimator`` choices.
ESTIMATORS = ("role_rebn", "role_grpo", "spiral")
#: First env seed of the evaluation deals (the same before and after training: paired comparisons).
EVAL_SEED = 900_000_000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gem_trl.selfplay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, the warm-up, the deals and the sampling")
    parser.add_argument("--game", default="kuhn_poker", choices=sorted(GAMES), help="the game played against itself")
    parser.add_argument("--steps", type=int, default=10, help="RL steps (one policy-gradient update each)")
    parser.add_argument("--games", type=int, default=32, help="self-play games per RL step (two trajectories each)")
    parser.add_argument("--group", type=int, default=4, help="games per deal (start state): role_grpo's groups")
    parser.add_argument("--estimator", default="role_rebn", choices=ESTIMATORS, help="role-conditioned advantage")
    parser.add_argument("--alpha", type=float, default=0.95, help="spiral: decay of the per-seat moving baseline")
    parser.add_argument("--lr", type=float, default=1e-3, help="RL learning rate (AdamW)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of self-play")
    parser.add_argument("--turn-tokens", type=int, default=4, help="tokens the model may generate per turn")
    parser.add_argument("--hidden", type=int, default=64, help="width of the tiny model")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the tiny model")
    parser.add_argument("--warmup-steps", type=int, default=150, help="supervised steps on random legal moves")
    parser.add_argument("--warmup-batch", type=int, default=8, help="episodes per warm-up step")
    parser.add_argument("--warmup-lr", type=float, default=3e-3, help="learning rate of the warm-up")
    parser.add_argument("--eval-games", type=int, default=100, help="games per evaluation (opponent x greedy/sampled)")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N RL steps too (0: before/after)")
    parser.add_argument("--request-timeout", type=float, default=120.0, help="seconds one batched request may take")
    parser.add_argument("--output-dir", default="runs/selfplay", help="metrics.jsonl and metrics.png go here")
    args = parser.parse_args(argv)
    for name in ("steps", "games", "group", "turn_tokens", "eval_games"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.games % args.group:
        parser.error(f"--games ({args.games}) must be a multiple of --group ({args.group})")
    return args


def wilson_interval(wins: int, games: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a win rate (95% for the default ``z``); ``(0, 1)`` for no games."""
    if games <= 0:
        return 0.0, 1.0
    rate = wins / games
    centre = (rate + z * z / (2 * games)) / (1 + z * z / games)
    half = z * math.sqrt(rate * (1 - rate) / games + z * z / (4 * games * games)) / (1 + z * z / games)
    return max(0.0, centre - half), min(1.0, centre + half)


class BatchedSampler:
    """An async ``generate`` that answers every request waiting together with one batched forward per token.

    Each request's tokens are drawn from its own ``torch.Generator``, seeded from the run's seed and
    the request's episode and turn, so a game's samples do not depend on which requests shared its
    batch. ``greedy`` takes the most likely token instead.

    Args:
        model: The causal LM (evaluated without gradients).
        tokenizer: Its tokenizer (``pad_token_id``, ``eos_token_id``).
        max_tokens: Most tokens per turn (a request's own ``max_tokens`` may lower it).
        temperature: Sampling temperature.
        greedy: Take the argmax token.
        seed: Mixed into every request's generator seed.
        wait_s: How long a request waits for others to join its batch.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        seed: int = 0,
        wait_s: float = 0.005,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_tokens, self.temperature, self.greedy, self.seed = max_tokens, temperature, greedy, seed
        self.wait_s = wait_s
        self.pending: list[tuple[Any, asyncio.Future[Any]]] = []
        self.flush_handle: asyncio.TimerHandle | None = None
        self.batches = 0

    async def __call__(self, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.pending.append((request, future))
        if self.flush_handle is None:
            self.flush_handle = loop.call_later(self.wait_s, self._flush)
        return await future

    def _flush(self) -> None:
        self.flush_handle = None
        batch = [(r, f) for r, f in self.pending if not f.done()]  # a cancelled request is dropped
        self.pending = []
        if not batch:
            return
        self.batches += 1
        try:
            answers = self.sample([r for r, _ in batch])
        except Exception as exc:  # every request of the batch gets the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)

    def sample(self, requests: Sequence[Any]) -> list[Any]:
        """Generate for ``requests`` (token mode) in one batch; one :class:`Generation` each."""
        import torch

        from gem_core.episode import Generation

        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        budgets = [min(self.max_tokens, r.max_tokens or self.max_tokens) for r in requests]
        generators = []
        for request in requests:
            key = request.request_id.rsplit("/", 1)[0]  # the episode and turn, not the process-wide serial
            generators.append(torch.Generator().manual_seed(zlib.crc32(f"{self.seed}|{key}".encode())))
        outputs: list[list[int]] = [[] for _ in requests]
        live = [i for i, b in enumerate(budgets) if b > 0]
        with torch.no_grad():
            while live:
                rows = [list(requests[i].prompt_ids) + outputs[i] for i in live]
                width = max(len(r) for r in rows)
                ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for j, row in enumerate(rows):  # left padding: every row's next token at the last position
                    ids[j, width - len(row) :] = torch.tensor(row)
                    mask[j, width - len(row) :] = 1
                positions = (mask.cumsum(-1) - 1).clamp(min=0)
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1, :]
                still = []
                for j, i in enumerate(live):
                    if self.greedy:
                        token = int(logits[j].argmax())
                    else:
                        probs = torch.softmax(logits[j].float() / self.temperature, dim=-1)
                        token = int(torch.multinomial(probs, 1, generator=generators[i]))
                    outputs[i].append(token)
                    if token != eos and len(outputs[i]) < budgets[i]:
                        still.append(i)
                live = still
        return [
            Generation(token_ids=out, finish_reason="stop" if out and out[-1] == eos else "length") for out in outputs
        ]


def _play(engine: Any, jobs: list[Any], policies: Any, timeout: float) -> list[Any]:
    from gem_core.multiagent.engine import play_multiagent_many

    return asyncio.run(play_multiagent_many(engine, jobs, policies, request_timeout=timeout))


def evaluate(
    engine: Any,
    make_env: Callable[[], Any],
    sampler: BatchedSampler,
    opponent: Callable[..., str],
    *,
    games: int,
    timeout: float = 120.0,
    first_seed: int = EVAL_SEED,
) -> dict[str, Any]:
    """Play ``games`` games of the model against ``opponent``, the model in each seat half the time.

    Returns:
        ``games``, ``wins``, ``draws``, ``losses``, ``failed`` (episodes that raised), ``win_rate``,
        ``ci95`` (Wilson) and ``mean_return`` (the model seat's mean reward: chips in Kuhn Poker).
    """
    from gem_core.multiagent.engine import MultiAgentJob, Scripted

    envs = [make_env() for _ in range(games)]
    seats = envs[0].possible_agents
    jobs = [
        MultiAgentJob(env, seed=first_seed + i // len(seats), episode_id=f"eval/game{i}") for i, env in enumerate(envs)
    ]
    results = []
    for seat in seats:  # one call per model seat: its policy mapping is shared by the call's episodes
        chosen = [k for k in range(games) if seats[k % len(seats)] == seat]
        policies = {a: sampler if a == seat else Scripted(opponent) for a in seats}
        results += [(seat, r) for r in _play(engine, [jobs[k] for k in chosen], policies, timeout)]
    for env in envs:
        env.close()
    outcomes = [r.outcomes.get(seat) for seat, r in results if r.error is None]
    wins, draws = outcomes.count("win"), outcomes.count("draw")
    played = len(outcomes)
    return {
        "games": played,
        "wins": wins,
        "draws": draws,
        "losses": outcomes.count("loss"),
        "failed": games - played,
        "win_rate": wins / played if played else float("nan"),
        "ci95": list(wilson_interval(wins, played)),
        "mean_return": sum(r.returns[seat] for seat, r in results if r.error is None) / max(1, played),
    }


def policy_gradient_step(model: Any, optimizer: Any, sequences: Sequence[Any], pad_id: int) -> float:
    """One update of ``-A * log p`` averaged over every generated token of the batch (on-policy: exact)."""
    import torch

    width = max(s.num_tokens for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    loss_mask = torch.zeros((len(sequences), width), dtype=torch.float32)
    advantages = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, s in enumerate(sequences):
        ids[row, : s.num_tokens] = torch.from_numpy(s.input_ids)
        mask[row, : s.num_tokens] = 1
        loss_mask[row, : s.num_tokens] = torch.from_numpy(s.loss_mask).float()
        advantages[row, : s.num_tokens] = torch.from_numpy(s.token_advantages).float()
    model.train()
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # token t from context < t
    weights = loss_mask[:, 1:]
    loss = -(advantages[:, 1:] * logp * weights).sum() / weights.sum().clamp(min=1.0)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return float(loss.detach())


def plot_selfplay(records: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Win rate against each opponent (greedy and sampled, 95% intervals) per evaluation, and self-play per step."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    evals = [r for r in records if r["kind"] == "eval"]
    for opponent, colour in zip(OPPONENTS, ("tab:blue", "tab:red"), strict=True):
        for mode, style in (("greedy", "-"), ("sampled", "--")):
            points = [r for r in evals if r["opponent"] == opponent and r["mode"] == mode]
            if not points:
                continue
            steps = [r["step"] for r in points]
            rates = [r["win_rate"] for r in points]
            errors = [[r["win_rate"] - r["ci95"][0] for r in points], [r["ci95"][1] - r["win_rate"] for r in points]]
            top.errorbar(
                steps, rates, yerr=errors, color=colour, linestyle=style, marker="o", capsize=3,
                label=f"vs {opponent}, {mode}",
            )  # fmt: skip
    top.set_ylabel("win rate (95% CI)")
    top.set_ylim(0, 1)
    top.grid(alpha=0.3)
    top.legend(fontsize="small", loc="lower right")
    train = [r for r in records if r["kind"] == "train"]
    bottom.plot([r["step"] for r in train], [r["format_errors"] for r in train], label="self-play forfeits per turn")
    bottom.plot([r["step"] for r in train], [r["first_seat_return"] for r in train], label="first seat's mean return")
    bottom.set_xlabel("RL step")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize="small")
    if title:
        top.set_title(title)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the demo; returns the records it wrote to ``metrics.jsonl``."""
    args = parse_args(argv)
    import numpy as np
    import torch
    from gem_multiagent.versus import random_player, scripted_players

    import gem_core
    from gem_core.episode import EpisodeEngine
    from gem_core.multiagent.engine import MultiAgentJob
    from gem_core.rl.layouts import episode_to_sequence
    from gem_core.rl.roles import RoleBaseline, role_grpo_advantages, role_rebn_advantages
    from gem_trl.tiny import build_tiny_model, build_tiny_tokenizer, warm_up

    env_id, warmup_id = GAMES[args.game]
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # torch's threads spin against each other on a busy CPU: one is faster there
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = output_dir / "metrics.jsonl"
    metrics_path.write_text("")
    records: list[dict[str, Any]] = []

    def record(entry: dict[str, Any]) -> None:
        records.append(entry)
        with metrics_path.open("a") as out:
            out.write(json.dumps(entry) + "\n")

    print(f"seed {args.seed}; {env_id} self-play; {args.steps} steps of {args.games} games; {args.estimator}")
    started = time.perf_counter()
    tokenizer = build_tiny_tokenizer(warmup_id)
    model = build_tiny_model(tokenizer, seed=args.seed, hidden_size=args.hidden, num_layers=args.layers)
    max_turns = 2  # a Kuhn Poker seat acts at most twice (check, then call or fold a bet)
    losses = warm_up(
        model,
        tokenizer,
        warmup_id,
        steps=args.warmup_steps,
        learning_rate=args.warmup_lr,
        batch_size=args.warmup_batch,
        max_turns=max_turns,
        seed=10_000 * args.seed,
    )
    model.eval()
    print(f"warm-up: {len(losses)} steps on random legal moves, loss {losses[0]:.2f} -> {losses[-1]:.2f}", flush=True)

    engine = EpisodeEngine(tokenizer, max_turns=max_turns, max_turn_tokens=args.turn_tokens)
    scripted = scripted_players(args.game)
    opponents = {"random": random_player, "scripted": lambda env, agent, news: scripted[agent](env, agent, news)}
    sampled = BatchedSampler(
        model, tokenizer, max_tokens=args.turn_tokens, temperature=args.temperature, seed=args.seed
    )
    greedy = BatchedSampler(model, tokenizer, max_tokens=args.turn_tokens, greedy=True)

    def run_evals(step: int, when: str) -> None:
        for opponent in OPPONENTS:
            for mode, sampler in (("greedy", greedy), ("sampled", sampled)):
                numbers = evaluate(
                    engine,
                    lambda: gem_core.make(env_id),
                    sampler,
                    opponents[opponent],
                    games=args.eval_games,
                    timeout=args.request_timeout,
                )
                record({"kind": "eval", "step": step, "when": when, "opponent": opponent, "mode": mode, **numbers})
                low, high = numbers["ci95"]
                print(
                    f"  {when:>6} step {step:>3}: vs {opponent:<8} {mode:<7} win {numbers['win_rate']:.3f} "
                    f"[{low:.3f}, {high:.3f}]  mean return {numbers['mean_return']:+.3f}  ({numbers['games']} games)",
                    flush=True,
                )

    run_evals(0, "before")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    baseline = RoleBaseline(alpha=args.alpha)
    envs = [gem_core.make(env_id) for _ in range(args.games)]
    for step in range(1, args.steps + 1):
        tick = time.perf_counter()
        first_seed = 1_000_000 * (args.seed + 1) + step * args.games
        jobs = [
            MultiAgentJob(env, seed=first_seed + i // args.group, env_id=env_id, episode_id=f"rl{step}/game{i}")
            for i, env in enumerate(envs)
        ]
        results = _play(engine, jobs, sampled, args.request_timeout)
        episodes = [e for r in results if r.error is None for e in r.episodes.values()]
        if args.estimator == "role_rebn":
            advantages = role_rebn_advantages(episodes)
        elif args.estimator == "role_grpo":
            advantages = role_grpo_advantages(episodes)
        else:
            advantages = baseline.advantages(episodes)
        sequences = [episode_to_sequence(e, advantages=a) for e, a in zip(episodes, advantages, strict=True)]
        loss = policy_gradient_step(model, optimizer, sequences, tokenizer.pad_token_id)
        turns = [t for e in episodes for t in e.turns]
        first = envs[0].possible_agents[0]
        record(
            {
                "kind": "train",
                "step": step,
                "loss": loss,
                "games": len(results),
                "failed": sum(r.error is not None for r in results),
                "trajectories": len(episodes),
                "format_errors": sum(bool(t.info.get("format_error") or t.info.get("illegal_move")) for t in turns)
                / max(1, len(turns)),
                "first_seat_return": sum(r.returns[first] for r in results) / len(results),
                "mean_abs_advantage": float(np.mean([abs(float(a[0])) for a in advantages if a.size])),
                "seconds": round(time.perf_counter() - tick, 2),
            }
        )
        last = records[-1]
        print(
            f"step {step:>3}/{args.steps}  loss {loss:+.4f}  forfeits/turn {last['format_errors']:.3f}  "
            f"first seat {last['first_seat_return']:+.3f}  ({last['seconds']:.1f}s)",
            flush=True,
        )
        if args.eval_every and step % args.eval_every == 0 and step != args.steps:
            run_evals(step, "during")
    run_evals(args.steps, "after")
    for env in envs:
        env.close()
    plot = plot_selfplay(records, output_dir / "metrics.png", title=f"{env_id} self-play, seed {args.seed}")
    print(f"wrote {metrics_path} and {plot} ({time.perf_counter() - started:.0f}s)")
    return records


if __name__ == "__main__":
    main()
