"""The generate contract: hostile answers of ``generate`` give a typed error naming the episodes, never bad records.

Checked at the engine's boundary: :meth:`EpisodeEngine.play`, :meth:`EpisodeEngine.play_batch`
and :class:`EpisodeRunner` (batched and per-request policies).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gem_core.core import StepReturn
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
from gem_core.errors import GenerateContractError, TrajectoryError
from gem_core.runner import EpisodeRunner
from gem_core.testing import GenericTestEnv

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "test:Echo-v0"
#: The finish reasons the engine takes, and the one each becomes (vLLM's "repetition" is a cut).
ACCEPTED_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "repetition": "length"}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def vocab() -> int:
    return len(tokenizer())


def good(turn: int = 0) -> Generation:
    tok = tokenizer()
    ids = [*tok.encode(f"move {turn}", add_special_tokens=False), tok.eos_token_id]
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids))


def echo_env(length: int = 3) -> GenericTestEnv:
    """Ends after ``length`` steps and records every action it was sent."""

    def step(env: GenericTestEnv, action: str) -> StepReturn:
        env.actions.append(action)  # type: ignore[attr-defined]
        return f"obs {env.t}", 1.0, env.t >= length, False, {}

    env = GenericTestEnv(step_func=step)
    env.actions = []  # type: ignore[attr-defined]
    return env


# ----------------------------------------------------------------- hostile answers, one per request


def _ids(draw: st.DrawFn) -> list[int]:
    return draw(st.lists(st.integers(0, vocab() - 1), min_size=1, max_size=6))


@st.composite
def hostile_answer(draw: st.DrawFn) -> tuple[object, str]:
    """An answer breaking the token-mode contract, and a fragment the error must contain."""
    kind = draw(
        st.sampled_from(
            [
                "none",
                "int",
                "dict",
                "list",
                "text",
                "no-ids",
                "id-too-big",
                "id-negative",
                "id-float",
                "id-str",
                "logprob-nonfinite",
                "logprob-length",
                "logprob-str",
                "finish-reason",
                "finish-reason-unknown",
                "text-not-str",
            ]
        )
    )
    ids = _ids(draw)
    if kind == "none":
        return None, "generate returned NoneType"
    if kind == "int":
        return draw(st.integers()), "generate returned int"
    if kind == "dict":
        return {"token_ids": ids}, "generate returned dict"
    if kind == "list":
        return ids, "generate returned list"
    if kind == "text":
        return "a reply", "generate returned text"
    if kind == "no-ids":
        return Generation(text="a reply"), "no token_ids"
    if kind == "id-too-big":
        bad = draw(st.integers(vocab(), 2**40))
        at = draw(st.integers(0, len(ids)))
        return Generation(token_ids=[*ids[:at], bad, *ids[at:]]), f"token id {bad} is outside"
    if kind == "id-negative":
        bad = draw(st.integers(-(2**40), -1))
        return Generation(token_ids=[*ids, bad]), f"token id {bad} is outside"
    if kind == "id-float":
        return Generation(token_ids=[*ids, 3.5]), "token_ids must be a list of ints"  # type: ignore[list-item]
    if kind == "id-str":
        return Generation(token_ids="12"), "token_ids must be a list of ints"  # type: ignore[arg-type]
    if kind == "logprob-nonfinite":
        logprobs = [-0.1] * len(ids)
        logprobs[draw(st.integers(0, len(ids) - 1))] = draw(st.sampled_from([math.nan, -math.inf, math.inf]))
        return Generation(token_ids=ids, logprobs=logprobs), "is not finite"
    if kind == "logprob-length":
        n = draw(st.integers(0, 8).filter(lambda n: n != len(ids)))
        return Generation(token_ids=ids, logprobs=[-0.1] * n), f"{n} logprobs for {len(ids)} generated tokens"
    if kind == "logprob-str":
        return Generation(token_ids=ids, logprobs=["x"] * len(ids)), "logprobs must be a list of floats"  # type: ignore[list-item]
    if kind == "finish-reason":
        return Generation(token_ids=ids, finish_reason=draw(st.sampled_from([None, 1, b"stop"]))), "finish_reason"  # type: ignore[arg-type]
    if kind == "finish-reason-unknown":
        # vLLM's "error", casings and any other name: never scored as if the model had ended its turn
        reason = draw(st.sampled_from(["error", "Stop", "completed", ""]) | st.text(max_size=12))
        assume(reason not in ACCEPTED_FINISH)
        return Generation(token_ids=ids, finish_reason=reason), f"finish_reason {reason!r}"
    return Generation(token_ids=ids, text=draw(st.sampled_from([1, b"x", ["a"]]))), "text is"  # type: ignore[arg-type]


def assert_names(exc: BaseException, seed: int, turn: int) -> None:
    assert isinstance(exc, GenerateContractError) and isinstance(exc, TrajectoryError)
    assert f"{ENV_ID} seed={seed} turn={turn}" in exc.episodes
    assert f"{ENV_ID} seed={seed} turn={turn}" in str(exc)
    assert "a generate must return" in str(exc)  # says what the contract is


@SETTINGS
@given(answer=hostile_answer(), bad_turn=st.integers(0, 2), seed=st.integers(0, 2**31))
def test_play_refuses_a_hostile_answer_before_the_env_sees_it(
    answer: tuple[object, str], bad_turn: int, seed: int
) -> None:
    value, fragment = answer
    env = echo_env(length=4)
    engine = EpisodeEngine(tokenizer())
    session = engine.session(env_id=ENV_ID, seed=seed)

    async def generate(request: TurnRequest) -> Any:
        return value if request.turn == bad_turn else good(request.turn)

    with pytest.raises(GenerateContractError) as info:
        asyncio.run(engine.play(env, generate, env_id=ENV_ID, seed=seed, session=session))
    assert fragment in str(info.value)
    assert_names(info.value, seed, bad_turn)
    assert env.actions == [f"move {t}" for t in range(bad_turn)]  # type: ignore[attr-defined]
    assert session.end_reason == "error" and session.metadata["error_phase"] == "generate"
    assert session.episode().num_turns == bad_turn


@SETTINGS
@given(
    size=st.integers(1, 4),
    data=st.data(),
    bad_turn=st.integers(0, 2),
)
def test_play_batch_refuses_hostile_answers_and_steps_no_env_of_that_turn(
    size: int, data: st.DataObject, bad_turn: int
) -> None:
    bad = data.draw(st.sets(st.integers(0, size - 1), min_size=1), label="bad episodes")
    answers = {i: data.draw(hostile_answer(), label=f"answer {i}") for i in bad}
    envs = [echo_env(length=4) for _ in range(size)]
    jobs = [EpisodeJob(env=env, env_id=ENV_ID, seed=10 + i) for i, env in enumerate(envs)]

    def generate(requests: list[TurnRequest]) -> list[Any]:
        return [
            answers[r.episode_index][0] if r.turn == bad_turn and r.episode_index in bad else good(r.turn)
            for r in requests
        ]

    with pytest.raises(GenerateContractError) as info:
        EpisodeEngine(tokenizer()).play_batch(jobs, generate)
    for i in bad:
        assert_names(info.value, 10 + i, bad_turn)
        assert answers[i][1] in str(info.value)
    assert sorted(info.value.episodes) == sorted(f"{ENV_ID} seed={10 + i} turn={bad_turn}" for i in bad)
    # the batch is checked whole before any env steps: every env saw exactly the turns before
    assert all(env.actions == [f"move {t}" for t in range(bad_turn)] for env in envs)  # type: ignore[attr-defined]


BATCH_SHAPES = {
    "none": (lambda n: None, "returned NoneType"),
    "int": (lambda n: n, "returned int"),
    "dict": (lambda n: {i: good() for i in range(n)}, "returned dict"),
    "one-generation": (lambda n: good(), "returned Generation"),
    "text": (lambda n: "reply", "returned str"),
    "too-few": (lambda n: [good()] * (n - 1), "answers for"),
    "too-many": (lambda n: [good()] * (n + 1), "answers for"),
}


@pytest.mark.parametrize("shape", list(BATCH_SHAPES), ids=list(BATCH_SHAPES))
@pytest.mark.parametrize("size", [1, 3], ids=["one-episode", "three-episodes"])
def test_play_batch_refuses_a_batch_of_the_wrong_shape(shape: str, size: int) -> None:
    make, fragment = BATCH_SHAPES[shape]
    jobs = [EpisodeJob(env=echo_env(), env_id=ENV_ID, seed=i) for i in range(size)]
    with pytest.raises(GenerateContractError, match=fragment) as info:
        EpisodeEngine(tokenizer()).play_batch(jobs, lambda requests: make(len(requests)))
    assert info.value.episodes == [f"{ENV_ID} seed={i} turn=0" for i in range(size)]
    assert "a batched generate returns a list with one answer per request" in str(info.value)


@SETTINGS
@given(size=st.integers(2, 5), data=st.data())
def test_play_batch_refuses_answers_carrying_another_requests_id(size: int, data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(size)).filter(lambda p: list(p) != sorted(p)), label="answer order")
    envs = [echo_env() for _ in range(size)]
    jobs = [EpisodeJob(env=env, env_id=ENV_ID, seed=i) for i, env in enumerate(envs)]

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        answers = [dataclasses.replace(good(r.turn), request_id=r.request_id) for r in requests]
        return [answers[i] for i in order]  # each answer carries its request's id, in another order

    with pytest.raises(GenerateContractError, match="an answer meant for another request") as info:
        EpisodeEngine(tokenizer()).play_batch(jobs, generate)
    misplaced = [i for i, j in enumerate(order) if i != j]
    assert sorted(info.value.episodes) == sorted(f"{ENV_ID} seed={i} turn=0" for i in misplaced)
    assert all(env.actions == [] for env in envs)  # type: ignore[attr-defined]


def test_each_request_has_its_own_id_and_an_answer_carrying_it_is_taken() -> None:
    engine = EpisodeEngine(tokenizer())
    seen: list[str] = []

    async def generate(request: TurnRequest) -> Generation:
        seen.append(request.request_id)
        return dataclasses.replace(good(request.turn), request_id=request.request_id)

    session = asyncio.run(engine.play(echo_env(), generate, env_id=ENV_ID, seed=1))
    assert session.end_reason == "env" and len(session.turns) == 3
    assert len(set(seen)) == len(seen) == 3
    assert [rid.rsplit("/", 1)[0] for rid in seen] == [f"{session.episode_id}/turn{t}" for t in range(3)]


def test_a_raising_batched_generate_names_every_episode_of_the_batch() -> None:
    jobs = [EpisodeJob(env=echo_env(length=i + 1), env_id=ENV_ID, seed=i) for i in range(3)]
    engine = EpisodeEngine(tokenizer())
    calls = 0

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("inference server down")
        return [good(r.turn) for r in requests]

    with pytest.raises(ConnectionError) as info:
        engine.play_batch(jobs, generate)
    (note,) = [n for n in info.value.__notes__ if "batched generate call" in n]
    # episode 0 ended after one turn; the call of turn 1 served episodes 1 and 2
    assert f"{ENV_ID} seed=1 turn=1" in note and f"{ENV_ID} seed=2 turn=1" in note and "seed=0" not in note


@SETTINGS
@given(
    ids=st.lists(st.integers(0, 399), min_size=1, max_size=6),
    kind=st.sampled_from(["numpy", "tuple", "list"]),
)
def test_integer_and_float_kinds_that_are_numbers_pass_and_are_recorded_as_python_numbers(
    ids: list[int], kind: str
) -> None:
    logprobs = [-0.25] * len(ids)
    token_ids: Any = {"numpy": np.asarray(ids, dtype=np.int64), "tuple": tuple(ids), "list": ids}[kind]
    lp: Any = np.asarray(logprobs, dtype=np.float32) if kind == "numpy" else logprobs

    async def generate(request: TurnRequest) -> Generation:
        return Generation(token_ids=token_ids, logprobs=lp)

    session = asyncio.run(EpisodeEngine(tokenizer(), max_turns=1).play(echo_env(), generate, env_id=ENV_ID, seed=0))
    turn = session.episode().turns[0]
    assert turn.action_token_ids == ids and all(type(t) is int for t in turn.action_token_ids)
    assert turn.action_logprobs == logprobs and all(type(x) is float for x in turn.action_logprobs or [])


def test_message_mode_contract() -> None:
    async def generate(request: TurnRequest) -> Any:
        return {"content": "hi"}

    with pytest.raises(GenerateContractError, match="the reply text") as info:
        asyncio.run(EpisodeEngine().play(echo_env(), generate, env_id=ENV_ID, seed=4))
    assert info.value.episodes == [f"{ENV_ID} seed=4 turn=0"]


def test_the_vocabulary_can_be_given() -> None:
    async def generate(request: TurnRequest) -> Generation:
        return Generation(token_ids=[7, 8])

    with pytest.raises(GenerateContractError, match=r"token id 8 is outside the tokenizer's vocabulary \[0, 8\)"):
        asyncio.run(EpisodeEngine(tokenizer(), vocab_size=8).play(echo_env(), generate, env_id=ENV_ID, seed=0))


# ----------------------------------------------------------------- the runner: nothing lost, one raise per fault


def runner_with(generate: Any, *, in_flight: int, length: int = 3) -> EpisodeRunner:
    return EpisodeRunner(
        lambda: echo_env(length=length),
        generate=generate,
        tokenizer=tokenizer(),
        max_in_flight=in_flight,
        seed=0,
        keep_pool_full=False,
    )


BATCH_FAULTS = {
    "raises": lambda requests: (_ for _ in ()).throw(ConnectionError("inference server down")),
    "returns-none": lambda requests: None,
    "returns-dict": lambda requests: {"choices": []},
    "too-few": lambda requests: [good(r.turn) for r in requests][1:],
}


@SETTINGS
@given(
    fault=st.sampled_from(sorted(BATCH_FAULTS)),
    failing_calls=st.sets(st.integers(1, 6), min_size=1, max_size=3),
    in_flight=st.integers(1, 4),
    wanted=st.integers(1, 6),
)
def test_runner_keeps_every_episode_when_a_batched_call_fails(
    fault: str, failing_calls: set[int], in_flight: int, wanted: int
) -> None:
    calls = 0
    requested: list[set[int]] = []

    async def generate(requests: list[TurnRequest]) -> Any:
        nonlocal calls
        calls += 1
        requested.append({r.episode_index for r in requests})
        if calls in failing_calls:
            return BATCH_FAULTS[fault](requests)
        return [good(r.turn) for r in requests]

    async def main() -> tuple[list[Any], int]:
        async with runner_with(generate, in_flight=in_flight) as runner:
            episodes: list[Any] = []
            raised = 0
            for _ in range(30):  # each collect raises at most once; the faults run out
                try:
                    episodes += await runner.collect(wanted - len(episodes))
                except (ConnectionError, GenerateContractError) as exc:
                    raised += 1
                    assert any("they are kept, paused" in note for note in exc.__notes__)
                if len(episodes) == wanted:
                    return episodes, raised
            raise AssertionError("episodes were lost")

    episodes, raised = asyncio.run(main())
    assert raised <= len(failing_calls)
    # nothing lost, nothing doubled: every episode whole, each index once
    assert sorted(e.metadata["index"] for e in episodes) == list(range(wanted))
    for episode in episodes:
        assert episode.metadata["end_reason"] == "env" and episode.num_turns == 3
        assert [t.action for t in episode.turns] == ["move 0", "move 1", "move 2"]


def test_runner_raises_a_failed_call_once_then_resumes_its_episodes() -> None:
    calls = 0

    async def generate(requests: list[TurnRequest]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("inference server down")
        return [good(r.turn) for r in requests]

    async def main() -> None:
        async with runner_with(generate, in_flight=4) as runner:
            with pytest.raises(ConnectionError) as info:
                await runner.collect(4)
            note = next(n for n in info.value.__notes__ if "batched generate call" in n)
            assert note.count("turn=1") == 4  # every episode of the failed call is named
            assert runner.in_flight == 4  # none lost
            episodes = await runner.collect(4)
            assert sorted(e.metadata["index"] for e in episodes) == [0, 1, 2, 3]

    asyncio.run(main())


def test_runner_one_bad_answer_ends_that_episode_only() -> None:
    async def generate(requests: list[TurnRequest]) -> Any:
        return [None if (r.episode_index == 1 and r.turn == 1) else good(r.turn) for r in requests]

    async def main() -> None:
        async with runner_with(generate, in_flight=3) as runner:
            with pytest.raises(GenerateContractError, match="generate returned NoneType") as info:
                await runner.collect(3)
            assert info.value.episodes and info.value.episodes[0].endswith("turn=1")
            episodes = await runner.collect(2)  # the two others were kept
            assert sorted(e.metadata["index"] for e in episodes) == [0, 2]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (None, "token_policy returned NoneType"),
        ({"ids": [1]}, "token_policy returned dict"),
        (([1, 2], [-0.1, math.nan]), "is not finite"),
        ([10**9], "outside the tokenizer's vocabulary"),
    ],
    ids=["none", "dict", "nan-logprob", "id-outside-vocabulary"],
)
def test_runner_token_policy_contract(answer: Any, fragment: str) -> None:
    async def policy(prompt_ids: list[int]) -> Any:
        return answer

    async def main() -> None:
        async with EpisodeRunner(echo_env, token_policy=policy, tokenizer=tokenizer(), seed=0) as runner:
            with pytest.raises(GenerateContractError, match=fragment):
                await runner.collect(2)

    asyncio.run(main())


def test_runner_raises_several_episode_errors_once() -> None:
    waiting = 0
    together = asyncio.Event()

    async def policy(prompt_ids: list[int]) -> Any:
        nonlocal waiting
        waiting += 1
        if waiting == 3:
            together.set()
        await together.wait()  # all three fail in the same loop turn
        return None

    async def main() -> None:
        envs = [echo_env() for _ in range(3)]
        async with EpisodeRunner(envs, token_policy=policy, tokenizer=tokenizer(), seed=0) as runner:
            with pytest.raises(GenerateContractError) as info:
                await runner.collect(3)
            assert any("2 more error(s) in this collect" in note for note in info.value.__notes__)
            assert runner.in_flight == 0 and not runner._errors  # raised once, not three times

    asyncio.run(main())


@pytest.mark.parametrize(("reason", "recorded"), sorted(ACCEPTED_FINISH.items()), ids=sorted(ACCEPTED_FINISH))
def test_accepted_finish_reasons_and_what_each_becomes(reason: str, recorded: str) -> None:
    engine = EpisodeEngine(tokenizer())
    session = engine.session(env_id=ENV_ID, seed=0)
    session.begin("the first observation")
    tok = tokenizer()
    ids = tok.encode("move", add_special_tokens=False)  # no stop token: a cut stays a cut
    assert session.check(Generation(token_ids=ids, finish_reason=reason)).finish_reason == recorded
