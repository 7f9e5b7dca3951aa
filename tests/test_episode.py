"""gem_core.episode: an episode's rules (context, budgets, cut generations, truncation) through its drivers."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.core import StepReturn
from gem_core.episode import (
    INVALID_ACTION,
    EpisodeEngine,
    EpisodeJob,
    EpisodeLimits,
    Generation,
    TurnRequest,
    cut_at_stop,
)
from gem_core.errors import ConfigError, TemplatePrefixError, TrajectoryError
from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions
from gem_core.rl.types import Episode, PrefixView
from gem_core.testing import GenericTestEnv, NumberGuessEnv

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.testing_tokenizers import build_chat_tokenizer


@functools.cache
def tokenizer(template: str = "chatml") -> Any:
    return build_chat_tokenizer(template)


def reply(text: str, *, stop: bool = True) -> Generation:
    tok = tokenizer()
    ids = list(tok.encode(text, add_special_tokens=False)) + ([tok.eos_token_id] if stop else [])
    return Generation(token_ids=ids, finish_reason="stop" if stop else "length")


def recording_env(**kwargs: Any) -> GenericTestEnv:
    """An env that records the actions it was sent and ends after ``episode_length`` steps."""

    def step(env: GenericTestEnv, action: str) -> StepReturn:
        env.actions.append(action)  # type: ignore[attr-defined]
        done = env.t >= env.episode_length
        return f"obs {env.t}", float(env.t), done, False, {}

    env = GenericTestEnv(step_func=step, **kwargs)
    env.actions = []  # type: ignore[attr-defined]
    return env


def play(engine: EpisodeEngine, env: Any, replies: list[Generation | str], seed: int = 0) -> Any:
    script = iter(replies)
    seen: list[TurnRequest] = []

    async def generate(request: TurnRequest) -> Generation | str:
        seen.append(request)
        return next(script)

    session = asyncio.run(engine.play(env, generate, env_id="test:Env-v0", seed=seed))
    session.requests = seen
    return session


# --------------------------------------------------------------------------- cut generations


@pytest.mark.parametrize(
    ("on_cut", "sent", "turns", "end"),
    [
        ("invalid", [INVALID_ACTION, "b"], 2, "env"),
        ("pass", ["My guess", "b"], 2, "env"),
        ("truncate", [], 1, "cut"),
    ],
    ids=["invalid-by-default", "pass", "truncate"],
)
def test_a_cut_generation_is_not_a_valid_action(on_cut: str, sent: list[str], turns: int, end: str) -> None:
    env = recording_env(episode_length=2)
    engine = EpisodeEngine(tokenizer(), on_cut=on_cut)  # type: ignore[arg-type]
    session = play(engine, env, [reply("My guess", stop=False), reply("b")])
    assert env.actions == sent  # type: ignore[attr-defined]
    episode = session.episode()
    assert episode.num_turns == turns and session.end_reason == end
    first = episode.turns[0]
    assert first.stop_reason == "length"
    assert first.action_token_ids == reply("My guess", stop=False).token_ids  # trained on as generated
    if on_cut == "truncate":
        assert first.truncated and first.reward == 0.0 and first.next_observation == ""


def test_the_cut_action_gets_the_envs_own_penalty() -> None:
    engine = EpisodeEngine(tokenizer(), max_turn_tokens=4)
    long = reply("My guess is 12345678")  # longer than 4 tokens: the engine cuts it
    session = play(engine, NumberGuessEnv(), [long] + [reply("8")] * 5)
    first = session.episode().turns[0]
    assert first.action == INVALID_ACTION and first.stop_reason == "length"
    assert first.reward == -0.1 and first.info["format_error"] is True
    assert len(first.action_token_ids or []) == 4
    assert session.requests[0].max_tokens == 4


def test_a_reply_ending_with_its_stop_token_at_the_limit_is_complete() -> None:
    # vLLM V1 checks max_tokens before the stop token: it says "length" for a complete reply.
    tok = tokenizer()
    complete = Generation(
        token_ids=[*tok.encode("8", add_special_tokens=False), tok.eos_token_id], finish_reason="length"
    )
    env = recording_env(episode_length=1)
    session = play(EpisodeEngine(tok), env, [complete])
    assert env.actions == ["8"] and session.episode().turns[0].stop_reason == "stop"  # type: ignore[attr-defined]
    custom = EpisodeEngine(tok, stop_token_ids=[5])
    assert custom.stop_token_ids == frozenset({5})


def test_cut_at_stop() -> None:
    assert cut_at_stop([5, 6, 2, 9, 9], {2}, 5) == Generation(token_ids=[5, 6, 2], finish_reason="stop")
    assert cut_at_stop([5, 6, 7], {2}, 3, [-1.0, -2.0, -3.0]).finish_reason == "length"
    assert cut_at_stop([5, 6], {2}, 3).finish_reason == "stop"  # ended early without a stop token
    assert cut_at_stop([5, 2, 2], {2}, 3, [-1.0, -2.0, -3.0]).logprobs == [-1.0, -2.0]


# --------------------------------------------------------------------------- budgets and truncation


def test_max_turns_truncates_the_last_turn() -> None:
    session = play(EpisodeEngine(tokenizer(), max_turns=2), recording_env(episode_length=9), [reply("a"), reply("b")])
    episode = session.episode()
    assert [t.truncated for t in episode.turns] == [False, True] and session.end_reason == "max_turns"
    assert episode.truncated and not episode.terminated


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(1, 120),
    cap=st.one_of(st.none(), st.integers(1, 30)),
    lengths=st.lists(st.integers(1, 40), min_size=8, max_size=8),
)
def test_the_episode_budget_bounds_everything_after_the_first_prompt(
    budget: int, cap: int | None, lengths: list[int]
) -> None:
    engine = EpisodeEngine(tokenizer(), max_episode_tokens=budget, max_turn_tokens=cap)
    replies = [Generation(token_ids=[7] * n) for n in lengths]  # the stand-in ignores max_tokens
    session = play(engine, recording_env(episode_length=8), replies)  # type: ignore[arg-type]
    assert session.context is not None
    assert len(session.context) - session.prompt_length <= budget
    for request in session.requests:
        assert request.max_tokens is not None and request.max_tokens >= 1
        assert cap is None or request.max_tokens <= cap
    episode = session.episode()
    for turn in episode.turns:
        assert cap is None or len(turn.action_token_ids or []) <= cap
    if session.end_reason == "budget":
        assert episode.turns[-1].truncated
    # The recorded turns rebuild exactly the context the model saw.
    sequence = episode_to_sequence(episode)
    assert sequence.input_ids.tolist() == session.context[: sequence.num_tokens]


# --------------------------------------------------------------------------- token context


@pytest.mark.parametrize("template", ["chatml", "chatml_drop_think"])
def test_each_prompt_is_the_previous_prompt_plus_generated_ids_plus_a_bridge(template: str) -> None:
    tok = tokenizer(template)
    engine = EpisodeEngine(tok, system_prompt="sys")
    answers = ["<think>\nhmm\n</think>\n\n4", "<think>\nthen\n</think>\n\n6", "8"]
    replies = [Generation(token_ids=[*tok.encode(a, add_special_tokens=False), tok.eos_token_id]) for a in answers]
    session = play(engine, recording_env(episode_length=3), replies)  # type: ignore[arg-type]
    prompts = [r.prompt_ids for r in session.requests]
    assert prompts[0] == tok.encode(
        tok.apply_chat_template(
            [{"role": "system", "content": "sys"}, {"role": "user", "content": session.episode().turns[0].observation}],
            tokenize=False,
            add_generation_prompt=True,
        ),
        add_special_tokens=False,
    )
    for turn, (before, after) in enumerate(itertools.pairwise(prompts)):
        generated = replies[turn].token_ids or []
        assert after[: len(before) + len(generated)] == [*before, *generated]  # sampled ids kept verbatim
        bridge = tok.decode(after[len(before) + len(generated) :], skip_special_tokens=False)
        assert bridge == f"\n<|im_start|>user\nobs {turn + 1}<|im_end|>\n<|im_start|>assistant\n"
    assert [m["content"] for m in session.messages if m["role"] == "assistant"] == [
        tok.decode(r.token_ids, skip_special_tokens=True) for r in replies
    ]


def test_tool_results_come_back_as_tool_messages() -> None:
    def step(env: GenericTestEnv, action: str) -> StepReturn:
        return "result", 0.0, env.t >= 2, False, {"tool_calls": 1} if env.t == 1 else {}

    session = play(EpisodeEngine(tokenizer()), GenericTestEnv(step_func=step), [reply("call"), reply("done")])
    assert [m["role"] for m in session.messages] == ["user", "assistant", "tool", "assistant"]


def test_rerender_mode_re_renders_the_whole_history() -> None:
    tok = tokenizer("chatml_drop_think")
    engine = EpisodeEngine(tok, context="rerender")
    think = Generation(token_ids=[*tok.encode("<think>x</think>4", add_special_tokens=False), tok.eos_token_id])
    session = play(engine, recording_env(episode_length=2), [think, reply("b")])
    second = session.requests[1].prompt_ids
    assert "<think>" not in tok.decode(second)  # the template dropped it: the prompt was re-rendered


# --------------------------------------------------------------------------- records share the context


def layouts(episode: Episode, tok: Any) -> tuple[Any, Any]:
    """What both layouts make of an episode: arrays as lists, or the error they raise."""

    def outcome(build: Any) -> Any:
        try:
            built = build()
        except Exception as exc:
            return type(exc).__name__, str(exc)
        rows = built if isinstance(built, list) else [built]
        return [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in dataclasses.asdict(r).items()} for r in rows]

    advantages = [0.5 * i - 1 for i in range(episode.num_turns)]
    return (
        outcome(lambda: episode_to_sequence(episode, tok, advantages=advantages)),
        outcome(lambda: episode_to_transitions(episode, advantages, tok)),
    )


@settings(max_examples=60, deadline=None)
@given(
    mode=st.sampled_from(["delta", "rerender", "messages"]),
    template=st.sampled_from(["chatml", "chatml_drop_think"]),
    replies=st.lists(
        st.tuples(st.lists(st.integers(3, 399), min_size=1, max_size=24), st.booleans()), min_size=1, max_size=12
    ),
    budget=st.none() | st.integers(20, 400),
    on_cut=st.sampled_from(["invalid", "pass", "truncate"]),
    tamper=st.sampled_from(["none", "change", "drop", "add"]),
)
def test_recorded_prompts_are_views_equal_to_the_copies_the_engine_used_to_keep(
    mode: str, template: str, replies: list[tuple[list[int], bool]], budget: int | None, on_cut: str, tamper: str
) -> None:
    tok = tokenizer(template)
    token_mode = mode != "messages"
    engine = EpisodeEngine(
        tok if token_mode else None,
        context="rerender" if mode == "rerender" else "delta",
        max_episode_tokens=budget if token_mode else None,
        on_cut=on_cut,  # type: ignore[arg-type]
    )
    env = recording_env(episode_length=len(replies))
    session = engine.session(env_id="test:Env-v0", seed=0)
    session.begin(env.reset(seed=0)[0])
    script = iter(replies)
    copies: list[list[Any]] = []  # what each turn's record held before: a copy of the prompt at the request

    def recorded() -> list[Any]:
        return [t.prompt_token_ids if token_mode else t.prompt_messages for t in session.turns]

    while not session.done:
        request = session.request()
        copies.append(list(request.prompt_ids if request.prompt_ids is not None else request.messages))
        ids, stop = next(script)
        ids = [*ids, tok.eos_token_id] if stop else ids
        finish = "stop" if stop else "length"
        generation = (
            Generation(token_ids=ids, finish_reason=finish)
            if token_mode
            else Generation(text=tok.decode(ids, skip_special_tokens=True), finish_reason=finish)
        )
        action = session.accept(generation)
        if action is not None:
            session.observe(*env.step(action))
        # Every record so far equals its copy, though the context (history) has grown since.
        assert recorded() == copies[: len(session.turns)]
    views = recorded()
    assert views and all(isinstance(v, PrefixView) for v in views)
    if mode == "delta":  # one shared context; a rerendered context is a new list each turn
        assert all(views[0].shares_items(v) for v in views)
    episode = session.episode()
    copied = dataclasses.replace(
        episode,
        turns=[
            dataclasses.replace(t, **{"prompt_token_ids" if token_mode else "prompt_messages": c})
            for t, c in zip(episode.turns, copies, strict=False)
        ],
    )
    # The context and history may grow further (appending is all the engine does): no view changes.
    if session.context is not None:
        session.context.extend([5] * 9)
    session.messages.append({"role": "user", "content": "later"})
    assert recorded() == copies[: len(session.turns)]
    for turns in (episode.turns, copied.turns):  # an edited record no longer matches the context: same error
        generated = turns[0].action_token_ids
        if generated is not None and tamper != "none":
            changed = {"change": [*generated[:-1], generated[-1] % 399 + 1], "drop": generated[:-1]}
            turns[0].action_token_ids = changed.get(tamper, [*generated, 7])
            turns[0].policy_versions = [0] * len(turns[0].action_token_ids)  # one version per id, as recorded
    assert layouts(episode, tok) == layouts(copied, tok)
    line = episode.to_json()
    assert line == copied.to_json() and Episode.from_json(line) == copied
    assert all(
        type(t[key]) is list
        for t in episode.to_dict()["turns"]
        for key in ("prompt_token_ids", "prompt_messages")
        if key in t
    )
    assert pickle.loads(pickle.dumps(episode)) == copied


# --------------------------------------------------------------------------- message mode, errors


def test_message_mode_sends_messages_and_records_them() -> None:
    session = play(EpisodeEngine(system_prompt="sys"), recording_env(episode_length=2), ["a", "b"])
    episode = session.episode()
    assert session.requests[0].prompt_ids is None
    assert episode.turns[1].prompt_messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": episode.turns[0].observation},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "obs 1"},
    ]
    assert episode.turns[0].action_token_ids is None


@pytest.mark.parametrize(
    ("engine_kwargs", "generation", "message"),
    [
        ({"tokenizer": "chatml"}, Generation(text="no ids"), "no token_ids"),
        ({"tokenizer": "chatml"}, Generation(token_ids=[1, 2], logprobs=[-1.0]), "1 logprobs for 2"),
        ({}, Generation(token_ids=[1]), "no text"),
    ],
    ids=["ids-missing", "logprobs-mismatch", "text-missing"],
)
def test_generations_that_lack_what_the_mode_needs(
    engine_kwargs: dict[str, Any], generation: Generation, message: str
) -> None:
    tok = tokenizer(engine_kwargs.pop("tokenizer")) if "tokenizer" in engine_kwargs else None
    with pytest.raises(TrajectoryError, match=message) as info:
        play(EpisodeEngine(tok), recording_env(), [generation])
    assert any("in episode test:Env-v0/seed=0#0" in note for note in info.value.__notes__)


@pytest.mark.parametrize(
    "generation", [Generation(token_ids=[], finish_reason="stop"), Generation(token_ids=[5], finish_reason="abort")]
)
def test_an_empty_or_aborted_generation_ends_the_episode(generation: Generation) -> None:
    env = recording_env()
    session = play(EpisodeEngine(tokenizer()), env, [reply("a"), generation])
    assert session.end_reason == "abort" and session.episode().num_turns == 1
    assert env.actions == ["a"]  # type: ignore[attr-defined]


def test_env_errors_surface_with_the_episode_named() -> None:
    def step(env: GenericTestEnv, action: str) -> StepReturn:
        raise RuntimeError("env broke")

    with pytest.raises(RuntimeError, match="env broke") as info:
        play(EpisodeEngine(tokenizer()), GenericTestEnv(step_func=step), [reply("a")], seed=3)
    assert info.value.__notes__ == ["in episode test:Env-v0/seed=3#0 (test:Env-v0/seed=3, turn 0)"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_turns": 0}, "max_turns must be an int >= 1"),
        ({"max_episode_tokens": 2.5}, "max_episode_tokens must be an int"),
        ({"on_cut": "drop"}, "on_cut must be one of"),
        ({"max_turn": 3}, "unknown episode setting"),
        ({"context": "full"}, "context must be one of"),
        ({"limits": EpisodeLimits(), "max_turns": 3}, "not both"),
    ],
    ids=["zero-turns", "float-budget", "bad-on-cut", "typo", "bad-context", "limits-and-keywords"],
)
def test_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EpisodeEngine(None, **kwargs)


def test_the_template_is_probed_when_the_engine_is_built() -> None:
    class Counting:
        name_or_path = "tiny/counting"

        def apply_chat_template(self, messages: Any, **kwargs: Any) -> str:
            return f"{len(messages)}" + tokenizer().apply_chat_template(messages, **kwargs)

        def encode(self, text: str, **kwargs: Any) -> list[int]:
            return list(tokenizer().encode(text, **kwargs))

        def decode(self, ids: Any, **kwargs: Any) -> str:
            return str(tokenizer().decode(ids, **kwargs))

    with pytest.raises(TemplatePrefixError, match="tiny/counting"):
        EpisodeEngine(Counting())


# --------------------------------------------------------------------------- play_batch


def test_play_batch_sends_every_running_episode_in_one_call() -> None:
    engine = EpisodeEngine(tokenizer())
    jobs = [EpisodeJob(env=recording_env(episode_length=n), env_id="test:Env-v0", seed=n) for n in (1, 3, 2)]
    calls: list[list[int]] = []

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        calls.append([r.episode_index for r in requests])
        return [reply(f"turn {r.turn}") for r in requests]

    sessions = engine.play_batch(jobs, generate)
    assert calls == [[0, 1, 2], [1, 2], [1]]  # episodes drop out as they end
    assert [s.episode().num_turns for s in sessions] == [1, 3, 2]
    assert [s.start_state_id for s in sessions] == [f"test:Env-v0/seed={n}" for n in (1, 3, 2)]


def test_play_batch_checks_the_number_of_generations() -> None:
    jobs = [EpisodeJob(env=recording_env(), seed=0), EpisodeJob(env=recording_env(), seed=1)]
    with pytest.raises(TrajectoryError, match="1 answers for 2 requests"):
        EpisodeEngine(tokenizer()).play_batch(jobs, lambda requests: [reply("a")])
