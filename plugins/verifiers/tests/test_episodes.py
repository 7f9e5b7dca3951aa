"""verifiers episodes into gem episodes, built with verifiers' own graph code (``prepare_turn(...).commit``).

Each trace below is made the way verifiers' train client makes one: per model call, the prompt
messages go through ``verifiers.v1.graph.prepare_turn`` and the reply is committed with the
``TurnTokens`` (prompt ids, completion ids, logprobs) an engine returned. The property tests
run over conversations of any length with user and tool turns, any finish reasons and rewards.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import verifiers.v1 as vf
from hypothesis import given, settings
from hypothesis import strategies as st
from verifiers.v1.graph import prepare_turn

from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.layouts import episodes_to_sequences
from gem_verifiers import VerifiersEpisodeFailed, VerifiersTraceError, message_text, to_gem_episodes

_TEXT = st.text(alphabet="abcdefgh 0123456789+=?", min_size=1, max_size=12)


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    """A multi-turn rollout: per model turn, the messages that arrive first, then the reply and its tokens."""
    n_turns = draw(st.integers(1, 4))
    turns = []
    for index in range(n_turns):
        arrivals = []
        for _ in range(draw(st.integers(1, 2))):
            kind = draw(st.sampled_from(["user", "tool"])) if index else "user"
            arrivals.append((kind, draw(_TEXT)))
        turns.append(
            {
                "arrivals": arrivals,
                "reply": draw(_TEXT),
                "calls_tool": index < n_turns - 1 and draw(st.booleans()),
                "scaffold": draw(st.integers(1, 3)),  # the generation prompt's tokens
                "completion": draw(st.integers(1, 5)),
                "logprobs": draw(st.lists(st.floats(-20, 0), min_size=5, max_size=5)),
                "finish": draw(st.sampled_from(["stop", "length", "tool_calls"])),
            }
        )
    rewards = draw(st.dictionaries(st.sampled_from(["correct", "format", "length"]), st.floats(-1, 1), max_size=3))
    weights = {name: draw(st.sampled_from([0.5, 1.0, 2.0])) for name in rewards}
    metrics = draw(st.dictionaries(st.sampled_from(["turns", "chars"]), st.floats(0, 100), max_size=2))
    return {"turns": turns, "rewards": rewards, "weights": weights, "metrics": metrics}


def build_episode(conversation: dict[str, Any], *, ok: bool = True) -> tuple[Any, list[dict[str, Any]]]:
    """A verifiers Episode with one trace, committed turn by turn; returns it and what each call saw."""
    trace = vf.Trace(
        task=vf.TraceTask(type="Task", data={"question": "q"}, key="task-7"),
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="solver"),
    )
    fresh = itertools.count(1000)
    messages: list[Any] = [vf.SystemMessage(content="You solve puzzles.")]
    tokens: list[int] = []
    seen = []
    for index, turn in enumerate(conversation["turns"]):
        for kind, text in turn["arrivals"]:
            if kind == "user":
                messages.append(vf.UserMessage(content=text))
            else:
                messages.append(vf.ToolMessage(content=text, tool_call_id=f"call-{index}"))
        # the engine's prompt: the previous sequence, the new messages' tokens, the generation prompt
        prompt_ids = tokens + [next(fresh) for _ in range(len(turn["arrivals"]) + turn["scaffold"])]
        completion_ids = [next(fresh) for _ in range(turn["completion"])]
        logprobs = turn["logprobs"][: turn["completion"]]
        tool_calls = (
            [vf.ToolCall(id=f"call-{index + 1}", name="calc", arguments='{"x": 1}')] if turn["calls_tool"] else None
        )
        reply = vf.AssistantMessage(content=turn["reply"], tool_calls=tool_calls)
        pending = prepare_turn(trace, list(messages), [])
        node = pending.commit(
            vf.Response(
                id=f"r{index}",
                created=0,
                model="tiny",
                message=reply,
                finish_reason=turn["finish"],
                tokens=vf.TurnTokens(
                    prompt_ids=prompt_ids, completion_ids=completion_ids, completion_logprobs=logprobs
                ),
            )
        )
        trace.calls.append(vf.ModelCall(node=node, finish_reason=turn["finish"]))
        seen.append({"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs})
        messages.append(reply)
        tokens = prompt_ids + completion_ids
    for name, score in conversation["rewards"].items():
        trace.record_reward(name, score, conversation["weights"][name])
    trace.record_metrics(conversation["metrics"])
    trace.is_completed = trace.ok = ok
    episode = vf.Episode(env=vf.EnvInfo(id="toy-env"), task=trace.task, traces=[trace], ok=ok)
    return episode, seen


@given(conversations())
@settings(max_examples=60, deadline=None)
def test_turns_are_the_engine_calls_token_for_token(conversation: dict[str, Any]) -> None:
    episode, seen = build_episode(conversation)
    (gem,) = to_gem_episodes(episode)
    assert len(gem.turns) == len(seen)
    for turn, call, spec in zip(gem.turns, seen, conversation["turns"], strict=True):
        assert list(turn.prompt_token_ids) == call["prompt_ids"]
        assert turn.action_token_ids == call["completion_ids"]
        assert turn.action_logprobs == pytest.approx(call["logprobs"])
        assert turn.observation == "\n".join(text for _, text in spec["arrivals"])
        assert turn.action.startswith(spec["reply"])
        assert ("<tool_call>" in turn.action) == spec["calls_tool"]
        assert turn.stop_reason == ("length" if spec["finish"] == "length" else "stop")
    for turn, nxt in itertools.pairwise(gem.turns):
        assert turn.next_observation == nxt.observation
        assert turn.reward == 0.0 and not turn.done


@given(conversations())
@settings(max_examples=60, deadline=None)
def test_reward_metrics_and_ids_are_kept(conversation: dict[str, Any]) -> None:
    episode, _ = build_episode(conversation)
    (gem,) = to_gem_episodes(episode)
    trace = episode.traces[0]
    expected = sum(score * conversation["weights"][name] for name, score in conversation["rewards"].items())
    last = gem.turns[-1]
    assert last.reward == pytest.approx(expected) == pytest.approx(trace.reward)
    truncated = conversation["turns"][-1]["finish"] == "length"
    assert (last.truncated, last.terminated) == (truncated, not truncated)
    meta = gem.metadata["verifiers"]
    assert meta["rewards"] == {
        name: {"score": pytest.approx(score), "weight": conversation["weights"][name]}
        for name, score in conversation["rewards"].items()
    }
    assert meta["metrics"] == pytest.approx(conversation["metrics"])
    assert (meta["trace_id"], meta["agent"], meta["task_key"], meta["ok"]) == (trace.id, "solver", "task-7", True)
    assert gem.start_state_id == "verifiers:toy-env/task-7@solver" and gem.env_id == "toy-env"


@given(st.lists(conversations(), min_size=1, max_size=4))
@settings(max_examples=30, deadline=None)
def test_gem_layout_is_verifiers_own_training_sample_and_rebn_applies(batch: list[dict[str, Any]]) -> None:
    episodes = [build_episode(c)[0] for c in batch]
    gems = [g for e in episodes for g in to_gem_episodes(e)]
    advantages = rebn_advantages(gems, gamma=0.9)
    sequences = episodes_to_sequences(gems, advantages=advantages)
    for episode, sequence in zip(episodes, sequences, strict=True):
        (branch,) = episode.traces[0].branches
        # the same tokens, the same trainable mask, the same logprobs as verifiers' own Branch view
        assert sequence.input_ids.tolist() == branch.token_ids
        assert sequence.loss_mask.astype(bool).tolist() == branch.sampled_mask
        np.testing.assert_allclose(sequence.token_logprobs, branch.logprobs)
    flat = np.concatenate(advantages)
    if flat.std() > 0:
        assert abs(flat.mean()) < 1e-9  # per-turn ReBN over every turn of the batch


def test_messages_with_parts_and_calls_become_text() -> None:
    parts = vf.UserMessage(content=[vf.TextContentPart(text="a"), vf.TextContentPart(text="b")])
    call = vf.AssistantMessage(content="x", tool_calls=[vf.ToolCall(id="1", name="calc", arguments='{"y": 2}')])
    assert message_text(parts) == "ab"
    assert message_text(call) == 'x\n<tool_call>{"name": "calc", "arguments": "{\\"y\\": 2}"}</tool_call>'


_ONE_TURN = {
    "turns": [
        {
            "arrivals": [("user", "1+1?")],
            "reply": "2",
            "calls_tool": False,
            "scaffold": 1,
            "completion": 2,
            "logprobs": [-0.5] * 5,
            "finish": "stop",
        }
    ],
    "rewards": {"correct": 1.0},
    "weights": {"correct": 1.0},
    "metrics": {},
}


def test_a_failed_episode_raises_or_is_kept_marked() -> None:
    episode, _ = build_episode(_ONE_TURN, ok=False)
    episode.errors.append(vf.Error(type="TimeoutError", message="run() exceeded its 5s deadline"))
    with pytest.raises(VerifiersEpisodeFailed, match="TimeoutError: run\\(\\) exceeded"):
        to_gem_episodes(episode)
    (kept,) = to_gem_episodes(episode, on_failed="keep")
    assert kept.metadata["verifiers"]["ok"] is False
    assert kept.metadata["verifiers"]["errors"] == ["TimeoutError: run() exceeded its 5s deadline"]


def test_a_relay_trace_without_tokens_is_refused_or_text_only() -> None:
    trace = vf.Trace(
        task=vf.TraceTask(type="Task", data={}, key="k"), agent=vf.AgentInfo(config=vf.AgentConfig(), name="solver")
    )
    prompt = [vf.UserMessage(content="hi")]
    prepare_turn(trace, prompt, []).commit(
        vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content="hello"), finish_reason="stop")
    )
    trace.is_completed = trace.ok = True
    episode = vf.Episode(task=trace.task, traces=[trace], ok=True)
    with pytest.raises(VerifiersTraceError, match="relay \\(eval\\) client"):
        to_gem_episodes(episode)
    (text_only,) = to_gem_episodes(episode, require_tokens=False)
    (turn,) = text_only.turns
    assert (turn.observation, turn.action, turn.prompt_token_ids, turn.action_token_ids) == ("hi", "hello", None, None)


@pytest.mark.parametrize(
    ("mask", "logprobs", "match"),
    [
        ([False, True, False], [-0.1], "not one suffix"),
        ([False, True, True], [-0.1], "1 logprobs for 2 sampled"),
        ([False, True], [-0.1], "mask has 2 entries for 3 tokens"),
    ],
    ids=["interleaved-mask", "short-logprobs", "short-mask"],
)
def test_malformed_nodes_are_typed_errors(mask: list[bool], logprobs: list[float], match: str) -> None:
    episode, _ = build_episode(_ONE_TURN)
    node = next(n for n in episode.traces[0].nodes if n.sampled)
    node.token_ids, node.mask, node.logprobs = [1, 2, 3], mask, logprobs
    with pytest.raises(VerifiersTraceError, match=match):
        to_gem_episodes(episode)


def test_untrainable_traces_are_skipped_unless_asked() -> None:
    episode, _ = build_episode(_ONE_TURN)
    episode.traces[0].agent.trainable = False  # e.g. a judge's trace
    assert to_gem_episodes(episode) == []
    assert len(to_gem_episodes(episode, trainable_only=False)) == 1


# ---------------------------------------------------------------- errors at every level, groups per seat

_LEVELS = st.lists(
    st.tuples(st.sampled_from(["episode", "trace", "call"]), st.sampled_from(["502 Bad Gateway", "boom", "deadline"])),
    min_size=1,
    max_size=5,
)


@given(_LEVELS)
@settings(max_examples=40, deadline=None)
def test_a_failed_episode_names_every_error_at_every_level_once(placed: list[tuple[str, str]]) -> None:
    """verifiers records errors on the episode, its traces and their model calls: each one reaches the message."""
    episode, _ = build_episode(_ONE_TURN, ok=False)
    trace = episode.traces[0]
    for level, text in placed:
        error = vf.Error(type="ProviderError", message=text, status_code=502 if text.startswith("502") else None)
        {"episode": episode.errors, "trace": trace.errors}.get(level, []).append(error)
        if level == "call":
            trace.calls[0].error = error  # a call holds one: the last placed
    expected = {e.message for e in [*episode.errors, *trace.errors]} | (
        {trace.calls[0].error.message} if trace.calls[0].error is not None else set()
    )
    with pytest.raises(VerifiersEpisodeFailed) as failed:
        to_gem_episodes(episode)
    message = str(failed.value)
    assert "no error recorded" not in message
    for text in expected:
        assert message.count(f"ProviderError: {text}") == 1, message
    if any(text.startswith("502") for text in expected):
        assert "(HTTP 502)" in message
    (kept,) = to_gem_episodes(episode, on_failed="keep")
    assert sorted(
        e.split(": ", 1)[1].removesuffix(" (HTTP 502)") for e in kept.metadata["verifiers"]["errors"]
    ) == sorted(expected)


def test_an_error_only_on_the_trace_says_where() -> None:
    episode, _ = build_episode(_ONE_TURN, ok=False)
    trace = episode.traces[0]
    trace.record_error(RuntimeError("relay answered 502 Bad Gateway"))  # verifiers' own recording
    with pytest.raises(VerifiersEpisodeFailed, match=rf"trace {trace.id} \(solver\): RuntimeError: relay answered 502"):
        to_gem_episodes(episode)


def test_a_failed_episode_without_any_error_says_so_and_names_the_stop_condition() -> None:
    episode, _ = build_episode(_ONE_TURN, ok=False)
    episode.traces[0].stop_condition = "agent_error"
    with pytest.raises(VerifiersEpisodeFailed, match="no error recorded on the episode, its traces or their model"):
        to_gem_episodes(episode)
    with pytest.raises(VerifiersEpisodeFailed, match="stop condition 'agent_error'"):
        to_gem_episodes(episode)


def _two_seat_hand(winner: str) -> Any:
    """One hand of a zero-sum two-player game: a trace per seat, +1 for the winner and -1 for the loser."""
    traces = []
    for seat in ("player_0", "player_1"):
        (solo, _) = build_episode({**_ONE_TURN, "rewards": {}, "weights": {}})
        trace = solo.traces[0]
        trace.agent = vf.AgentInfo(config=vf.AgentConfig(), name=seat)
        trace.record_reward("win", 1.0 if seat == winner else -1.0)
        traces.append(trace)
    return vf.Episode(env=vf.EnvInfo(id="kuhn"), task=traces[0].task, traces=traces, ok=True)


def test_the_two_seats_of_a_game_form_two_groups() -> None:
    from gem_core.rl.advantages import grpo_advantages

    hands = [_two_seat_hand("player_0") for _ in range(3)] + [_two_seat_hand("player_1")]
    episodes = [e for hand in hands for e in to_gem_episodes(hand)]
    groups: dict[str, set[str]] = {}
    for e in episodes:
        groups.setdefault(e.start_state_id, set()).add(e.metadata["verifiers"]["agent"])
    assert groups == {"verifiers:kuhn/task-7@player_0": {"player_0"}, "verifiers:kuhn/task-7@player_1": {"player_1"}}
    # each seat is compared with its own seat: seat 0 won 3 of 4 hands, so its wins are above its own mean
    advantages = {e.episode_id: float(a[-1]) for e, a in zip(episodes, grpo_advantages(episodes), strict=True)}
    for e in episodes:
        seat, reward = e.metadata["verifiers"]["agent"], e.turns[-1].reward
        same_seat = [x.turns[-1].reward for x in episodes if x.metadata["verifiers"]["agent"] == seat]
        assert np.sign(advantages[e.episode_id]) == np.sign(reward - np.mean(same_seat))
