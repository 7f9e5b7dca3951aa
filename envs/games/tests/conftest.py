"""Shared test helpers: play a whole episode with a scripted expert."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def run_episode(env: GameEnv, choose: Callable[[GameEnv, str], str], seed: int) -> Episode:
    """Reset with ``seed`` and play ``choose(env, last_observation)`` until the episode ends."""
    obs, _ = env.reset(seed=seed)
    observations, total = [obs], 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(choose(env, obs))
        observations.append(obs)
        total += reward
        if terminated or truncated:
            return Episode(total, env.turn, terminated, truncated, info, observations)


@pytest.fixture
def play() -> Callable[[GameEnv, Callable[[GameEnv, str], str], int], Episode]:
    return run_episode
