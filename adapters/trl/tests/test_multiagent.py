"""Multi-agent training through TRL: the conformance cases, role advantages, refused seats, a real train() on the CPU.

The conformance tests fake only the model's ``generate`` (it answers the suite's scripted policy
per seat); the rest is TRL's ``GRPOTrainer._generate_and_score_completions`` and
GemMultiAgentTrainer's role advantages. The training tests run TRL's real ``train()`` on a tiny
Qwen2 built from a config, its own ``model.generate`` playing every seat.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pytest
import torch
from gem_trl import build_tiny_model
from gem_trl.multiagent import (
    GemMultiAgentConfig,
    GemMultiAgentTrainer,
    MultiAgentRollout,
    make_seat_dataset,
    parse_seat_key,
    seat_key,
)
from gem_trl.testing import scripted_model_generate

from gem_core.conformance_multiagent import (
    MA_CASES,
    MultiAgentCase,
    MultiAgentRecord,
    assert_multiagent_conformant,
    take_one,
)
from gem_core.errors import ConfigError, RLInputError, UnknownAgent
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

OPPONENT = "gem_core.conformance_multiagent:take_one"


def _config(tmp_path: Any, **overrides: Any) -> GemMultiAgentConfig:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    settings.update(overrides)
    return GemMultiAgentConfig(**settings)


def trainer_for(case: MultiAgentCase, tmp_path: Any, **overrides: Any) -> GemMultiAgentTrainer:
    """The case's limits on GemMultiAgentConfig; one TRL group per seat holding every seed of the case."""
    tokenizer = case.tokenizer()
    n = len(case.seeds)
    config = _config(
        tmp_path,
        per_device_train_batch_size=n * len(case.model_seats),
        num_generations=n,
        max_completion_length=case.limits.max_episode_tokens,
        max_turn_tokens=case.limits.max_turn_tokens or 64,
        max_turns=case.limits.max_turns,
        gamma=case.gamma,
        on_cut=case.limits.on_cut,
        **overrides,
    )
    trainer = GemMultiAgentTrainer(
        model=build_tiny_model(tokenizer),
        args=config,
        train_dataset=make_seat_dataset(case.env_id, list(case.seeds), opponents=case.opponents),
        processing_class=tokenizer,
        opponents=dict(case.opponents),
    )
    trainer.model.train()
    trainer.model.generate = scripted_model_generate(case, tokenizer)  # type: ignore[method-assign]
    return trainer


def seat_inputs(case: MultiAgentCase) -> list[dict[str, Any]]:
    """Rows grouped by seat (each TRL group one seat), seeds in order within a group."""
    return [{"prompt": seat_key(case.env_id, seed, seat)} for seat in case.model_seats for seed in case.seeds]


def records_from_trl(inputs: list[dict[str, Any]], out: dict[str, Any]) -> list[MultiAgentRecord]:
    records = []
    loss = out["completion_mask"] * out["tool_mask"]
    for row, x in enumerate(inputs):
        episode = x["episode"]
        prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()
        length = int(out["completion_mask"][row].sum())
        records.append(
            MultiAgentRecord(
                start_state_id=episode.start_state_id,
                actions=[t.action for t in episode.turns],
                rewards=[t.reward for t in episode.turns],
                terminated=[t.terminated for t in episode.turns],
                truncated=[t.truncated for t in episode.turns],
                input_ids=prompt + out["completion_ids"][row][:length].tolist(),
                loss_mask=[0] * len(prompt) + loss[row][:length].int().tolist(),
                token_advantages=[0.0] * len(prompt) + out["advantages"][row][:length].tolist(),
                role=x["seat"],
            )
        )
    return records


@pytest.mark.parametrize("case", MA_CASES, ids=lambda c: c.name)
def test_trl_multiagent_rollout_conforms(case: MultiAgentCase, tmp_path: Any) -> None:
    trainer = trainer_for(case, tmp_path)
    inputs = seat_inputs(case)
    out = trainer._generate_and_score_completions(inputs)
    assert_multiagent_conformant(case, records_from_trl(inputs, out))
    assert [x["seat"] for x in inputs] == [parse_seat_key(x["prompt"])[2] for x in inputs]


def test_self_play_plays_one_game_per_start_state_for_all_its_seats(tmp_path: Any) -> None:
    case = MA_CASES[0]
    trainer = trainer_for(case, tmp_path)
    calls: list[int] = []
    scripted = trainer.model.generate

    def counting(**kwargs: Any) -> Any:
        calls.append(1)
        return scripted(**kwargs)

    trainer.model.generate = counting  # type: ignore[method-assign]
    inputs = seat_inputs(case)
    trainer._generate_and_score_completions(inputs)
    # one generate per seat turn of one game per seed: as many calls as the seats' turns together
    assert len(calls) == sum(len(x["episode"].turns) for x in inputs)


def test_advantages_are_per_role_not_pooled(tmp_path: Any) -> None:
    case = MA_CASES[0]  # the first mover wins 3 of 4 games: pooled and per-seat statistics differ
    trainer = trainer_for(case, tmp_path)
    inputs = seat_inputs(case)
    out = trainer._generate_and_score_completions(inputs)
    for seat in case.model_seats:
        rows = [i for i, x in enumerate(inputs) if x["seat"] == seat]
        returns = np.concatenate([discounted_returns(inputs[i]["episode"], case.gamma) for i in rows])
        values = torch.cat([out["advantages"][i][out["advantages"][i] != 0].unique_consecutive() for i in rows])
        assert values.mean().item() == pytest.approx(0.0, abs=1e-5), seat  # each seat centred on its own mean
        assert len(set(returns.round(6))) > 1
    first = [i for i, x in enumerate(inputs) if x["seat"] == "first"]
    assert out["advantages"][first].sum().item() != pytest.approx(out["advantages"][first].abs().sum().item())


@pytest.mark.parametrize("kind", ["grpo", "baseline"])
def test_grpo_and_baseline_advantages_reach_the_batch(kind: str, tmp_path: Any) -> None:
    case = MA_CASES[0]
    trainer = trainer_for(case, tmp_path, role_advantage=kind)
    inputs = seat_inputs(case)
    out = trainer._generate_and_score_completions(inputs)
    want = trainer.role_advantages([x["episode"] for x in inputs], [x["seat"] for x in inputs])
    if kind == "baseline":  # the baseline moved once more in role_advantages: compare the first call's state
        assert set(trainer.role_baseline.baselines) == {("core:Nim-v0", "first"), ("core:Nim-v0", "second")}
        return
    for row, x in enumerate(inputs):
        start, _ = x["turn_spans"][0]
        assert out["advantages"][row, start].item() == pytest.approx(float(want[row][0]), abs=1e-6)


def test_a_group_that_mixes_seats_is_refused(tmp_path: Any) -> None:
    case = MA_CASES[0]
    trainer = trainer_for(case, tmp_path)
    inputs = [{"prompt": seat_key(case.env_id, seed, seat)} for seed in case.seeds for seat in case.model_seats]
    with pytest.raises(RLInputError, match="mixes roles"):
        trainer._generate_and_score_completions(inputs)


class SwappingRollout(MultiAgentRollout):
    """A rollout that hands each row the other seat's trajectory (a forged seat assignment)."""

    def to_trl_seats(self, sessions: Any) -> dict[str, Any]:
        out = super().to_trl_seats(sessions)
        out["episode"] = [out["episode"][i ^ 1] for i in range(len(out["episode"]))]
        return out


def test_a_trajectory_from_another_seat_is_refused(tmp_path: Any) -> None:
    case = MA_CASES[0]
    tokenizer = case.tokenizer()
    trainer = GemMultiAgentTrainer(
        model=build_tiny_model(tokenizer),
        args=_config(tmp_path, per_device_train_batch_size=2, num_generations=2, max_completion_length=512),
        train_dataset=make_seat_dataset(case.env_id, [0]),
        processing_class=tokenizer,
        rollout_func=SwappingRollout(max_turn_tokens=16),
    )
    trainer.model.generate = scripted_model_generate(case, tokenizer)  # type: ignore[method-assign]
    inputs = [{"prompt": seat_key(case.env_id, 0, "first")}, {"prompt": seat_key(case.env_id, 0, "second")}]
    with pytest.raises(RLInputError, match="asked for seat 'first'"):
        trainer._checked_rows([{**x, "seat": s, "episode": e} for x, s, e in _swapped(trainer, inputs)])


def _swapped(trainer: GemMultiAgentTrainer, inputs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, Any]]:
    rollout = trainer.rollout_func
    out = rollout([x["prompt"] for x in inputs], trainer)
    return list(zip(inputs, out["seat"], out["episode"], strict=True))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: make_seat_dataset("core:Nim-v0", 2, seats=["referee"]), UnknownAgent, "no seat 'referee'"),
        (
            lambda: make_seat_dataset("core:Nim-v0", 2, seats=["second"], opponents={"second": take_one}),
            ConfigError,
            "fixed opponent",
        ),
        (lambda: make_seat_dataset("core:NumberGuess-v0", 2), ConfigError, "single-agent env"),
        (lambda: parse_seat_key("core:Nim-v0#3"), ConfigError, "not a seat key"),
        (lambda: seat_key("core:Nim-v0", 3, "a@b"), ConfigError, "without '@'"),
        (lambda: GemMultiAgentConfig(output_dir="x", role_advantage="pooled"), ConfigError, "role_advantage"),
        (lambda: MultiAgentRollout(opponents={"second": 3}), ConfigError, "not a callable"),
    ],
    ids=["unknown-seat", "opponent-seat", "single-agent-env", "episode-key", "bad-seat-name", "role-adv", "bad-opp"],
)
def test_bad_multiagent_input_is_a_typed_error(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_a_forged_seat_in_the_prompt_is_refused_before_any_game(tmp_path: Any) -> None:
    case = MA_CASES[1]  # "second" is the scripted opponent
    trainer = trainer_for(case, tmp_path)
    with pytest.raises(UnknownAgent, match="referee"):
        trainer.rollout_func([seat_key(case.env_id, 4, "referee")] * 3, trainer)
    with pytest.raises(ConfigError, match="fixed opponent"):
        trainer.rollout_func([seat_key(case.env_id, 4, "second")] * 3, trainer)


# slow: TRL's whole train() (one rollout of games played one by one, an optimizer step): 33-35 s each here under load
@pytest.mark.slow
@pytest.mark.parametrize(
    ("opponents", "role_advantage"), [({}, "baseline"), ({"second": OPPONENT}, "rebn")], ids=["self-play", "vs-fixed"]
)
def test_real_train_step_on_a_tiny_model(opponents: dict[str, str], role_advantage: str, tmp_path: Any) -> None:
    """TRL's train(): the tiny model's own generate in every model seat, role advantages, an optimizer step.

    The random model's replies are cut (no stop within 4 tokens), so every first move forfeits:
    equal returns. SPIRAL's baseline still gives them an advantage (R minus a moving average that
    starts at 0), so under it the step moves the weights; under role ReBN it must leave them alone.
    """
    tokenizer = build_chat_tokenizer("chatml", vocab_size=300)
    model = build_tiny_model(tokenizer, seed=0)
    trainer = GemMultiAgentTrainer(
        model=model,
        args=_config(
            tmp_path,
            max_steps=1,
            per_device_train_batch_size=4,
            num_generations=2,
            learning_rate=5e-3,
            max_completion_length=64,
            max_turn_tokens=4,
            max_turns=4,
            role_advantage=role_advantage,
            logging_steps=1,
        ),
        train_dataset=make_seat_dataset("core:Nim-v0", 4, opponents=opponents),
        processing_class=tokenizer,
        opponents=opponents,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(before[name], p.detach())]
    logged = trainer.state.log_history[0]
    assert np.isfinite(logged["loss"]) and logged["gem/num_turns"] >= 1
    if role_advantage == "baseline":
        assert changed, "the optimizer step changed no weight"
        # the second seat never acted (the first forfeits at once): no turn, no baseline, a masked row
        assert set(trainer.role_baseline.baselines) == {("core:Nim-v0", "first")}
    else:
        assert logged["gem/episode_return"] == -1.0 and not changed  # equal returns per seat: zero role advantage


def test_a_seat_the_game_ended_before_it_acted_gets_a_masked_row(tmp_path: Any) -> None:
    # every reply is cut (an invalid action): the first player forfeits its first move, the second never acts
    case = dataclasses.replace(MA_CASES[0], name="first-forfeits", reply=lambda turn, text: "x" * 80)
    trainer = trainer_for(case, tmp_path)
    inputs = seat_inputs(case)
    out = trainer._generate_and_score_completions(inputs)
    for row, x in enumerate(inputs):
        trained = int((out["completion_mask"][row] * out["tool_mask"][row]).sum())
        if x["seat"] == "first":
            assert x["turn_rewards"] == [-1.0] and trained > 0
        else:
            assert x["episode"].metadata["end_reason"] == "not_acted" and trained == 0
            assert out["advantages"][row].abs().sum().item() == 0.0
