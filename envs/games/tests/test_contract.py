"""Every registered ``game:*`` id (both halves of the package) against the Env contract and the game rules.

The ids come from the registry, so a newly registered game is covered without touching this file.
"""

from __future__ import annotations

import pickle

import gem_core
import pytest
from gem_core.errors import ResetNeeded
from gem_core.testing import FUZZ_ACTIONS, check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv

GAME_IDS = gem_core.list_envs(namespace="game")
#: Marks "play a move from sample_random_action()" in a drawn action stream.
RANDOM = object()

actions = st.one_of(
    st.just(RANDOM),
    st.just(RANDOM),
    st.sampled_from(FUZZ_ACTIONS),
    st.text(max_size=40),
    st.text(max_size=20).map(lambda t: f"\\boxed{{{t}}}"),
    st.from_regex(r"\\boxed\{ ?[a-zA-Z0-9 ,]{0,12} ?\}", fullmatch=True),
)


def make_game(env_id: str) -> GameEnv:
    env = gem_core.make(env_id)
    assert isinstance(env, GameEnv)
    return env


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
def test_check_env(env_id: str) -> None:
    check_env(make_game(env_id), env_factory=lambda: make_game(env_id))


def episode(env: GameEnv, seed: int, moves: int = 4) -> list[str]:
    """Observations of the first few random moves (hidden puzzles show up in the feedback)."""
    observations = [env.reset(seed=seed)[0]]
    for _ in range(moves):
        obs, _, terminated, truncated, _ = env.step(env.sample_random_action())
        observations.append(obs)
        if terminated or truncated:
            break
    return observations


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
def test_same_seed_same_puzzle(env_id: str) -> None:
    first, second = make_game(env_id), make_game(env_id)
    assert episode(first, 7) == episode(second, 7)
    episodes = {tuple(episode(first, s)) for s in range(8)}
    assert len(episodes) > 1, "eight seeds gave the same episode"


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
def test_format_error_ends_episode(env_id: str) -> None:
    env = make_game(env_id)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I will not use a box.")
    assert (reward, terminated, truncated) == (REWARD_FORMAT_ERROR, True, False)
    assert info["format_error"] is True and info["success"] is False
    assert "\\boxed{" in obs, "the format error must show the expected answer"
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{1}")


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), stream=st.lists(actions, min_size=1, max_size=80))
def test_random_streams_keep_the_rules(env_id: str, seed: int, stream: list[object]) -> None:
    env = make_game(env_id)
    obs, _ = env.reset(seed=seed)
    assert isinstance(obs, str) and obs
    total = 0.0
    for steps, item in enumerate(stream, start=1):
        action = env.sample_random_action() if item is RANDOM else str(item)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert isinstance(obs, str) and obs
        assert not (terminated and truncated), "terminated and truncated are never both set"
        assert info["turn"] == steps
        if info["format_error"]:
            assert terminated and reward == REWARD_FORMAT_ERROR
        assert total <= 1.0 + 1e-9, f"rewards summed to {total} > 1"
        if truncated:
            assert steps == env.params.max_turns, "truncated only at the turn limit"
        if terminated or truncated:
            assert isinstance(info["success"], bool)
            break
        assert steps < env.params.max_turns, "the turn limit must end the episode"


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_valid_random_moves_never_format_error(env_id: str, seed: int) -> None:
    env = make_game(env_id)
    env.reset(seed=seed)
    for _ in range(env.params.max_turns):
        _, _, terminated, truncated, info = env.step(env.sample_random_action())
        assert info["format_error"] is False, "sample_random_action() produced a format error"
        if terminated or truncated:
            break
    else:
        pytest.fail("the episode outlived max_turns")


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
def test_expert_plays_clean(env_id: str) -> None:
    """Every game has an expert: no format errors, no illegal moves, progress every episode, a win pays exactly 1.

    How often it must win is up to each game's own test (some budgets, like GEM's 2048-hard, cannot be won).
    """
    env = make_game(env_id)
    for seed in range(3):
        env.reset(seed=seed)
        total = 0.0
        while True:
            _, reward, terminated, truncated, info = env.step(env.expert_action())
            total += reward
            assert not info["format_error"] and not info.get("invalid_move"), info
            if terminated or truncated:
                break
        assert 0.0 < total <= 1.0 + 1e-9, f"seed {seed}: the expert's return is {total}"
        if info["success"]:
            assert total == pytest.approx(1.0)


@pytest.mark.parametrize("env_id", GAME_IDS, ids=GAME_IDS)
def test_pickled_env_continues_the_same_episode(env_id: str) -> None:
    """Process-based vector envs and snapshots need envs that pickle with their RNG state."""
    env = make_game(env_id)
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    for _ in range(5):
        action = env.sample_random_action()
        assert clone.sample_random_action() == action
        result = env.step(action)
        assert clone.step(action) == result
        if result[2] or result[3]:
            break
