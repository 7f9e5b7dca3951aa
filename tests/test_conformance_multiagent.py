"""The multi-agent conformance cases: the reference itself, a second core driver, and what the suite catches."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.conformance_multiagent import (
    MA_CASES,
    MultiAgentCase,
    MultiAgentRecord,
    assert_multiagent_conformant,
    multiagent_record,
    reference_multiagent_episodes,
    reference_multiagent_records,
    scripted_seat_generation,
    take_one,
)
from gem_core.episode import EpisodeEngine, EpisodeJob, TurnRequest
from gem_core.multiagent.engine import play_multiagent
from gem_core.multiagent.seat import SeatEnv
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.rl.roles import role_rebn_advantages

CASES_BY_NAME = {case.name: case for case in MA_CASES}


@pytest.mark.parametrize("case", MA_CASES, ids=lambda c: c.name)
def test_the_reference_conforms_and_has_one_record_per_model_seat_and_game(case: MultiAgentCase) -> None:
    records = reference_multiagent_records(case)
    assert_multiagent_conformant(case, records)
    assert len(records) == len(case.seeds) * len(case.model_seats)
    assert {r.role for r in records} == set(case.model_seats)


def test_each_seat_has_its_own_token_context() -> None:
    case = CASES_BY_NAME["nim-self-play"]
    tokenizer = case.tokenizer()
    first, second = reference_multiagent_records(case)[:2]
    assert "You move first" in tokenizer.decode(first.input_ids)
    assert "You move second" in tokenizer.decode(second.input_ids)
    # zero-sum: the two seats' returns cancel, and the first mover wins 3 of the 4 games
    assert sum(first.rewards) == -sum(second.rewards)
    wins = [sum(r.rewards) > 0 for r in reference_multiagent_records(case) if r.role == "first"]
    assert wins.count(True) == 3


def test_a_cut_reply_is_an_invalid_action_that_forfeits_the_seat() -> None:
    records = reference_multiagent_records(CASES_BY_NAME["nim-cut-forfeit"])
    second = [r for r in records if r.role == "second"]
    assert all(r.actions == ["<\uff5cINVALID_ACTION\uff5c>"] and r.rewards == [-1.0] for r in second)


def test_a_seat_against_a_scripted_opponent_through_seat_env_conforms() -> None:
    """A second core path: the seat as a single-agent SeatEnv under the engine's play_batch."""
    case = CASES_BY_NAME["nim-vs-scripted"]
    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)
    jobs = [
        EpisodeJob(env=SeatEnv(case.make_env(), {"second": take_one}, seat="first"), env_id=case.env_id, seed=seed)
        for seed in case.seeds
    ]

    def generate(requests: list[TurnRequest]) -> list[Any]:
        return [scripted_seat_generation(case, tokenizer, r.prompt_ids or [], r.max_tokens) for r in requests]

    episodes = [session.episode() for session in engine.play_batch(jobs, generate)]
    roles = [ep.turns[-1].info["seat"] for ep in episodes]
    advantages = role_rebn_advantages(episodes, roles=roles, gamma=case.gamma)
    records = []
    for episode, role, adv in zip(episodes, roles, advantages, strict=True):
        episode.metadata["seat"] = role
        records.append(multiagent_record(episode, adv.tolist()))
    assert_multiagent_conformant(case, records)


def _pooled_records(case: MultiAgentCase) -> list[MultiAgentRecord]:
    """What an adapter that ignores roles produces: one ReBN over every seat's turns."""
    episodes = reference_multiagent_episodes(case)
    returns = [discounted_returns(ep, case.gamma) for ep in episodes]
    flat = rebn(np.concatenate(returns))
    split = np.split(flat, np.cumsum([len(r) for r in returns])[:-1])
    return [multiagent_record(ep, adv.tolist()) for ep, adv in zip(episodes, split, strict=True)]


@pytest.mark.parametrize("name", ["nim-self-play", "nim-cut-forfeit"])
def test_pooled_advantages_are_caught(name: str) -> None:
    case = CASES_BY_NAME[name]
    with pytest.raises(AssertionError, match=r"token_advantages \(role ReBN\)"):
        assert_multiagent_conformant(case, _pooled_records(case))


def test_a_missing_swapped_or_duplicated_seat_is_caught() -> None:
    case = CASES_BY_NAME["nim-self-play"]
    records = reference_multiagent_records(case)
    with pytest.raises(AssertionError, match="missing"):
        assert_multiagent_conformant(case, records[1:])
    swapped = copy.deepcopy(records)
    swapped[0].role, swapped[1].role = swapped[1].role, swapped[0].role
    with pytest.raises(AssertionError, match="seat 'first'"):
        assert_multiagent_conformant(case, swapped)
    unnamed = copy.deepcopy(records)
    unnamed[0].role = ""
    with pytest.raises(AssertionError, match="unexpected"):
        assert_multiagent_conformant(case, unnamed)
    with pytest.raises(AssertionError, match="two records"):
        assert_multiagent_conformant(case, [*records, records[0]])


def test_records_in_any_order_conform() -> None:
    case = CASES_BY_NAME["nim-self-play"]
    assert_multiagent_conformant(case, list(reversed(reference_multiagent_records(case))))


_FIELDS = ("actions", "rewards", "input_ids", "loss_mask", "token_advantages", "terminated", "truncated")


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_single_changed_value_is_caught(data: st.DataObject) -> None:
    case = CASES_BY_NAME["nim-self-play"]
    records = copy.deepcopy(_REFERENCE)
    record = data.draw(st.sampled_from(records))
    name = data.draw(st.sampled_from(_FIELDS))
    values = getattr(record, name)
    index = data.draw(st.integers(0, len(values) - 1))
    old = values[index]
    if isinstance(old, bool):
        values[index] = not old
    elif isinstance(old, str):
        values[index] = old + " "
    elif isinstance(old, float):
        values[index] = old + data.draw(st.sampled_from([0.01, -0.5, 2.0]))
    else:
        values[index] = old + 1
    with pytest.raises(AssertionError, match=name):
        assert_multiagent_conformant(case, records)


_REFERENCE = reference_multiagent_records(CASES_BY_NAME["nim-self-play"])


def test_a_seat_the_game_ended_before_it_acted_has_a_finished_empty_session() -> None:
    case = dataclasses.replace(CASES_BY_NAME["nim-self-play"], reply=lambda turn, text: "x" * 80)  # cut: a forfeit
    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)

    def generate(request: TurnRequest) -> Any:
        return scripted_seat_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    result = play_multiagent(engine, case.make_env(), generate, seed=0, env_id=case.env_id)
    second = result.sessions["second"]
    assert second.done and second.end_reason == "not_acted" and not second.turns
    assert second.episode().metadata["seat"] == "second" and second.episode().turns == []
    assert list(result.episodes) == ["first"]  # no record for a seat without turns
