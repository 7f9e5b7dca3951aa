"""Token in / token out with branch points: one sequence per consistent segment (episodes captured by gem gateway)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError, TemplatePrefixError, TrajectoryError
from gem_core.rl.layouts import episode_segments, episode_to_segments, episode_to_sequence, episodes_to_segments
from gem_core.rl.types import Episode, Turn


def chained_episode(plan: list[tuple[bool, int, int]]) -> Episode:
    """Turns whose prompts extend the previous prompt plus its action, except where ``plan`` says branch.

    Each entry: (branch here, generated length, bridge length). A branch re-renders: the prompt is
    fresh ids that do not start with the context so far.
    """
    turns, context, serial = [], [1000, 1001], 2000
    for index, (branch, generated, bridge) in enumerate(plan):
        if branch and index > 0:
            context = [900 + index, *context[1:3]]  # a rewritten history: its first token differs
        prompt = list(context)
        action = list(range(serial, serial + generated))
        serial += generated
        turns.append(
            Turn(
                observation=f"o{index}",
                action=f"a{index}",
                reward=float(index),
                prompt_token_ids=prompt,
                action_token_ids=action,
                action_logprobs=[-0.5] * generated,
                policy_versions=[index] * generated,
            )
        )
        context = [*prompt, *action, *range(5000 + 10 * index, 5000 + 10 * index + bridge)]
    return Episode(turns, start_state_id="env/seed=0", episode_id="ep")


plans = st.lists(st.tuples(st.booleans(), st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(plans)
def test_every_generated_token_is_trained_once_in_the_segment_of_its_turn(plan: list[tuple[bool, int, int]]) -> None:
    episode = chained_episode(plan)
    advantages = np.arange(len(plan), dtype=np.float64) + 0.5
    bounds = episode_segments(episode)
    assert [start for start, _ in bounds] == [0] + [i for i, (b, _, _) in enumerate(plan) if b and i > 0]
    sequences = episode_to_segments(episode, advantages=advantages)
    assert len(sequences) == len(bounds)
    trained = []
    for sequence, (start, _) in zip(sequences, bounds, strict=True):
        first = episode.turns[start]
        assert sequence.input_ids[: sequence.prompt_length].tolist() == list(first.prompt_token_ids or [])
        for offset, (lo, hi) in enumerate(sequence.turn_spans):
            turn = episode.turns[start + offset]
            assert sequence.input_ids[lo:hi].tolist() == turn.action_token_ids
            assert set(sequence.token_advantages[lo:hi].tolist()) == {advantages[start + offset]}
            assert sequence.token_policy_versions[lo:hi].tolist() == turn.policy_versions
        trained += sequence.input_ids[sequence.loss_mask == 1].tolist()
    assert trained == [t for turn in episode.turns for t in turn.action_token_ids or []]
    assert [s.episode_id for s in sequences] == ["ep"] + [f"ep#{k}" for k in range(1, len(bounds))]


def test_without_branch_points_the_segment_is_the_episodes_sequence() -> None:
    episode = chained_episode([(False, 3, 2), (False, 2, 1), (False, 1, 0)])
    (only,) = episode_to_segments(episode)
    whole = episode_to_sequence(episode)
    assert only.input_ids.tolist() == whole.input_ids.tolist()
    assert only.loss_mask.tolist() == whole.loss_mask.tolist()


def test_the_whole_episode_layout_refuses_what_segments_accept() -> None:
    episode = chained_episode([(False, 2, 1), (True, 2, 1)])
    with pytest.raises(TemplatePrefixError):
        episode_to_sequence(episode)
    assert len(episode_to_segments(episode)) == 2


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param({"prompt_token_ids": None}, TrajectoryError, id="no-prompt-ids"),
        pytest.param(
            {"action_token_ids": None, "action_logprobs": None, "policy_versions": None},
            TrajectoryError,
            id="no-action-ids",
        ),
    ],
)
def test_segments_need_recorded_ids(change: dict, error: type[Exception]) -> None:
    episode = chained_episode([(False, 2, 1), (False, 2, 1)])
    for name, value in change.items():
        setattr(episode.turns[1], name, value)
    with pytest.raises(error, match="turn 1"):
        episode_segments(episode)


def test_advantages_must_cover_the_whole_episode() -> None:
    episode = chained_episode([(False, 2, 1), (True, 2, 1)])
    with pytest.raises(RLInputError, match="2 turns but 1 advantages"):
        episode_to_segments(episode, advantages=[1.0])
    with pytest.raises(RLInputError, match="advantages for 1 episodes"):
        episodes_to_segments([episode, episode], advantages=[[1.0, 2.0]])
    assert len(episodes_to_segments([episode, episode])) == 4
