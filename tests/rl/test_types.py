"""Trajectory records and their JSONL form."""

from __future__ import annotations

import json
import operator
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import TrajectoryError
from gem_core.rl.types import SCHEMA, Episode, PrefixView, Turn, iter_jsonl, read_jsonl, write_jsonl

texts = st.text(max_size=20)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), texts)


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    n_ids = draw(st.integers(0, 6))
    ids = draw(st.lists(st.integers(0, 50_000), min_size=n_ids, max_size=n_ids))
    with_ids = draw(st.booleans())
    return Turn(
        observation=draw(texts),
        action=draw(texts),
        reward=draw(st.floats(-1e6, 1e6, allow_nan=False)),
        terminated=draw(st.booleans()),
        truncated=draw(st.booleans()),
        next_observation=draw(texts),
        info=draw(st.dictionaries(st.text(min_size=1, max_size=5), json_scalars, max_size=3)),
        prompt_messages=draw(
            st.none() | st.lists(st.fixed_dictionaries({"role": texts, "content": texts}), max_size=3)
        ),
        prompt_token_ids=draw(st.none() | st.lists(st.integers(0, 50_000), max_size=8)),
        action_token_ids=ids if with_ids else None,
        action_logprobs=draw(st.lists(st.floats(-50, 0), min_size=n_ids, max_size=n_ids)) if with_ids else None,
        policy_versions=(
            draw(st.none() | st.lists(st.integers(0, 1000), min_size=n_ids, max_size=n_ids)) if with_ids else None
        ),
        resumed_at=sorted(draw(st.lists(st.integers(0, n_ids), max_size=3))) if with_ids else None,
    )


episodes = st.builds(
    Episode,
    turns=st.lists(turns(), max_size=4),
    start_state_id=st.text(min_size=1, max_size=12),
    episode_id=texts,
    env_id=st.none() | texts,
    seed=st.none() | st.integers(0, 2**32),
    metadata=st.dictionaries(st.text(max_size=5), json_scalars, max_size=3),
)


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(episodes)
def test_json_roundtrip_gives_an_equal_episode(episode: Episode) -> None:
    line = episode.to_json()
    assert "\n" not in line
    assert Episode.from_json(line) == episode


def test_jsonl_file_roundtrip(tmp_path: Path) -> None:
    batch = [
        Episode([Turn("o", "a", 1.0, terminated=True)], start_state_id="s", episode_id=str(i), seed=i) for i in range(3)
    ]
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(batch, path) == 3
    assert write_jsonl(batch[:1], path, append=True) == 1
    assert read_jsonl(path) == [*batch, batch[0]]
    assert json.loads(path.read_text().splitlines()[0])["schema"] == SCHEMA


def test_numpy_values_in_info_are_written_as_plain_json() -> None:
    turn = Turn("o", "a", np.float32(0.5), info={"n": np.int64(3), "v": np.arange(2), "ok": np.bool_(True)})
    data = json.loads(Episode([turn], start_state_id="s").to_json())
    assert data["turns"][0]["info"] == {"n": 3, "v": [0, 1], "ok": True}
    assert data["turns"][0]["reward"] == 0.5


def test_unserialisable_info_names_the_episode() -> None:
    episode = Episode([Turn("o", "a", 0.0, info={"obj": object()})], start_state_id="s", episode_id="e7")
    with pytest.raises(TrajectoryError, match="e7"):
        episode.to_json()


def test_bad_line_in_a_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = Episode([Turn("o", "a", 1.0)], start_state_id="s").to_json()
    path.write_text(good + "\n\n" + '{"start_state_id": "s", "turns": [{"observation": "o"}]}\n')
    reader = iter_jsonl(path)
    assert next(reader).turns[0].reward == 1.0
    with pytest.raises(TrajectoryError, match=r"bad\.jsonl:3: .*lacks required field"):
        next(reader)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward": float("nan")}, "finite"),
        ({"reward": float("inf")}, "finite"),
        ({"reward": "high"}, "number"),
        ({"action_logprobs": [-1.0]}, "action_token_ids is None"),
        ({"action_token_ids": [1, 2], "action_logprobs": [-1.0]}, "one logprob per generated token"),
        ({"prompt_messages": [{"content": "no role"}]}, "role"),
        ({"policy_versions": [0]}, "action_token_ids is None"),
        ({"action_token_ids": [1, 2], "policy_versions": [0]}, "one version per generated token"),
        ({"resumed_at": [0]}, "action_token_ids is None"),
        ({"action_token_ids": [1, 2], "resumed_at": [3]}, r"offsets in \[0, 2\]"),
        ({"action_token_ids": [1, 2], "resumed_at": [2, 1]}, "non-decreasing"),
        ({"action_token_ids": [1, 2], "resumed_at": [-1]}, "non-decreasing"),
        ({"action_token_ids": [1, 2], "resumed_at": [1.0]}, "int offsets"),
    ],
    ids=[
        "nan-reward",
        "inf-reward",
        "text-reward",
        "logprobs-without-ids",
        "logprob-count",
        "message-without-role",
        "versions-without-ids",
        "version-count",
        "resumed-without-ids",
        "resumed-past-the-end",
        "resumed-out-of-order",
        "resumed-negative",
        "resumed-float",
    ],
)
def test_malformed_turns_are_rejected(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"observation": "o", "action": "a", "reward": 0.0, **kwargs}
    with pytest.raises(TrajectoryError, match=message):
        Turn(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"schema": "gem.episode/99", "start_state_id": "s", "turns": []}, "unsupported episode schema"),
        ({"turns": []}, "start_state_id"),
        ({"start_state_id": "", "turns": []}, "non-empty"),
        ({"start_state_id": "s", "turns": {}}, "must be a list"),
        ({"start_state_id": "s", "turns": [{"observation": "o", "action": "a", "reward": 0, "rwd": 1}]}, "rwd"),
    ],
    ids=["future-schema", "no-start-state", "empty-start-state", "turns-not-list", "unknown-turn-field"],
)
def test_malformed_episode_records_are_rejected(record: dict[str, object], message: str) -> None:
    with pytest.raises(TrajectoryError, match=message):
        Episode.from_dict(record)


def test_non_json_line_is_a_trajectory_error() -> None:
    with pytest.raises(TrajectoryError, match="not a JSON"):
        Episode.from_json("{not json")
    with pytest.raises(TrajectoryError, match="JSON object"):
        Episode.from_json("[1, 2]")


def test_episode_summaries() -> None:
    episode = Episode([Turn("o", "a", 0.5), Turn("o", "b", -0.25, truncated=True)], start_state_id="s", episode_id="e")
    assert episode.num_turns == 2
    np.testing.assert_array_equal(episode.rewards, [0.5, -0.25])
    assert episode.total_reward == 0.25
    assert episode.truncated and not episode.terminated
    assert episode.turns[1].done and not episode.turns[0].done
    empty = Episode([], start_state_id="s")
    assert empty.rewards.shape == (0,) and not empty.terminated


# --------------------------------------------------------------------------- prefix views

slice_bounds = st.none() | st.integers(-15, 15)


@settings(deadline=None)
@given(items=st.lists(st.integers(-3, 3), max_size=12), data=st.data())
def test_a_prefix_view_reads_like_a_copy_of_the_prefix_and_keeps_its_length(
    items: list[int], data: st.DataObject
) -> None:
    length = data.draw(st.integers(0, len(items)), label="length")
    view, copy = PrefixView(items, length), items[:length]
    for _ in range(3):
        cut = slice(
            data.draw(slice_bounds), data.draw(slice_bounds), data.draw(st.none() | st.integers(-4, 4).filter(bool))
        )
        assert view[cut] == copy[cut] and type(view[cut]) is list
    for index in range(-length - 2, length + 2):
        if -length <= index < length:
            assert view[index] == copy[index]
        else:
            with pytest.raises(IndexError):
                view[index]
    assert list(view) == copy and len(view) == length and bool(view) == bool(copy)
    assert view == copy and copy == view and view == tuple(copy) and not operator.ne(view, copy)
    assert view == PrefixView(list(copy)) and view != [*copy, 0]
    assert operator.add(view, [9]) == [*copy, 9] and operator.add([9], view) == [9, *copy]
    assert operator.add(view, view) == [*copy, *copy]
    assert list(reversed(view)) == copy[::-1] and all(view.count(x) == copy.count(x) for x in (-3, 0, 3))
    assert np.asarray(view, dtype=np.int64).tolist() == copy and view.tolist() == copy
    assert repr(view) == f"PrefixView({copy!r})"
    items.extend(data.draw(st.lists(st.integers(-3, 3), max_size=5), label="appended"))
    assert view == copy and len(view) == length  # appending to the list never changes a view


def test_prefix_views_are_checked_unhashable_and_compare_only_with_sequences() -> None:
    with pytest.raises(ValueError, match="cannot have length 4"):
        PrefixView([1, 2, 3], 4)
    with pytest.raises(ValueError, match="cannot have length -1"):
        PrefixView([1, 2, 3], -1)
    with pytest.raises(TypeError, match="unhashable"):
        hash(PrefixView([1]))
    assert PrefixView(["a", "b"]) != "ab" and PrefixView([1]) != {1: 1} and PrefixView([1]) != 1


def test_views_of_one_list_pickle_it_once_and_stay_views_of_one_list() -> None:
    items = list(range(1000, 1100))
    views = [PrefixView(items, n) for n in (10, 50, 100)]
    restored = pickle.loads(pickle.dumps(views))
    assert restored == views and all(restored[0].shares_items(v) for v in restored[1:])
    assert len(pickle.dumps(views)) < 2 * len(pickle.dumps(items))


def test_a_turn_with_views_writes_plain_lists() -> None:
    ids, history = [5, 6, 7, 8], [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    turn = Turn("o", "a", 1.0, prompt_token_ids=PrefixView(ids, 3), prompt_messages=PrefixView(history, 1))  # type: ignore[arg-type]
    data = turn.to_dict()
    assert data["prompt_token_ids"] == [5, 6, 7] and type(data["prompt_token_ids"]) is list
    assert data["prompt_messages"] == [{"role": "user", "content": "hi"}] and type(data["prompt_messages"]) is list
    episode = Episode([turn], "env/seed=0")
    assert json.loads(episode.to_json())["turns"][0]["prompt_token_ids"] == [5, 6, 7]
    assert Episode.from_json(episode.to_json()) == episode


@pytest.mark.parametrize(
    ("versions", "expected"),
    [(None, None), ([], None), ([3, 3], 3), ([2, 2, 5], 2)],
    ids=["unrecorded", "empty-action", "one-version", "resumed-under-new-weights"],
)
def test_a_turns_policy_version_is_the_oldest_that_sampled_it(versions: list[int] | None, expected: int | None) -> None:
    ids = None if versions is None else list(range(len(versions)))
    assert Turn("o", "a", 0.0, action_token_ids=ids, policy_versions=versions).policy_version == expected
