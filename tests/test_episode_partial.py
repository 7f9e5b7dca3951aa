"""gem_core.episode: policy versions, partial rollouts (aborted generations resumed) and ``max_policy_lag``.

The property behind partial rollouts: however a turn's generation is split by aborts (at
any offsets, under any versions), the recorded turn is the one an unsplit generation gives
(ids, logprobs, action, context), every continuation was asked with prompt = context + the
ids so far, and the turn records where it was resumed and which version sampled each token.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeLimits, Generation, TurnRequest
from gem_core.errors import ConfigError, GenerateContractError, PolicyLagError
from gem_core.testing import GenericTestEnv

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.testing_tokenizers import build_chat_tokenizer

TOK = build_chat_tokenizer("chatml")


def reply_ids(text: str) -> list[int]:
    return [*TOK.encode(text, add_special_tokens=False), TOK.eos_token_id]


def two_turn_env() -> GenericTestEnv:
    def step(env: GenericTestEnv, action: str) -> Any:
        return f"obs {env.t}", 1.0, env.t >= 2, False, {"action": action}

    return GenericTestEnv(step_func=step)


def fake_logprobs(ids: list[int]) -> list[float]:
    return [-0.01 * (i + 1) for i in range(len(ids))]


def play_split(engine: EpisodeEngine, splits: list[list[int]], versions: list[int]) -> tuple[Any, list[TurnRequest]]:
    """Play two turns of ``reply_ids('hello there')``; turn 0's generation is aborted at ``splits[0]`` offsets.

    ``versions[k]`` is ``engine.policy_version`` while the ``k``-th request of the episode is answered.
    """
    full = reply_ids("hello there")
    requests: list[TurnRequest] = []
    cuts = iter(splits[0])
    calls = iter(versions)

    async def before_generate() -> None:  # a weight update between requests
        engine.policy_version = next(calls, engine.policy_version)

    async def generate(request: TurnRequest) -> Generation:
        requests.append(request)
        done = request.resume_from
        cut = next(cuts, None) if request.turn == 0 else None
        if cut is not None:
            return Generation(token_ids=full[done:cut], logprobs=fake_logprobs(full)[done:cut], finish_reason="abort")
        return Generation(token_ids=full[done:], logprobs=fake_logprobs(full)[done:])

    session = asyncio.run(
        engine.play(two_turn_env(), generate, env_id="test:Env-v0", seed=0, before_generate=before_generate)
    )
    return session, requests


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 5), max_size=4).map(sorted),
    versions=st.lists(st.integers(0, 3), min_size=1, max_size=6).map(lambda v: sorted(v)),
)
def test_an_aborted_generation_resumes_to_the_turn_an_unsplit_one_gives(cuts: list[int], versions: list[int]) -> None:
    full = reply_ids("hello there")
    engine = EpisodeEngine(TOK, max_resumes=4, max_turn_tokens=32)
    reference, _ = play_split(EpisodeEngine(TOK, max_turn_tokens=32), [[]], [0])
    session, requests = play_split(engine, [cuts], versions)
    turn = session.turns[0]
    assert session.end_reason == "env" and len(session.turns) == 2
    assert turn.action_token_ids == full and turn.action_logprobs == fake_logprobs(full)
    assert turn.action == reference.turns[0].action
    assert session.context == reference.context
    assert turn.resumed_at == (cuts or None)
    # every continuation: prompt = context + the ids so far, the cap less what they used
    first = requests[0]
    for request, done in zip(requests[1 : len(cuts) + 1], cuts, strict=True):
        assert request.turn == 0 and request.resume_from == done
        assert request.prompt_ids == [*(first.prompt_ids or []), *full[:done]]
        assert request.max_tokens == 32 - done
    # each token carries the version that answered the request which sampled it
    expected_versions: list[int] = []
    for k, end in enumerate([*cuts, len(full)]):
        expected_versions += [versions[min(k, len(versions) - 1)]] * (end - len(expected_versions))
    assert turn.policy_versions == expected_versions
    assert turn.policy_version == min(expected_versions)
    assert session.episode().metadata["resumes"] == len(cuts)


def test_without_max_resumes_an_abort_ends_the_episode_as_before() -> None:
    session, _ = play_split(EpisodeEngine(TOK), [[3]], [0])
    assert session.end_reason == "abort" and session.turns == []


def test_more_aborts_than_max_resumes_end_the_episode() -> None:
    session, requests = play_split(EpisodeEngine(TOK, max_resumes=2), [[1, 2, 3]], [0])
    assert session.end_reason == "abort" and session.turns == [] and len(requests) == 3


def test_an_abort_that_used_the_whole_cap_is_a_cut_reply() -> None:
    session, requests = play_split(EpisodeEngine(TOK, max_resumes=2, max_turn_tokens=4, on_cut="pass"), [[4]], [0])
    assert [r.turn for r in requests] == [0, 1]  # no continuation of turn 0: nothing was left of its cap
    assert (
        session.turns[0].stop_reason == "length" and session.turns[0].action_token_ids == reply_ids("hello there")[:4]
    )


def test_every_token_turn_records_its_version_without_aborts() -> None:
    session, _ = play_split(EpisodeEngine(TOK), [[]], [5, 7])
    size = len(reply_ids("hello there"))
    assert [t.policy_versions for t in session.turns] == [[5] * size, [7] * size]
    assert all(t.resumed_at is None for t in session.turns)


def test_a_server_reported_version_wins_and_is_checked() -> None:
    engine = EpisodeEngine(TOK)
    ids = reply_ids("hi")

    async def generate(request: TurnRequest) -> Generation:
        return Generation(token_ids=ids, policy_version=9)

    session = asyncio.run(engine.play(two_turn_env(), generate, seed=0))
    assert session.turns[0].policy_versions == [9] * len(ids)

    async def bad(request: TurnRequest) -> Generation:
        return Generation(token_ids=ids, policy_version="v9")  # type: ignore[arg-type]

    with pytest.raises(GenerateContractError, match="policy_version must be an int"):
        asyncio.run(engine.play(two_turn_env(), bad, seed=0))


@pytest.mark.parametrize("on_stale", ["drop", "raise"])
def test_max_policy_lag_is_checked_before_each_request(on_stale: str) -> None:
    engine = EpisodeEngine(TOK, max_policy_lag=1, on_stale=on_stale)
    ids = reply_ids("hi")
    calls: list[int] = []

    async def generate(request: TurnRequest) -> Generation:
        calls.append(engine.policy_version)
        engine.policy_version += 2  # a weight update of two versions while the env steps
        return Generation(token_ids=ids)

    if on_stale == "raise":
        with pytest.raises(PolicyLagError, match="2 versions behind, max_policy_lag=1"):
            asyncio.run(engine.play(two_turn_env(), generate, seed=0))
    else:
        session = asyncio.run(engine.play(two_turn_env(), generate, seed=0))
        assert session.end_reason == "stale" and session.metadata["policy_lag"] == 2
    assert calls == [0]  # the second turn is never asked for


def test_play_batch_drops_stale_episodes_too() -> None:
    engine = EpisodeEngine(TOK, max_policy_lag=0)
    ids = reply_ids("hi")

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        engine.policy_version += 1
        return [Generation(token_ids=ids) for _ in requests]

    sessions = engine.play_batch([EpisodeJob(env=two_turn_env(), seed=s) for s in range(2)], generate)
    assert [s.end_reason for s in sessions] == ["stale", "stale"] and all(len(s.turns) == 1 for s in sessions)


def test_message_mode_records_no_versions_and_an_abort_ends_it() -> None:
    engine = EpisodeEngine(None, max_resumes=3)

    async def generate(request: TurnRequest) -> Generation:
        return Generation(text="partial", finish_reason="abort")

    session = asyncio.run(engine.play(two_turn_env(), generate, seed=0))
    assert session.end_reason == "abort"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_resumes": -1}, "max_resumes must be an int >= 0"),
        ({"max_resumes": None}, "max_resumes must be an int >= 0"),
        ({"max_policy_lag": 1.5}, "max_policy_lag must be an int >= 0"),
        ({"on_stale": "ignore"}, "on_stale must be one of"),
    ],
    ids=["negative-resumes", "none-resumes", "float-lag", "bad-on-stale"],
)
def test_partial_rollout_settings_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EpisodeLimits(**kwargs)
