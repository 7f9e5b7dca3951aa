"""The self-play demo (``python -m gem_trl.selfplay``): the pipeline runs and writes metrics of the right shape.

These check the plumbing (the sampler against ``model.generate``, the policy-gradient step's
direction, the evaluation's counting, the records and the plot), not that the model learns: the
measured runs are in docs/multiagent.md.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gem_multiagent._base import last_word
from gem_multiagent.versus import scripted_players
from gem_trl.kuhn_exact import CARDS, HISTORIES, scripted_strategy, versus
from gem_trl.selfplay import (
    OPPONENTS,
    BatchedSampler,
    InfosetBaseline,
    after_own_reply,
    brief_kuhn,
    card_kuhn,
    evaluate,
    kuhn_greedy_moves,
    kuhn_infoset_prompts,
    kuhn_move_probabilities,
    kuhn_sampled_table,
    main,
    parse_args,
    plot_selfplay,
    policy_gradient_step,
    selfplay_warm_up,
    split_games,
    strategy_rows,
    warm_up_sequences,
    wilson_interval,
)
from gem_trl.tiny import build_tiny_model, build_tiny_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.errors import RLInputError
from gem_core.multiagent.engine import play_multiagent
from gem_core.rl.layouts import episode_to_sequence
from gem_core.rl.types import Episode, Turn

KUHN = "multiagent:KuhnPoker-v0"


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    tokenizer = build_tiny_tokenizer(f"{KUHN}-vs-random", episodes=16)
    model = build_tiny_model(tokenizer, seed=0, hidden_size=32, num_layers=1)
    model.eval()
    return tokenizer, model


def brief() -> Any:
    return brief_kuhn(gem_core.make(KUHN))


def carded() -> Any:
    return card_kuhn(gem_core.make(KUHN))


@pytest.fixture(scope="module")
def warmed(tiny: tuple[Any, Any]) -> tuple[Any, Any, EpisodeEngine]:
    """A tiny model warmed up on random legal moves (brief prompts): its replies are mostly moves, not sure ones."""
    tokenizer, _ = tiny
    model = build_tiny_model(tokenizer, seed=1, hidden_size=32, num_layers=1)
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=4)
    selfplay_warm_up(model, tokenizer, engine, brief, steps=60, batch_size=8, learning_rate=3e-3, seed=3)
    return tokenizer, model.eval(), engine


def test_each_information_set_has_one_prompt_showing_only_the_seats_card(warmed: tuple[Any, Any, Any]) -> None:
    tokenizer, _, engine = warmed
    prompts = kuhn_infoset_prompts(engine, brief)
    assert sorted(prompts) == sorted((h, c) for h in HISTORIES for c in CARDS)
    for (history, card), ids in prompts.items():
        text = tokenizer.decode(ids)
        assert text.rstrip().endswith("assistant")  # the model's turn comes next
        assert f"your card is {card}." in text and "Showdown" not in text
        assert text.count("<|im_start|>assistant") == len(history.split()) // 2 + 1


def test_the_brief_prompt_drops_only_the_rules() -> None:
    full, brief = gem_core.make(KUHN), brief_kuhn(gem_core.make(KUHN))
    told_full, _ = full.reset(seed=5)
    told_brief, _ = brief.reset(seed=5)
    for agent, text in told_brief.items():
        assert text.startswith("You are ") and "Kuhn Poker" not in text
        assert told_full[agent].endswith(text) and f"your card is {full.unwrapped.cards[agent]}." in text
    for move in ("check", "bet", "fold"):  # the same game goes on: same news, same rewards
        (agent,) = full.acting_agents()
        assert brief.step({agent: move}) == full.step({agent: move})
        if full.episode_over:
            break


def env_reading(tokenizer: Any, ids: list[int], history: str) -> str | None:
    """The move the env makes of a reply: a legal move named in a reply that ended, else None (a forfeit)."""
    if not ids or ids[-1] != tokenizer.eos_token_id:
        return None  # cut at the budget: the engine sends an invalid action
    move = last_word(tokenizer.decode(ids, skip_special_tokens=True), ("check", "bet", "call", "fold"))
    return move if move in HISTORIES[history] else None


def test_the_sampled_table_is_what_the_sampler_plays(warmed: tuple[Any, Any, Any]) -> None:
    tokenizer, model, engine = warmed
    prompts = kuhn_infoset_prompts(engine, brief)
    sampler = BatchedSampler(model, tokenizer, max_tokens=4, seed=9)
    with sampler.memoized():
        table, unresolved = kuhn_move_probabilities(sampler, prompts, keep=16)
        n = 200
        for key, ids in prompts.items():
            requests = [
                TurnRequest(
                    episode_index=i, turn=0, prompt_ids=ids, messages=[], max_tokens=4, request_id=f"{key}{i}/r"
                )
                for i in range(n)
            ]
            moves = [env_reading(tokenizer, g.token_ids or [], key[0]) for g in sampler.sample(requests)]
            for move in HISTORIES[key[0]]:
                p, seen = table[key].get(move, 0.0), moves.count(move) / n
                tolerance = 4.5 * math.sqrt(max(p * (1 - p), 1 / n) / n)
                assert p - tolerance <= seen <= p + unresolved[key] + tolerance, (key, move)  # unresolved: either
            dropped = 1 - sum(table[key].values())  # forfeits and unresolved replies
            assert dropped - unresolved[key] - 0.1 <= moves.count(None) / n <= dropped + 0.1, key
    assert max(unresolved.values()) < 0.5 and any(0.1 < t.get("bet", 0) < 0.9 for t in table.values())


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_the_exact_values_of_the_table_are_what_the_games_score(warmed: tuple[Any, Any, Any], mode: str) -> None:
    tokenizer, model, engine = warmed
    prompts = kuhn_infoset_prompts(engine, brief)
    sampler = BatchedSampler(model, tokenizer, max_tokens=4, greedy=mode == "greedy", seed=4)
    players = scripted_players("kuhn_poker")
    with sampler.memoized():
        table = (
            kuhn_greedy_moves(sampler, prompts)
            if mode == "greedy"
            else kuhn_sampled_table(sampler, prompts, keep=16)[0]
        )
        numbers = evaluate(engine, brief, sampler, lambda env, a, news: players[a](env, a, news), games=800)
    exact = versus(table, scripted_strategy())
    for seat, played in numbers["per_seat"].items():
        low, high = played["return_ci95"]
        spread = (high - low) / 2
        assert abs(played["mean_return"] - exact[f"chips_{seat}"]) <= 1.2 * spread + 1e-9, seat  # 1.2 x 95%
        low, high = played["ci95"]
        assert low - 0.03 <= exact[f"win_rate_{seat}"] <= high + 0.03, seat
    assert len(strategy_rows(table)) == 12


@pytest.mark.parametrize("opening", ["check", "K check", "J Q check"], ids=["bare", "naming-card", "two-words"])
def test_the_prompt_after_an_own_reply_is_what_the_game_shows(tiny: tuple[Any, Any], opening: str) -> None:
    """``player_0`` facing ``check bet`` sees its own opening reply: the tables build that prompt as a game does."""
    tokenizer, _ = tiny
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=8)
    prompts = kuhn_infoset_prompts(engine, carded)
    seen: list[list[int]] = []
    reply = [*tokenizer.encode(opening, add_special_tokens=False), tokenizer.eos_token_id]

    def play(request: TurnRequest) -> Generation:
        seen.append(list(request.prompt_ids))
        if len(seen) == 1:
            return Generation(token_ids=reply)
        return Generation(
            token_ids=[
                *tokenizer.encode("bet" if len(seen) == 2 else "fold", add_special_tokens=False),
                tokenizer.eos_token_id,
            ]
        )

    env = carded()
    for seed in range(40):  # a deal where player_0 holds a K
        env.reset(seed=seed)
        if env.unwrapped.cards["player_0"] == "K":
            break
    play_multiagent(engine, env, play, seed=seed)
    assert len(seen) == 3  # player_0 opened, player_1 bet, player_0 answers
    assert after_own_reply(prompts, "K", reply, tokenizer) == seen[2]
    assert (after_own_reply(prompts, "K", reply, tokenizer) == prompts[("check bet", "K")]) == (opening == "check")


@pytest.mark.slow
def test_a_few_selfplay_steps_write_metrics_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "2", "--steps", "2", "--games", "8", "--group", "2", "--eval-games", "4", "--eval-every", "1"]
    argv += ["--opponents", "self=2,scripted=1,random=1"]
    argv += ["--warmup-steps", "2", "--card-warmup-steps", "2", "--hidden", "32", "--layers", "1"]
    argv += ["--output-dir", str(tmp_path)]
    records = main(argv)
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert written == records
    train = [r for r in written if r["kind"] == "train"]
    evals = [r for r in written if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["games"] == 8 and r["trajectories"] + r["failed"] * 2 >= 8 for r in train)  # a seat that acted
    assert all(r["games_vs"] == {"self": 4, "scripted": 2, "random": 2} for r in train)
    tables = [r for r in written if r["kind"] == "strategy"]
    assert [(r["step"], r["mode"]) for r in tables] == [(s, m) for s in (0, 1, 2) for m in ("greedy", "sampled")]
    for r in tables:
        assert len(r["table"]) == 12 and set(r["exact"]) == set(OPPONENTS)
        assert all(
            math.isclose(sum(v for k, v in row.items() if k not in ("seat", "history", "card")), 1.0, abs_tol=1e-3)
            for row in r["table"]
        )
    # before (step 0), during (step 1) and after (step 2): each opponent, greedy and sampled
    assert [(r["step"], r["when"]) for r in evals] == [(0, "before")] * 4 + [(1, "during")] * 4 + [(2, "after")] * 4
    assert {(r["opponent"], r["mode"]) for r in evals} == {(o, m) for o in OPPONENTS for m in ("greedy", "sampled")}
    for r in evals:
        assert r["games"] + r["failed"] == 4 and r["wins"] + r["draws"] + r["losses"] == r["games"]
        assert r["win_rate"] == r["wins"] / r["games"]
        assert r["ci95"][0] <= r["win_rate"] <= r["ci95"][1]
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "after step   2: vs scripted" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wins", "games", "expected"),
    [(10, 20, (0.2993, 0.7007)), (0, 10, (0.0, 0.2775)), (10, 10, (0.7225, 1.0)), (0, 0, (0.0, 1.0))],
    ids=["half", "none", "all", "no-games"],
)
def test_wilson_interval(wins: int, games: int, expected: tuple[float, float]) -> None:
    low, high = wilson_interval(wins, games)
    assert math.isclose(low, expected[0], abs_tol=1e-4) and math.isclose(high, expected[1], abs_tol=1e-4)


@pytest.fixture(scope="module")
def absolute(tiny: tuple[Any, Any]) -> Any:
    """A GPT-2 (learned absolute position embeddings): a left-padded row must count its positions from 0.

    The Qwen2 of the demo uses rotary positions, which depend only on the distance between tokens, so
    it gives the same answers however a row's positions are offset; this model does not.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer, _ = tiny
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=1, n_head=2, initializer_range=0.2,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def model_of(kind: str, tiny: tuple[Any, Any], absolute: Any) -> Any:
    return tiny[1] if kind == "rotary" else absolute


PADDED_PROMPTS = ("You are player_0, your card is K.", "bet", "check or bet? " * 6)


@pytest.mark.parametrize("kind", ["rotary", "absolute"], ids=["qwen2-rotary", "gpt2-absolute"])
def test_a_padded_rows_next_token_logits_are_the_rows_alone(tiny: tuple[Any, Any], absolute: Any, kind: str) -> None:
    tokenizer, model = tiny[0], model_of(kind, tiny, absolute)
    rows = [tokenizer.encode(text) for text in PADDED_PROMPTS]
    batched = BatchedSampler(model, tokenizer, max_tokens=1).next_token_logits(rows)
    for row, got in zip(rows, batched, strict=True):
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([row])).logits[0, -1]
        torch.testing.assert_close(got, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["rotary", "absolute"], ids=["qwen2-rotary", "gpt2-absolute"])
def test_greedy_sampling_in_a_padded_batch_is_model_generate_alone(
    tiny: tuple[Any, Any], absolute: Any, kind: str
) -> None:
    tokenizer, model = tiny[0], model_of(kind, tiny, absolute)
    prompts = [tokenizer.encode(text) for text in PADDED_PROMPTS]
    requests = [
        TurnRequest(episode_index=i, turn=0, prompt_ids=ids, messages=[], max_tokens=5, request_id=f"g{i}/turn0/r{i}")
        for i, ids in enumerate(prompts)
    ]
    got = BatchedSampler(model, tokenizer, max_tokens=5, greedy=True).sample(requests)
    for ids, generation in zip(prompts, got, strict=True):
        expected = model.generate(
            torch.tensor([ids]), max_new_tokens=5, do_sample=False, eos_token_id=tokenizer.eos_token_id
        )[0, len(ids) :].tolist()
        assert generation.token_ids == expected
        assert generation.finish_reason == ("stop" if expected[-1] == tokenizer.eos_token_id else "length")


def test_memoized_forwards_sample_the_same_tokens_with_fewer_forwards(tiny: tuple[Any, Any]) -> None:
    tokenizer, model = tiny
    ids = tokenizer.encode("You are player_1, your card is Q.")
    requests = [
        TurnRequest(episode_index=i, turn=0, prompt_ids=ids, messages=[], max_tokens=3, request_id=f"e{i}/turn0/r")
        for i in range(8)
    ]
    plain = BatchedSampler(model, tokenizer, max_tokens=3, seed=3)
    memo = BatchedSampler(model, tokenizer, max_tokens=3, seed=3)
    expected = [plain.sample([r])[0].token_ids for r in requests]
    with memo.memoized():
        got = [memo.sample([r])[0].token_ids for r in requests]
    assert got == expected
    assert memo.forwards < plain.forwards  # the shared prompt's first forward is reused
    assert memo._memo is None  # forgotten after the block: the weights may change after it


def test_a_requests_samples_do_not_depend_on_its_batch(tiny: tuple[Any, Any]) -> None:
    tokenizer, model = tiny
    ids = tokenizer.encode("You are player_1, your card is Q.")

    def request(key: str) -> TurnRequest:
        return TurnRequest(episode_index=0, turn=0, prompt_ids=ids, messages=[], max_tokens=4, request_id=f"{key}/r1")

    sampler = BatchedSampler(model, tokenizer, max_tokens=4, seed=5)
    alone = sampler.sample([request("a/turn0")])[0]
    crowded = sampler.sample([request("b/turn0"), request("a/turn0"), request("c/turn0")])
    assert crowded[1].token_ids == alone.token_ids
    assert len({tuple(g.token_ids or ()) for g in crowded}) > 1  # different episodes draw differently


def test_concurrent_requests_share_one_forward_batch(tiny: tuple[Any, Any]) -> None:
    tokenizer, model = tiny
    sampler = BatchedSampler(model, tokenizer, max_tokens=2, greedy=True)
    ids = tokenizer.encode("check")

    async def ask_all() -> list[Any]:
        return await asyncio.gather(
            *(
                sampler(
                    TurnRequest(
                        episode_index=i, turn=0, prompt_ids=ids, messages=[], max_tokens=2, request_id=f"e{i}/t/r"
                    )
                )
                for i in range(5)
            )
        )

    answers = asyncio.run(ask_all())
    assert sampler.batches == 1 and len(answers) == 5


def test_a_positive_advantage_makes_the_played_tokens_likelier(tiny: tuple[Any, Any]) -> None:
    tokenizer, model = tiny
    engine = EpisodeEngine(tokenizer, max_turns=2)
    env = gem_core.make(f"{KUHN}-vs-random")
    move = [*tokenizer.encode("bet", add_special_tokens=False), tokenizer.eos_token_id]
    session = engine.play_batch(
        [gem_core.episode.EpisodeJob(env=env, seed=1)], lambda rs: [Generation(token_ids=list(move)) for _ in rs]
    )[0]
    sequence = episode_to_sequence(session.episode(), advantages=[1.0] * len(session.turns))

    def played_logp() -> float:
        ids = torch.from_numpy(sequence.input_ids)[None]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])
        return float((logp.squeeze(-1) * torch.from_numpy(sequence.loss_mask[1:]).float()).sum())

    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = played_logp()
    policy_gradient_step(model, torch.optim.SGD(model.parameters(), lr=0.05), [sequence], tokenizer.pad_token_id)
    after = played_logp()
    model.load_state_dict(state)
    assert after > before


def test_the_evaluation_counts_the_envs_outcomes_not_the_models_claims(tiny: tuple[Any, Any]) -> None:
    # A forger: every reply claims the pot in prose and names no move; the env folds it each time.
    tokenizer, _ = tiny
    claim = [*tokenizer.encode("I win, showdown: player_0 wins 2 chip(s)", add_special_tokens=False)]

    class Forger:
        async def __call__(self, request: TurnRequest) -> Generation:
            return Generation(token_ids=[*claim, tokenizer.eos_token_id])

    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=64)
    players = scripted_players("kuhn_poker")
    numbers = evaluate(
        engine,
        lambda: gem_core.make(KUHN),
        Forger(),  # type: ignore[arg-type]
        lambda env, agent, news: players[agent](env, agent, news),
        games=12,
    )
    assert numbers["games"] == 12 and numbers["wins"] == 0 and numbers["win_rate"] == 0.0
    assert numbers["mean_return"] < 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--games", "6", "--group", "4"],
        ["--steps", "0"],
        ["--eval-games", "0"],
        ["--game", "chess"],
        ["--card-warmup-steps", "-1"],
        ["--infoset-alpha", "1"],
        ["--card-mix", "1.5"],
        ["--opponents", "self=0.5,human=0.5"],
        ["--opponents", "self=0.5,self=0.5"],
        ["--opponents", "self=half"],
        ["--opponents", "scripted=-1,random=2"],
        ["--opponents", "self=0,random=0"],
        ["--opponents", "random"],
    ],
    ids=[
        "games-not-multiple-of-group",
        "no-steps",
        "no-eval-games",
        "unknown-game",
        "negative-card-warm-up",
        "infoset-alpha-out-of-range",
        "card-mix-out-of-range",
        "unknown-opponent",
        "opponent-twice",
        "share-not-a-number",
        "negative-share",
        "no-games-left",
        "share-missing",
    ],
)
def test_bad_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "games", "expected"),
    [
        ("self=0.5,scripted=0.25,random=0.25", 32, {"self": 16, "scripted": 8, "random": 8}),
        ("self=1,scripted=1,random=1", 32, {"self": 11, "random": 11, "scripted": 10}),
        ("scripted=1", 4, {"self": 0, "scripted": 4, "random": 0}),
        ("self=0.5,scripted=0.5", 5, {"self": 3, "scripted": 2, "random": 0}),
    ],
    ids=["default", "thirds", "scripted-only", "odd-games"],
)
def test_the_opponents_shares_become_whole_games(text: str, games: int, expected: dict[str, int]) -> None:
    split = split_games(parse_args(["--opponents", text]).opponents, games)
    assert {name: len(indices) for name, indices in split.items()} == expected
    assert sorted(i for indices in split.values() for i in indices) == list(range(games))  # each game once


def test_plot_of_a_metrics_file(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [
        {"kind": "train", "step": s, "format_errors": 0.1, "first_seat_return": 0.0} for s in (1, 2)
    ]
    records += [
        {"kind": "eval", "step": s, "opponent": o, "mode": m, "win_rate": 0.5, "ci95": [0.4, 0.6]}
        for s in (0, 2)
        for o in OPPONENTS
        for m in ("greedy", "sampled")
    ]
    assert plot_selfplay(records, tmp_path / "p.png", title="t").stat().st_size > 1000  # an older file: no chips
    for r in records:
        if r["kind"] == "eval":
            r.update(mean_return=0.1, return_ci95=[0.0, 0.2], exact_chips=0.05)
    table = strategy_rows({(h, c): {HISTORIES[h][0]: 0.5} for h in HISTORIES for c in CARDS})
    records += [{"kind": "strategy", "step": s, "mode": "sampled", "table": table} for s in (0, 2)]
    assert plot_selfplay(records, tmp_path / "q.png").stat().st_size > 1000


# --- the card: restated in the prompt, said in the first warm-up, and a baseline per information set ---


def test_the_card_prompt_restates_only_the_seats_own_card_at_each_decision(tiny: tuple[Any, Any]) -> None:
    tokenizer, _ = tiny
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=4)
    prompts = kuhn_infoset_prompts(engine, carded)  # raises if a prompt showed more than the information set
    assert sorted(prompts) == sorted((h, c) for h in HISTORIES for c in CARDS)
    for (history, card), ids in prompts.items():
        text = tokenizer.decode(ids)
        question = text.rsplit("<|im_start|>user\n", 1)[-1]
        assert question.split("<|im_end|>")[0].endswith(f"? (your card: {card})"), (history, card)
        others = [c for c in CARDS if c != card]
        assert all(f"your card: {c}" not in text and f"your card is {c}" not in text for c in others)


@pytest.mark.parametrize("seed", [0, 3, 7], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("moves", [("bet", "call"), ("bet", "fold"), ("check", "bet", "call"), ("check", "claim")])
def test_the_card_prompt_keeps_the_envs_game(seed: int, moves: tuple[str, ...]) -> None:
    bare, wrapped = gem_core.make(KUHN), carded()
    told_bare, _ = bare.reset(seed=seed)
    told, _ = wrapped.reset(seed=seed)
    for agent, text in told.items():
        assert text.startswith(told_bare[agent])
    for move in moves:  # same rewards, outcomes and ends; a reply naming no move still forfeits
        (agent,) = bare.acting_agents()
        got_bare, got = bare.step({agent: move}), wrapped.step({agent: move})
        assert got[1:] == got_bare[1:]
        for seat, text in got[0].items():
            assert text.startswith(got_bare[0][seat])
        if bare.episode_over:
            break
    assert wrapped.episode_over


@pytest.mark.parametrize(
    ("aggression", "made"),
    [(0.0, {"check"}), (1.0, {"bet", "call"})],  # no one bets: no one calls or folds
    ids=["never-aggressive", "always-aggressive"],
)
def test_the_warm_ups_aggression_decides_its_moves(tiny: tuple[Any, Any], aggression: float, made: set[str]) -> None:
    tokenizer, _ = tiny
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=4)
    sequences = warm_up_sequences(tokenizer, engine, carded, games=12, seed=3, say_card=0.5, aggression=aggression)
    replies = {
        tokenizer.decode([t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m], skip_special_tokens=False)
        for s in sequences
    }
    moves = {last_word(r, ("check", "bet", "call", "fold")) for text in replies for r in text.split("<|im_end|>") if r}
    assert moves == made


@pytest.mark.parametrize("say_card", [0.0, 1.0, 0.5], ids=["move", "card-then-move", "half-and-half"])
def test_the_warm_ups_replies_are_random_moves_optionally_after_the_seats_card(
    tiny: tuple[Any, Any], say_card: float
) -> None:
    tokenizer, _ = tiny
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=4)
    sequences = warm_up_sequences(tokenizer, engine, carded, games=24, seed=11, say_card=say_card)
    assert len(sequences) == 48  # both seats of every game
    moves, named = [], []
    for sequence in sequences:
        ids, mask = sequence.input_ids.tolist(), sequence.loss_mask.tolist()
        card = tokenizer.decode(ids).split("your card is ", 1)[1][0]
        replies, current = [], []
        for token, trained in [*zip(ids, mask, strict=True), (None, 0)]:
            if trained:
                current.append(token)
            elif current:
                replies.append(tokenizer.decode(current, skip_special_tokens=True).split())
                current = []
        assert replies
        for words in replies:
            assert words[-1] in ("check", "bet", "call", "fold")
            assert words[:-1] in ([], [card])  # the seat's own card, or nothing
            moves.append(words[-1])
            named.append(words[:-1] == [card])
    assert {"check", "bet", "call", "fold"} <= set(moves)  # random moves, every kind
    assert set(named) == {0.0: {False}, 1.0: {True}, 0.5: {False, True}}[say_card]


def episode(rewards: list[float], prompts: list[list[int]] | None) -> Episode:
    turns = [
        Turn(observation="o", action="a", reward=r, prompt_token_ids=None if prompts is None else prompts[i])
        for i, r in enumerate(rewards)
    ]
    return Episode(turns=turns, start_state_id="s")


def test_the_infoset_baseline_by_hand() -> None:
    baseline = InfosetBaseline(alpha=0.9)
    first = [episode([2.0], [[1]]), episode([-2.0], [[1]]), episode([0.0, 1.0], [[2], [2, 7]]), episode([5.0], [[1]])]
    got = baseline.advantages(first, ["a", "a", "a", "b"])
    # key (a, [1]) first seen: its baseline is the batch's mean (0); (a, [2]) and (a, [2, 7]) see G = 1
    expected = [[2.0], [-2.0], [0.0, 0.0], [0.0]]
    assert [a.tolist() for a in got] == expected
    second = baseline.advantages([episode([1.0], [[1]]), episode([5.0], [[1]])], ["a", "a"])
    # read before the move: (a, [1]) is 0.9 * 0 + 0.1 * 0 = 0 after the first batch
    assert [a.tolist() for a in second] == [[1.0], [5.0]]
    assert math.isclose(baseline.baselines[("a", (1,))], 0.1 * 3.0)
    third = baseline.advantages([episode([0.0], [[1]])], ["b"])  # another role: its own baseline (5)
    assert third[0].tolist() == [-5.0]


def reference_infoset_advantages(
    batches: list[list[tuple[str, list[tuple[tuple[int, ...], float]]]]], alpha: float
) -> list[list[list[float]]]:
    """An independent reading of the rule: per batch, every turn's G_t minus its key's baseline, then the move."""
    table: dict[tuple[str, tuple[int, ...]], float] = {}
    out = []
    for batch in batches:
        sums: dict[tuple[str, tuple[int, ...]], list[float]] = {}
        per_episode = []
        for role, turns in batch:
            rewards = [r for _, r in turns]
            tails = [sum(rewards[t:]) for t in range(len(rewards))]
            for (prompt, _), g in zip(turns, tails, strict=True):
                sums.setdefault((role, prompt), []).append(g)
            per_episode.append([(role, prompt, g) for (prompt, _), g in zip(turns, tails, strict=True)])
        old = {k: table.get(k, sum(v) / len(v)) for k, v in sums.items()}
        out.append([[g - old[(role, prompt)] for role, prompt, g in turns] for turns in per_episode])
        for k, v in sums.items():
            table[k] = alpha * old[k] + (1 - alpha) * sum(v) / len(v)
    return out


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["p0", "p1", "p0 vs scripted"]),
                st.lists(
                    st.tuples(st.tuples(st.integers(0, 3)), st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0])),
                    min_size=1,
                    max_size=3,
                ),
            ),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=4,
    ),
    alpha=st.sampled_from([0.0, 0.5, 0.9]),
)
def test_the_infoset_baseline_matches_an_independent_reading(
    batches: list[list[tuple[str, list[tuple[tuple[int, ...], float]]]]], alpha: float
) -> None:
    baseline = InfosetBaseline(alpha=alpha)
    expected = reference_infoset_advantages(batches, alpha)
    for batch, want in zip(batches, expected, strict=True):
        episodes = [episode([r for _, r in turns], [list(p) for p, _ in turns]) for _, turns in batch]
        got = baseline.advantages(episodes, [role for role, _ in batch])
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    luck=st.dictionaries(st.integers(0, 5), st.sampled_from([-2.0, -1.0, 1.0, 2.0]), min_size=2, max_size=6),
    draws=st.lists(st.integers(0, 5), min_size=4, max_size=30),
)
def test_a_return_that_only_the_information_set_decides_has_no_advantage(
    luck: dict[int, float], draws: list[int]
) -> None:
    # The card's luck: every move earns what the information set earns. ReBN per seat credits it to the
    # moves played; the per-information-set baseline gives them nothing.
    keys = [k for k in draws if k in luck] or [next(iter(luck))]
    baseline = InfosetBaseline(alpha=0.9)
    for _ in range(3):
        episodes = [episode([luck[k]], [[k]]) for k in keys]
        got = baseline.advantages(episodes, ["p0"] * len(episodes))
        assert all(abs(float(a[0])) < 1e-9 for a in got)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.advantages([episode([1.0], None)], ["p0"]), "prompt_token_ids"),
        (lambda b: b.advantages([episode([1.0], [[1]])], ["p0", "p1"]), "one per episode"),
        (lambda b: InfosetBaseline(alpha=1.0), "alpha"),
    ],
    ids=["no-prompt-ids", "roles-miscounted", "alpha-out-of-range"],
)
def test_the_infoset_baseline_refuses_bad_input(build: Any, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        build(InfosetBaseline())
