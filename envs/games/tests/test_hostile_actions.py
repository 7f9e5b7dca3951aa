"""Every game: a non-str action is refused before the turn counts; huge answers give bounded observations."""

from __future__ import annotations

from typing import Any

import gem_core
import pytest
from gem_core.errors import InvalidAction

GAME_IDS = gem_core.list_envs(namespace="game")


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
@pytest.mark.parametrize("action", [None, 7, b"\\boxed{1}", ["\\boxed{1}"]], ids=repr)
def test_a_non_string_action_is_refused_before_the_turn_counts(env_id: str, action: Any) -> None:
    env = gem_core.make(env_id)
    env.reset(seed=0)
    with pytest.raises(InvalidAction, match=r"takes a str \(your reply, with .*this turn did not count"):
        env.step(action)
    assert env.unwrapped.turn == 0
    env.step(env.unwrapped.sample_random_action())  # the episode goes on
    env.close()


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
@pytest.mark.parametrize("size", [2_001, 1 << 20], ids=["just-too-long", "1MiB"])
def test_a_huge_answer_is_an_invalid_move_with_a_short_observation(env_id: str, size: int) -> None:
    env = gem_core.make(env_id)
    first, _ = env.reset(seed=0)
    obs, _, _, _, info = env.step("\\boxed{" + "1" * size + "}")
    assert len(obs) < len(first) + 1_000
    assert info.get("invalid_move") is True and len(info["parsed_action"]) <= 60
    env.close()


def test_mastermind_echoes_an_invalid_guess_shortened() -> None:
    env = gem_core.make("game:Mastermind-v0-easy")
    env.reset(seed=0)
    obs, *_ = env.step("\\boxed{" + "1" * 1_500 + "}")
    assert "1 1 1" in obs and len(obs) < 2_000


@pytest.mark.parametrize("seed", [True, False, -1, 1.5, "3"], ids=repr)
def test_reset_refuses_seeds_that_are_not_non_negative_ints(seed: Any) -> None:
    env = gem_core.make(GAME_IDS[0])
    with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
        env.reset(seed=seed)
