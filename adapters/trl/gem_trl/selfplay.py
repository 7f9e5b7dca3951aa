"""Self-play on the CPU: a tiny model, built from a config, plays Kuhn Poker against itself and gets better.

``bash scripts/selfplay_demo.sh`` runs ``python -m gem_trl.selfplay``. Nothing is downloaded: the
tokenizer is trained in code on the game's text and the model is a small Qwen2 with random weights
(:mod:`gem_trl.tiny`, as the single-agent demo). The prompt (``--prompt card``, default) is the env's,
with the seat's card restated at the end of each question (``--prompt full``: the env's alone;
``brief``: without the rules paragraph). A supervised warm-up on **random legal moves** (never the
reference player's; ``--warmup-aggression`` of them bet or call, the rest check or fold) teaches the
answer format, so it starts near a cautious random player: first ``--card-warmup-steps`` on replies
that name the seat's card before the move (``K bet``), which make the model find its card in the
prompt, then ``--warmup-steps`` on bare moves. Then every RL step plays ``--games`` games against a
population (``--opponents``): the scripted player, the random player, and the same model in both
seats (:func:`gem_core.multiagent.engine.play_multiagent_many`: one trajectory per model seat, token
in / token out, every game's requests batched into one forward), computes
advantages (``--estimator infoset``, default: :class:`InfosetBaseline`, a moving baseline per role and
information set; or role-conditioned ones from :mod:`gem_core.rl.roles`: ReBN per role, GRPO per
(deal, role), SPIRAL's per-role moving baseline; a role is the seat, and the seat against each
fixed player) and takes one policy-gradient step on the generated tokens.

Why not ``GemGRPOTrainer``: TRL's rollout hook maps one prompt to one completion, while a self-play
game yields one trajectory per seat with a per-seat baseline; fitting that in would change the
adapter's internals. The loop here is short and on-policy (one update per batch of fresh games,
so the plain policy gradient ``-A * log p`` is exact; no ratio or clipping is needed).

Before training, every ``--eval-every`` steps and after, the model plays ``--eval-games`` games
against a random player and against the scripted reference player (each seat half the time, the
same deals every time), greedy and sampled, and its strategy table (each move's probability per
seat, history and card) is read off the model and valued exactly (:mod:`gem_trl.kuhn_exact`);
``metrics.jsonl`` gets one record per RL step (``"kind": "train"``), per table (``"strategy"``) and
per evaluation (``"eval"``: wins, draws, losses, the win rate with its 95% Wilson interval, chips per
game with its interval, per seat too, and the table's exact values), ``metrics.png`` the four panels.

    python -m gem_trl.selfplay --seed 1
    python -m gem_trl.selfplay --estimator spiral --prompt full --card-warmup-steps 0 --output-dir runs/sp
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
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
ESTIMATORS = ("infoset", "role_rebn", "role_grpo", "spiral")
#: The card warm-up stops once its mean loss over 20 steps is below this: the model names its card
#: (a model that does not sits near 0.6, one that does near 0.2; the moves stay random).
CARD_NAMED_LOSS = 0.35
#: ``--warmup-aggression``'s default: the warm-up's random moves bet or call this often, check or fold the rest.
#: Below a half, so the model starts as a cautious random player whose greedy table is mostly check
#: and fold; at a half the greedy table is a coin toss per information set and can land on "always
#: bet, always call", whose win rate against both opponents no strategy beats (docs/multiagent.md).
DEFAULT_WARMUP_AGGRESSION = 0.3
#: ``--prompt`` choices.
PROMPTS = ("full", "brief", "card")
#: The RL games' opponents (``--opponents``): the model itself in the other seat, or a fixed player.
POPULATION = ("self", *OPPONENTS)
#: ``--opponents``' default: each opponent's share of a step's games.
DEFAULT_OPPONENTS = "self=0.5,scripted=0.25,random=0.25"
#: First env seed of the evaluation deals (the same before and after training: paired comparisons).
EVAL_SEED = 900_000_000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gem_trl.selfplay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, the warm-up, the deals and the sampling")
    parser.add_argument("--game", default="kuhn_poker", choices=sorted(GAMES), help="the game played against itself")
    parser.add_argument("--steps", type=int, default=60, help="RL steps (one policy-gradient update each)")
    parser.add_argument("--games", type=int, default=32, help="self-play games per RL step (two trajectories each)")
    parser.add_argument("--group", type=int, default=4, help="games per deal (start state): role_grpo's groups")
    parser.add_argument("--estimator", default="infoset", choices=ESTIMATORS, help="role-conditioned advantage")
    parser.add_argument("--alpha", type=float, default=0.95, help="spiral: decay of the per-seat moving baseline")
    parser.add_argument(
        "--infoset-alpha", type=float, default=0.9, help="infoset: decay of the per-(role, prompt) moving baseline"
    )
    parser.add_argument("--lr", type=float, default=1e-3, help="RL learning rate (AdamW)")
    parser.add_argument(
        "--opponents",
        type=parse_opponents,
        default=parse_opponents(DEFAULT_OPPONENTS),
        help="the RL games' population: each opponent's share of a step's games, self (the model in both seats), "
        f"scripted and random (default {DEFAULT_OPPONENTS}; shares are normalised, 0 leaves one out)",
    )
    parser.add_argument(
        "--prompt",
        default="card",
        choices=PROMPTS,
        help="full: the env's own; brief: the first message without the rules paragraph (the same in every game); "
        "card: the env's own, with the seat's card restated at the end of every message that asks for a move",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of self-play")
    parser.add_argument("--turn-tokens", type=int, default=4, help="tokens the model may generate per turn")
    parser.add_argument("--hidden", type=int, default=64, help="width of the tiny model")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the tiny model")
    parser.add_argument("--warmup-steps", type=int, default=300, help="supervised steps on random legal moves")
    parser.add_argument("--warmup-batch", type=int, default=8, help="episodes per warm-up step")
    parser.add_argument(
        "--card-warmup-steps",
        type=int,
        default=1000,
        help="most supervised steps, before the warm-up, on replies that name the seat's card then a random move "
        "(in blocks of 100, until the model names its card)",
    )
    parser.add_argument(
        "--card-mix",
        type=float,
        default=0.5,
        help="fraction of the warm-up's games whose replies still name the card (with --card-warmup-steps)",
    )
    parser.add_argument(
        "--warmup-aggression",
        type=float,
        default=DEFAULT_WARMUP_AGGRESSION,
        help="probability that a warm-up move is the aggressive one (bet, or call facing a bet), whatever the card",
    )
    parser.add_argument("--warmup-lr", type=float, default=3e-3, help="learning rate of the warm-up")
    parser.add_argument("--eval-games", type=int, default=1000, help="games per evaluation (opponent x greedy/sampled)")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N RL steps too (0: before/after)")
    parser.add_argument("--request-timeout", type=float, default=120.0, help="seconds one batched request may take")
    parser.add_argument("--output-dir", default="runs/selfplay", help="metrics.jsonl and metrics.png go here")
    args = parser.parse_args(argv)
    for name in ("steps", "games", "group", "turn_tokens", "eval_games"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0.0 <= args.card_mix <= 1.0:
        parser.error(f"--card-mix must be in [0, 1], got {args.card_mix}")
    if args.card_warmup_steps < 0:
        parser.error(f"--card-warmup-steps must be >= 0, got {args.card_warmup_steps}")
    if not 0.0 <= args.warmup_aggression <= 1.0:
        parser.error(f"--warmup-aggression must be in [0, 1], got {args.warmup_aggression}")
    if not 0.0 <= args.infoset_alpha < 1.0:
        parser.error(f"--infoset-alpha must be in [0, 1), got {args.infoset_alpha}")
    if args.games % args.group:
        parser.error(f"--games ({args.games}) must be a multiple of --group ({args.group})")
    return args


def parse_opponents(text: str) -> dict[str, float]:
    """``--opponents``: ``"self=0.5,scripted=0.25,random=0.25"`` to each opponent's share of the games, normalised.

    Opponents not named get no games.

    Raises:
        argparse.ArgumentTypeError: An unknown opponent, one named twice, a share that is no number or
            negative, or shares that add up to 0 (argparse turns it into a usage error naming the option).
    """
    shares: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if name not in POPULATION or not sep:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not OPPONENT=SHARE with OPPONENT one of {', '.join(POPULATION)} "
                f"(e.g. {DEFAULT_OPPONENTS})"
            )
        if name in shares:
            raise argparse.ArgumentTypeError(f"{name!r} is named twice in {text!r}; name each opponent once")
        try:
            shares[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}'s share {value!r} is not a number (e.g. {name}=0.25)") from None
        if not shares[name] >= 0.0:  # NaN too
            raise argparse.ArgumentTypeError(f"{name}'s share must be >= 0, got {value!r}")
    total = sum(shares.values())
    if not 0.0 < total < math.inf:
        raise argparse.ArgumentTypeError(f"the shares in {text!r} add up to {total}; give at least one above 0")
    return {name: shares.get(name, 0.0) / total for name in POPULATION}


def split_games(shares: dict[str, float], games: int) -> dict[str, list[int]]:
    """Which of a step's ``games`` (their indices) each opponent plays: ``shares`` rounded to whole games.

    The largest remainders get the games that rounding down leaves (ties in :data:`POPULATION`'s
    order), so the counts add up to ``games``; the fixed players' games come first, then self-play's.
    """
    exact = {name: shares.get(name, 0.0) * games for name in POPULATION}
    counts = {name: math.floor(value) for name, value in exact.items()}
    left = games - sum(counts.values())
    for name in sorted(POPULATION, key=lambda n: (counts[n] - exact[n], POPULATION.index(n)))[:left]:
        counts[name] += 1
    out: dict[str, list[int]] = {}
    start = 0
    for name in (*OPPONENTS, "self"):
        out[name] = list(range(start, start + counts[name]))
        start += counts[name]
    return out


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
        self.forwards = 0
        self._memo: dict[tuple[int, ...], Any] | None = None

    @contextlib.contextmanager
    def memoized(self) -> Iterator[None]:
        """Within the block, remember the next-token logits of every context, by its token ids.

        A game this small reaches few distinct contexts (Kuhn Poker: one per seat, card and history),
        so a thousand evaluation games need a handful of forwards. The tokens are still drawn from
        each request's own generator; only the forward is skipped. Valid only while the weights do not
        change: the demo opens one block per rollout or evaluation, none around an update.
        """
        self._memo = {}
        try:
            yield
        finally:
            self._memo = None

    def next_token_logits(self, rows: Sequence[Sequence[int]]) -> Any:
        """The model's next-token logits after each row of token ids (one batched forward, left padded)."""
        import torch

        memo = self._memo
        keys = [tuple(row) for row in rows]
        todo = [k for k in dict.fromkeys(keys) if memo is None or k not in memo]
        found: dict[tuple[int, ...], Any] = {}
        if todo:
            pad = self.tokenizer.pad_token_id
            width = max(len(k) for k in todo)
            ids = torch.full((len(todo), width), pad, dtype=torch.long)
            mask = torch.zeros((len(todo), width), dtype=torch.long)
            for j, row in enumerate(todo):  # left padding: every row's next token at the last position
                ids[j, width - len(row) :] = torch.tensor(row)
                mask[j, width - len(row) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # each row counts from 0 at its first real token
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1, :]
            self.forwards += 1
            found = dict(zip(todo, logits, strict=True))
            if memo is not None:
                memo.update(found)
        return torch.stack([found[k] if k in found else memo[k] for k in keys])  # type: ignore[index]

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

        eos = self.tokenizer.eos_token_id
        budgets = [min(self.max_tokens, r.max_tokens or self.max_tokens) for r in requests]
        generators = []
        for request in requests:
            key = request.request_id.rsplit("/", 1)[0]  # the episode and turn, not the process-wide serial
            generators.append(torch.Generator().manual_seed(zlib.crc32(f"{self.seed}|{key}".encode())))
        outputs: list[list[int]] = [[] for _ in requests]
        live = [i for i, b in enumerate(budgets) if b > 0]
        with torch.no_grad():
            while live:
                logits = self.next_token_logits([list(requests[i].prompt_ids) + outputs[i] for i in live])
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
    return _play_groups(engine, [(jobs, policies)], timeout)


def _play_groups(engine: Any, groups: Sequence[tuple[list[Any], Any]], timeout: float) -> list[Any]:
    """Play every group's jobs with its policies, all groups at once (their requests batch together); in order."""
    from gem_core.multiagent.engine import play_multiagent_many

    async def play_all() -> list[Any]:
        done = await asyncio.gather(
            *(play_multiagent_many(engine, jobs, policy, request_timeout=timeout) for jobs, policy in groups if jobs)
        )
        return [r for results in done for r in results]

    return asyncio.run(play_all())


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
        ``ci95`` (Wilson), ``mean_return`` (the model seat's mean reward: chips in Kuhn Poker) and
        ``return_ci95`` (its normal 95% interval); ``per_seat`` has the same (but ``failed``) per model seat.
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
    played = [(seat, r) for seat, r in results if r.error is None]
    out = _tally(played, games)
    out["per_seat"] = {seat: _tally([p for p in played if p[0] == seat], None) for seat in seats}
    return out


def _tally(played: Sequence[tuple[str, Any]], games: int | None) -> dict[str, Any]:
    """Wins, draws, losses, the win rate with its Wilson interval, and the mean return with its normal 95% interval."""
    outcomes = [r.outcomes.get(seat) for seat, r in played]
    returns = [float(r.returns[seat]) for seat, r in played]
    n = len(returns)
    mean = sum(returns) / max(1, n)
    spread = math.sqrt(sum((x - mean) ** 2 for x in returns) / (n - 1)) if n > 1 else float("inf")
    wins = outcomes.count("win")
    out: dict[str, Any] = {
        "games": n,
        "wins": wins,
        "draws": outcomes.count("draw"),
        "losses": outcomes.count("loss"),
        "win_rate": wins / n if n else float("nan"),
        "ci95": list(wilson_interval(wins, n)),
        "mean_return": mean,
        "return_ci95": [mean - 1.96 * spread / math.sqrt(max(1, n)), mean + 1.96 * spread / math.sqrt(max(1, n))],
    }
    if games is not None:
        out["failed"] = games - n
    return out


def brief_kuhn(env: Any) -> Any:
    """Kuhn Poker whose first message drops the rules paragraph: ``You are player_0, your card is K. ...``.

    The rules are the same words in every game, so they tell a model trained from scratch nothing,
    while a tiny model's attention, nearly uniform at first, spreads over them: with them its
    first prompt is about 80 tokens, of which the card is one; without them about 20. The moves,
    the rewards and every later message are the env's own.
    """
    from gem_core.multiagent.wrappers import MultiAgentWrapper

    class BriefKuhnPoker(MultiAgentWrapper):
        def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> Any:
            return {a: "You are " + text.split(" You are ", 1)[-1] for a, text in observations.items()}, infos

    return BriefKuhnPoker(env)


def card_kuhn(env: Any) -> Any:
    """Kuhn Poker whose every message that asks for a move ends by restating the seat's card: ``... (your card: K)``.

    The env says the card once, in the first message: 14 tokens before the first reply, 40 or more
    before a later one (the tiny tokenizer). Restating it at the end of each question puts it a few
    tokens before the reply, at the same distance in every prompt. It adds nothing the seat did not
    know (the prompt is still a function of its information set) and leaves the moves, the rewards
    and the rest of the text the env's own.
    """
    from gem_core.multiagent.wrappers import MultiAgentWrapper

    class CardKuhnPoker(MultiAgentWrapper):
        def _restate(self, observations: dict[str, str]) -> dict[str, str]:
            cards = self.env.unwrapped.cards
            return {
                a: f"{text} (your card: {cards[a]})" if text.endswith("?") else text for a, text in observations.items()
            }

        def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> Any:
            return self._restate(observations), infos

        def _on_step(self, actions: dict[str, str], result: Any) -> Any:
            observations, *rest = result
            return (self._restate(observations), *rest)

    return CardKuhnPoker(env)


class InfosetBaseline:
    """A state-dependent baseline: a moving average of the return per (role, prompt), one per turn.

    A Kuhn Poker seat's prompt is a function of its information set (seat, card, history; checked by
    :func:`kuhn_infoset_prompts`), so keying by the prompt's token ids gives each information set its
    own baseline. ``A_t = G_t - b(role, prompt_t)`` then leaves out the luck of the card: with a K
    every move earns more than with a J, which a per-seat baseline credits to whatever move was
    played. The baseline of a turn is read before this batch moves it (a key first seen takes the
    batch's mean for it), so it does not depend on the turn's own return; then each key moves,
    ``b <- alpha * b + (1 - alpha) * mean(G)`` over the batch's turns with that key. The advantages
    stay in the reward's units (chips): no division by a batch's spread, which blows up when a
    role's returns happen to agree.

    Args:
        alpha: Decay of the moving average, in ``[0, 1)``.
    """

    def __init__(self, alpha: float = 0.9) -> None:
        from gem_core.errors import RLInputError

        if not 0.0 <= alpha < 1.0:
            raise RLInputError(f"alpha must be in [0, 1), got {alpha!r}")
        self.alpha = alpha
        self.baselines: dict[tuple[Any, tuple[int, ...]], float] = {}

    def advantages(self, episodes: Sequence[Any], roles: Sequence[Any]) -> list[Any]:
        """One array per episode, one advantage per turn (undiscounted returns ``G_t``).

        Raises:
            RLInputError: A turn without ``prompt_token_ids`` (the episode engine records them in token
                mode), or not one role per episode.
        """
        import numpy as np

        from gem_core.errors import RLInputError
        from gem_core.rl.returns import batch_returns

        if len(roles) != len(episodes):
            raise RLInputError(f"got {len(roles)} roles for {len(episodes)} episodes; give one per episode")
        returns = batch_returns(list(episodes), 1.0)
        keys: list[list[tuple[Any, tuple[int, ...]]]] = []
        for episode, role in zip(episodes, roles, strict=True):
            if any(t.prompt_token_ids is None for t in episode.turns):
                raise RLInputError(
                    "InfosetBaseline needs each turn's prompt_token_ids (the episode engine's token mode)"
                )
            keys.append([(role, tuple(t.prompt_token_ids)) for t in episode.turns])
        seen: dict[tuple[Any, tuple[int, ...]], list[float]] = {}
        for turn_keys, ret in zip(keys, returns, strict=True):
            for key, value in zip(turn_keys, ret, strict=True):
                seen.setdefault(key, []).append(float(value))
        before = {key: self.baselines.get(key, float(np.mean(values))) for key, values in seen.items()}
        raw = [
            np.array([v - before[k] for k, v in zip(ks, ret, strict=True)])
            for ks, ret in zip(keys, returns, strict=True)
        ]
        for key, values in seen.items():
            self.baselines[key] = self.alpha * before[key] + (1.0 - self.alpha) * float(np.mean(values))
        return raw


def selfplay_warm_up(
    model: Any,
    tokenizer: Any,
    engine: Any,
    make_env: Callable[[], Any],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    say_card: float = 0.0,
    aggression: float = 0.5,
) -> list[float]:
    """Imitate random legal moves in both seats of ``4 * batch_size`` games, on the prompts self-play will see.

    ``say_card``: the fraction of games whose replies name the seat's card first; ``aggression``: how
    often a move is ``bet`` or ``call`` (:func:`warm_up_sequences`).

    Returns:
        The loss of each step (:func:`warm_up_sequences` has the games).
    """
    from gem_trl.tiny import imitate

    sequences = warm_up_sequences(
        tokenizer, engine, make_env, games=4 * batch_size, seed=seed, say_card=say_card, aggression=aggression
    )
    return imitate(
        model, tokenizer, sequences, steps=steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed
    )


def warm_up_sequences(
    tokenizer: Any,
    engine: Any,
    make_env: Callable[[], Any],
    *,
    games: int,
    seed: int,
    say_card: float = 0.0,
    aggression: float = 0.5,
) -> list[Any]:
    """Both seats' token sequences of ``games`` games of random legal moves (env seeds from ``seed``).

    Each move is the aggressive one (``bet``, or ``call`` facing a bet) with probability
    ``aggression`` (0.5: uniform), else the other legal move, whatever the card (drawn from the env's
    generator, so from ``seed``).

    In a ``say_card`` fraction of the games (drawn from ``seed``; 1: all) each reply first names the
    seat's own card, then the move (``K bet``; the env reads the last move word, so the game is the
    same). The moves do not depend on the card: naming it only makes the model find its card in the
    prompt, which a reply that is a random move never asks of it (measured in docs/multiagent.md:
    without it, the tables stay the same for J, Q and K).
    """
    from gem_core.episode import Generation
    from gem_core.multiagent.engine import play_multiagent
    from gem_core.rl.layouts import episode_to_sequence

    sequences = []
    env = make_env()
    naming = random.Random(seed)
    for game in range(games):
        names_card = naming.random() < say_card

        def random_move(request: Any, names_card: bool = names_card) -> Generation:
            legal = env.unwrapped.legal_moves()
            move = AGGRESSIVE[" ".join(env.unwrapped.history)]
            if env.unwrapped.np_random.random() >= aggression:
                (move,) = (m for m in legal if m != move)
            if names_card:
                move = f"{env.unwrapped.cards[env.agent_selection]} {move}"
            return Generation(token_ids=[*tokenizer.encode(move, add_special_tokens=False), tokenizer.eos_token_id])

        played = play_multiagent(engine, env, random_move, seed=seed + game)
        sequences += [episode_to_sequence(e) for e in played.episodes.values()]
    env.close()
    return sequences


#: Every Kuhn Poker move word, as the env reads a reply (its last one of these).
HISTORIES_MOVES = ("check", "bet", "call", "fold")
#: The aggressive move of each Kuhn Poker history: ``bet`` with no bet open, ``call`` facing one.
AGGRESSIVE = {"": "bet", "bet": "call", "check": "bet", "check bet": "call"}


def kuhn_infoset_prompts(engine: Any, make_env: Callable[[], Any]) -> dict[tuple[str, str], list[int]]:
    """The prompt ids the model is given at each Kuhn Poker information set: ``(history, card) -> ids``.

    Plays the three move sequences that reach every history (bet-call, check-check, check-bet-call)
    on every deal and records each request. A seat's prompt must depend only on its card and the
    history (what a strategy table assumes); two deals that give one information set different
    prompts are refused.

    Raises:
        RLInputError: The prompt of an information set differs between deals.
    """
    from gem_core.episode import Generation
    from gem_core.errors import RLInputError
    from gem_core.multiagent.engine import play_multiagent

    env = make_env()
    deals: dict[tuple[str, str], int] = {}
    seed = 0
    while len(deals) < 6:  # the seeds of the six deals
        env.reset(seed=seed)
        cards = env.unwrapped.cards
        deals.setdefault((cards["player_0"], cards["player_1"]), seed)
        seed += 1
    prompts: dict[tuple[str, str], list[int]] = {}
    tokenizer = engine.tokenizer
    for deal, deal_seed in sorted(deals.items()):
        for path in (("bet", "call"), ("check", "check"), ("check", "bet", "call")):
            played: list[str] = []

            def forced(
                request: Any, path: tuple[str, ...] = path, played: list[str] = played, deal: tuple[str, str] = deal
            ) -> Generation:
                key = (" ".join(played), deal[len(played) % 2])
                ids = list(request.prompt_ids)
                if prompts.setdefault(key, ids) != ids:
                    raise RLInputError(
                        f"information set {key} got two different prompts: a prompt shows more than the seat's card"
                    )
                move = path[len(played)]
                played.append(move)
                return Generation(token_ids=[*tokenizer.encode(move, add_special_tokens=False), tokenizer.eos_token_id])

            play_multiagent(engine, env, forced, seed=deal_seed)
    env.close()
    return prompts


def after_own_reply(
    prompts: dict[tuple[str, str], list[int]], card: str, reply: Sequence[int], tokenizer: Any
) -> list[int]:
    """``player_0``'s prompt facing ``check bet`` with ``card`` when its opening reply was ``reply`` (token ids).

    The chat shows a seat its own earlier replies, so this prompt holds the opening reply's tokens:
    ``K check`` and ``check`` make two prompts of one information set. :func:`kuhn_infoset_prompts`
    plays the bare move; this swaps in another reply that makes the same move.

    Raises:
        RLInputError: The recorded prompt does not continue the opening's prompt with the bare move.
    """
    from gem_core.errors import RLInputError

    opening, bare = prompts[("", card)], prompts[("check bet", card)]
    forced = [*tokenizer.encode("check", add_special_tokens=False), tokenizer.eos_token_id]
    if bare[: len(opening) + len(forced)] != [*opening, *forced]:
        raise RLInputError(f"the prompt of ('check bet', {card!r}) does not continue the opening's with its reply")
    return [*opening, *reply, *bare[len(opening) + len(forced) :]]


def kuhn_sampled_table(
    sampler: BatchedSampler, prompts: dict[tuple[str, str], list[int]], *, keep: int = 64, replies: int = 16
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], float]]:
    """The sampling policy's table as games play it: :func:`kuhn_move_probabilities`, ``check bet`` by opening reply.

    ``player_0`` facing ``check bet`` sees its own opening reply, which varies (``check``, ``K check``):
    its row is the mean of its rows after each reply that checked, weighted by that reply's
    probability, over the ``replies`` likeliest ones (the mass of the rest is unresolved).

    Returns:
        The table and each information set's unresolved mass, as :func:`kuhn_move_probabilities`.
    """
    from gem_multiagent._base import last_word

    tokenizer = sampler.tokenizer
    ended: dict[tuple[str, str], list[tuple[float, list[int]]]] = {}
    table, unresolved = kuhn_move_probabilities(sampler, prompts, keep=keep, ended=ended)
    variants: dict[tuple[str, str], list[int]] = {}
    weights: dict[tuple[str, str], list[tuple[float, Any]]] = {}
    for (history, card), found in ended.items():
        if history:
            continue
        checks = [
            (p, ids)
            for p, ids in found
            if last_word(tokenizer.decode(ids, skip_special_tokens=True), HISTORIES_MOVES) == "check"
        ]
        checks.sort(key=lambda pair: -pair[0])
        for i, (p, ids) in enumerate(checks[:replies]):
            variants[(f"check bet#{i}", card)] = after_own_reply(
                prompts, card, [*ids, tokenizer.eos_token_id], tokenizer
            )
            weights.setdefault(("check bet", card), []).append((p, (f"check bet#{i}", card)))
    if variants:
        rows, lost = kuhn_move_probabilities(sampler, variants, keep=keep, history_of=lambda key: "check bet")
        for key, parts in weights.items():
            total = table[("", key[1])].get("check", 0.0)
            covered = sum(p for p, _ in parts)
            if total <= 0.0:
                continue
            table[key] = {m: sum(p * rows[v].get(m, 0.0) for p, v in parts) / total for m in ("call", "fold")}
            unresolved[key] = (sum(p * lost[v] for p, v in parts) + max(0.0, total - covered)) / total
    return table, unresolved


def kuhn_move_probabilities(
    sampler: BatchedSampler,
    prompts: dict[tuple[str, str], list[int]],
    *,
    keep: int = 64,
    ended: dict[tuple[str, str], list[tuple[float, list[int]]]] | None = None,
    history_of: Callable[[tuple[str, str]], str] = lambda key: key[0],
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], float]]:
    """The sampling policy's table: the probability that a sampled reply makes each legal move.

    Sums over every reply the sampler can give (at its temperature, within its token budget), read as
    the env reads it: a reply that ends with the end-of-turn token within the budget and names a legal
    move makes it (any other reply is a forfeit, a cut reply too). The replies are enumerated as a tree
    of token prefixes, one batched forward per depth; per information set only the ``keep`` likeliest
    prefixes of each depth are followed, and the mass of those dropped is returned as unresolved.

    ``ended``, when given, gets each key's replies that made a legal move: ``(probability, token ids)``,
    the end token left out. ``history_of`` reads a key's history (default: its first element).

    Returns:
        The table (``(history, card) -> {move: probability}``) and each information set's unresolved
        mass (counted as a forfeit by the table; 0 for a model whose replies are few).
    """
    import torch
    from gem_multiagent._base import last_word

    from gem_trl.kuhn_exact import HISTORIES

    tokenizer, eos = sampler.tokenizer, sampler.tokenizer.eos_token_id
    table: dict[tuple[str, str], dict[str, float]] = {key: {} for key in prompts}
    unresolved = dict.fromkeys(prompts, 0.0)
    frontier: list[tuple[tuple[str, str], list[int], float]] = [(key, [], 1.0) for key in prompts]
    for depth in range(sampler.max_tokens):
        logits = sampler.next_token_logits([list(prompts[key]) + prefix for key, prefix, _ in frontier])
        probs = torch.softmax(logits.double() / sampler.temperature, dim=-1)
        grown: dict[tuple[str, str], list[tuple[float, list[int]]]] = {key: [] for key in prompts}
        for (key, prefix, p), row in zip(frontier, probs, strict=True):
            done = p * float(row[eos])
            move = last_word(tokenizer.decode(prefix, skip_special_tokens=True), HISTORIES_MOVES)
            if move in HISTORIES[history_of(key)]:
                table[key][move] = table[key].get(move, 0.0) + done
                if ended is not None:
                    ended.setdefault(key, []).append((done, prefix))
            if depth + 1 == sampler.max_tokens:
                continue  # a reply that goes on is cut at the budget: a forfeit
            row = row.clone()
            row[eos] = 0.0
            top = torch.topk(row, min(keep, row.numel()))
            grown[key] += [(p * float(q), [*prefix, int(t)]) for q, t in zip(top.values, top.indices, strict=True)]
            unresolved[key] += p * float(row.sum() - top.values.sum())
        frontier = []
        for key, children in grown.items():
            children.sort(key=lambda child: -child[0])
            unresolved[key] += sum(q for q, _ in children[keep:])
            frontier += [(key, prefix, q) for q, prefix in children[:keep] if q > 0]
        if not frontier:
            break
    return table, unresolved


def kuhn_greedy_moves(
    sampler: BatchedSampler, prompts: dict[tuple[str, str], list[int]]
) -> dict[tuple[str, str], dict[str, float]]:
    """The greedy policy's table: the move its greedy reply makes at each information set (none: a forfeit)."""
    from gem_multiagent._base import last_word

    from gem_core.episode import TurnRequest
    from gem_trl.kuhn_exact import HISTORIES

    keys = list(prompts)
    requests = [
        TurnRequest(episode_index=i, turn=0, prompt_ids=prompts[k], messages=[], max_tokens=None, request_id=f"t{i}/r")
        for i, k in enumerate(keys)
    ]
    table: dict[tuple[str, str], dict[str, float]] = {}
    answers = dict(zip(keys, sampler.sample(requests), strict=True))
    redo = {}  # player_0 facing check-bet sees its own opening reply: the greedy one, not the bare move
    for (history, card), answer in answers.items():
        ids = list(answer.token_ids or [])
        if history or not ids or ids[-1] != sampler.tokenizer.eos_token_id:
            continue
        if last_word(sampler.tokenizer.decode(ids, skip_special_tokens=True), HISTORIES_MOVES) == "check":
            redo[("check bet", card)] = after_own_reply(prompts, card, ids, sampler.tokenizer)
    if redo:
        again = [
            TurnRequest(episode_index=i, turn=0, prompt_ids=ids, messages=[], max_tokens=None, request_id=f"c{i}/r")
            for i, ids in enumerate(redo.values())
        ]
        answers.update(zip(redo, sampler.sample(again), strict=True))
    for key, answer in answers.items():
        text = sampler.tokenizer.decode(answer.token_ids or [], skip_special_tokens=True)
        move = last_word(text, HISTORIES_MOVES)  # the env's reading of a reply
        table[key] = {move: 1.0} if move in HISTORIES[key[0]] else {}
    return table


def strategy_rows(table: dict[tuple[str, str], dict[str, float]]) -> list[dict[str, Any]]:
    """A strategy table as JSON rows: seat, history, card, each legal move's probability and the forfeit's."""
    from gem_trl.kuhn_exact import CARDS, HISTORIES, seat_of

    rows = []
    for history, moves in HISTORIES.items():
        for card in CARDS:
            odds = table[(history, card)]
            row: dict[str, Any] = {"seat": seat_of(history), "history": history, "card": card}
            row.update({m: round(odds.get(m, 0.0), 4) for m in moves})
            row["forfeit"] = round(max(0.0, 1.0 - sum(odds.get(m, 0.0) for m in moves)), 4)
            rows.append(row)
    return rows


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
    """The demo's four panels: win rate, chips per game, the strategy table before and after, self-play per step.

    Win rate and chips per game are against each opponent per evaluation (greedy and sampled, 95% intervals;
    chips also exact, from the strategy table); the table is the sampled policy's, first and last.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    (wins, chips), (table, train_axis) = axes
    evals = [r for r in records if r["kind"] == "eval"]
    for opponent, colour in zip(OPPONENTS, ("tab:blue", "tab:red"), strict=True):
        for mode, style in (("greedy", "-"), ("sampled", "--")):
            points = [r for r in evals if r["opponent"] == opponent and r["mode"] == mode]
            if not points:
                continue
            steps = [r["step"] for r in points]
            label = f"vs {opponent}, {mode}"
            for axis, key, interval in ((wins, "win_rate", "ci95"), (chips, "mean_return", "return_ci95")):
                if not all(interval in r for r in points):
                    continue
                values = [r[key] for r in points]
                errors = [[r[key] - r[interval][0] for r in points], [r[interval][1] - r[key] for r in points]]
                axis.errorbar(
                    steps, values, yerr=errors, color=colour, linestyle=style, marker="o", capsize=3, label=label
                )
            if all("exact_chips" in r for r in points):
                chips.plot(
                    steps, [r["exact_chips"] for r in points], color=colour, linestyle=style, marker="x", alpha=0.5
                )
    wins.set_ylabel("win rate (95% CI)")
    wins.set_ylim(0, 1)
    chips.set_ylabel("chips per game (95% CI; x: exact)")
    for axis in (wins, chips):
        axis.set_xlabel("RL step")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # records from before chips had intervals draw no chips
            axis.legend(fontsize="x-small", loc="lower right")
    strategies = [r for r in records if r["kind"] == "strategy" and r["mode"] == "sampled"]
    if strategies:
        first, last = strategies[0], strategies[-1]
        labels = [f"{row['seat'][-1]}:{row['history'] or 'open'}\n{row['card']}" for row in first["table"]]
        x = list(range(len(labels)))
        for shift, entry, shade in ((-0.2, first, "tab:gray"), (0.2, last, "tab:green")):
            odds = [row[AGGRESSIVE[row["history"]]] for row in entry["table"]]
            table.bar([i + shift for i in x], odds, width=0.4, color=shade, label=f"step {entry['step']}")
        table.set_xticks(x, labels, fontsize=6)
        table.set_ylim(0, 1)
        table.set_ylabel("P(bet or call | seat, history, card)")
        table.legend(fontsize="x-small")
        table.grid(alpha=0.3, axis="y")
    train = [r for r in records if r["kind"] == "train"]
    train_axis.plot([r["step"] for r in train], [r["format_errors"] for r in train], label="forfeits per turn")
    train_axis.plot(
        [r["step"] for r in train], [r["first_seat_return"] for r in train], label="self-play: first seat's return"
    )
    train_axis.set_xlabel("RL step")
    train_axis.grid(alpha=0.3)
    train_axis.legend(fontsize="x-small")
    if title:
        figure.suptitle(title)
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
    from gem_core.multiagent.engine import MultiAgentJob, Scripted
    from gem_core.rl.layouts import episode_to_sequence
    from gem_core.rl.roles import RoleBaseline, role_grpo_advantages, role_rebn_advantages
    from gem_trl.kuhn_exact import random_strategy, scripted_strategy, versus
    from gem_trl.tiny import build_tiny_model, build_tiny_tokenizer

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

    population = ", ".join(f"{name} {share:.2f}" for name, share in args.opponents.items() if share)
    print(f"seed {args.seed}; {env_id}; {args.steps} steps of {args.games} games ({population}); {args.estimator}")
    started = time.perf_counter()
    tokenizer = build_tiny_tokenizer(warmup_id)
    model = build_tiny_model(tokenizer, seed=args.seed, hidden_size=args.hidden, num_layers=args.layers)
    max_turns = 2  # a Kuhn Poker seat acts at most twice (check, then call or fold a bet)
    engine = EpisodeEngine(tokenizer, max_turns=max_turns, max_turn_tokens=args.turn_tokens)

    def make_env() -> Any:
        env = gem_core.make(env_id)
        if args.prompt == "brief":
            return brief_kuhn(env)
        return card_kuhn(env) if args.prompt == "card" else env

    said: list[float] = []
    if args.card_warmup_steps:
        from gem_trl.tiny import imitate

        # the same games for every block (played once); blocks end early once it names its card
        naming = warm_up_sequences(
            tokenizer,
            engine,
            make_env,
            games=4 * args.warmup_batch,
            seed=10_000 * args.seed + 5_000,
            say_card=1.0,
            aggression=args.warmup_aggression,
        )
    while len(said) < args.card_warmup_steps:  # until it names its card (the loss drops): a jump, not a slope
        said += imitate(
            model,
            tokenizer,
            naming,
            steps=min(100, args.card_warmup_steps - len(said)),
            batch_size=args.warmup_batch,
            learning_rate=args.warmup_lr,
            seed=10_000 * args.seed + 5_000,
        )
        if sum(said[-20:]) / len(said[-20:]) < CARD_NAMED_LOSS:
            break
    if said:
        print(f"card warm-up: {len(said)} steps naming the card, loss {said[0]:.2f} -> {said[-1]:.2f}", flush=True)
    losses = selfplay_warm_up(
        model,
        tokenizer,
        engine,
        make_env,
        steps=args.warmup_steps,
        learning_rate=args.warmup_lr,
        batch_size=args.warmup_batch,
        seed=10_000 * args.seed,
        say_card=args.card_mix if args.card_warmup_steps else 0.0,
        aggression=args.warmup_aggression,
    )
    model.eval()
    print(f"warm-up: {len(losses)} steps on random legal moves, loss {losses[0]:.2f} -> {losses[-1]:.2f}", flush=True)

    scripted = scripted_players(args.game)
    opponents = {"random": random_player, "scripted": lambda env, agent, news: scripted[agent](env, agent, news)}
    sampled = BatchedSampler(
        model, tokenizer, max_tokens=args.turn_tokens, temperature=args.temperature, seed=args.seed
    )
    greedy = BatchedSampler(model, tokenizer, max_tokens=args.turn_tokens, greedy=True)

    prompts = kuhn_infoset_prompts(engine, make_env)
    references = {"random": random_strategy(), "scripted": scripted_strategy()}

    def run_evals(step: int, when: str) -> None:
        for mode in ("greedy", "sampled"):
            if mode == "greedy":
                table, unresolved = kuhn_greedy_moves(greedy, prompts), 0.0
            else:
                with sampled.memoized():
                    table, lost = kuhn_sampled_table(sampled, prompts)
                unresolved = max(lost.values())
            exact = {name: versus(table, reference) for name, reference in references.items()}
            rows = strategy_rows(table)
            record(
                {
                    "kind": "strategy",
                    "step": step,
                    "when": when,
                    "mode": mode,
                    "table": rows,
                    "exact": exact,
                    "unresolved": unresolved,
                }
            )
            for opponent in OPPONENTS:
                sampler = greedy if mode == "greedy" else sampled
                with sampler.memoized():
                    numbers = evaluate(
                        engine,
                        make_env,
                        sampler,
                        opponents[opponent],
                        games=args.eval_games,
                        timeout=args.request_timeout,
                    )
                numbers["exact_win_rate"] = exact[opponent]["win_rate"]
                numbers["exact_chips"] = exact[opponent]["chips"]
                record({"kind": "eval", "step": step, "when": when, "opponent": opponent, "mode": mode, **numbers})
                low, high = numbers["ci95"]
                print(
                    f"  {when:>6} step {step:>3}: vs {opponent:<8} {mode:<7} win {numbers['win_rate']:.3f} "
                    f"[{low:.3f}, {high:.3f}] (exact {numbers['exact_win_rate']:.3f})  chips "
                    f"{numbers['mean_return']:+.3f} (exact {numbers['exact_chips']:+.3f})  ({numbers['games']} games)",
                    flush=True,
                )

    run_evals(0, "before")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    baseline = RoleBaseline(alpha=args.alpha)
    infoset = InfosetBaseline(alpha=args.infoset_alpha)
    envs = [make_env() for _ in range(args.games)]
    seats = envs[0].possible_agents
    split = split_games(args.opponents, args.games)  # the same games of each step against each opponent
    against = {i: name for name, indices in split.items() for i in indices}
    for step in range(1, args.steps + 1):
        tick = time.perf_counter()
        first_seed = 1_000_000 * (args.seed + 1) + step * args.games
        jobs = [
            MultiAgentJob(env, seed=first_seed + i // args.group, env_id=env_id, episode_id=f"rl{step}/game{i}")
            for i, env in enumerate(envs)
        ]
        groups: list[tuple[list[int], Any]] = [(split["self"], sampled)]
        for name in OPPONENTS:  # the model takes each seat in half the games against a fixed player
            for k, seat in enumerate(seats):
                policies = {a: sampled if a == seat else Scripted(opponents[name]) for a in seats}
                groups.append(([i for i in split[name] if i % len(seats) == k], policies))
        with sampled.memoized():
            results = _play_groups(engine, [([jobs[i] for i in idx], pol) for idx, pol in groups], args.request_timeout)
        order = [i for idx, _ in groups for i in idx]
        episodes, roles = [], []
        for i, result in zip(order, results, strict=True):
            if result.error is None:
                for seat, episode in result.episodes.items():
                    episodes.append(episode)
                    # a baseline per seat and opponent: the same move earns more against the random player
                    roles.append(seat if against[i] == "self" else f"{seat} vs {against[i]}")
        if args.estimator == "role_rebn":
            advantages = role_rebn_advantages(episodes, roles)
        elif args.estimator == "infoset":
            advantages = infoset.advantages(episodes, roles)
        elif args.estimator == "role_grpo":
            advantages = role_grpo_advantages(episodes, roles)
        else:
            advantages = baseline.advantages(episodes, roles)
        sequences = [episode_to_sequence(e, advantages=a) for e, a in zip(episodes, advantages, strict=True)]
        loss = policy_gradient_step(model, optimizer, sequences, tokenizer.pad_token_id)
        turns = [t for e in episodes for t in e.turns]
        selfplay = [r for i, r in zip(order, results, strict=True) if against[i] == "self"]
        record(
            {
                "kind": "train",
                "step": step,
                "loss": loss,
                "games": len(results),
                "games_vs": {name: len(indices) for name, indices in split.items()},
                "failed": sum(r.error is not None for r in results),
                "trajectories": len(episodes),
                "format_errors": sum(bool(t.info.get("format_error") or t.info.get("illegal_move")) for t in turns)
                / max(1, len(turns)),
                "first_seat_return": sum(r.returns[seats[0]] for r in selfplay) / max(1, len(selfplay)),
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
