"""Trajectory records and their JSONL form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import TrajectoryError
from gem_core.rl.types import SCHEMA, Episode, Turn, iter_jsonl, read_jsonl, write_jsonl

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
    ],
    ids=["nan-reward", "inf-reward", "text-reward", "logprobs-without-ids", "logprob-count", "message-without-role"],
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
