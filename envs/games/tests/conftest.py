"""Shared test helpers: play a whole episode with a scripted expert."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gem_core
import pytest

from gem_games._base import GameEnv


@dataclass
class Episode:
    """What an expert's episode produced."""

    total: float
    turns: int
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    observations: list[str]


Expert = Callable[[GameEnv, str], str]


def by_expert(env: GameEnv, obs: str) -> str:
    """The game's own :meth:`~gem_games._base.GameEnv.expert_action`."""
    return env.expert_action()


def run_episode(env: GameEnv, choose: Expert | None = None, seed: int = 0) -> Episode:
    """Reset with ``seed`` and play ``choose(env, last_observation)`` (default: the game's expert) to the end."""
    choose = choose or by_expert
    obs, _ = env.reset(seed=seed)
    observations, total = [obs], 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(choose(env, obs))
        observations.append(obs)
        total += reward
        if terminated or truncated:
            return Episode(total, env.turn, terminated, truncated, info, observations)


def run_winning_episode(env_id: str, expert: Expert | None = None, seed: int = 0) -> Episode:
    """Play ``env_id`` with ``expert``; assert it won and collected exactly the full reward of 1."""
    env = gem_core.make(env_id)
    assert isinstance(env, GameEnv)
    episode = run_episode(env, expert, seed)
    assert episode.info["success"] is True, episode.observations[-1]
    assert episode.terminated and not episode.truncated
    assert episode.total == pytest.approx(1.0)
    assert episode.turns <= env.params.max_turns
    return episode


@pytest.fixture
def play() -> Callable[..., Episode]:
    return run_episode


@pytest.fixture
def expert_wins() -> Callable[..., Episode]:
    return run_winning_episode
