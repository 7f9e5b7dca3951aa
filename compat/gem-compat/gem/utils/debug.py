"""GEM's ``gem.utils.debug``: play an episode with a policy and print every turn."""

from __future__ import annotations

import time
from collections.abc import Callable
from pprint import pformat
from typing import Any

import numpy as np

__all__ = [
    "run_and_print_episode",
    "run_and_print_episode_async",
    "run_and_print_episode_with_random_selection",
    "run_and_print_episode_with_selective_step",
]

_RULE = "=" * 30


def _show(obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any) -> bool:
    """Print one turn; whether the episode (every sub-env of a vector env) is over."""
    for title, value in (("observation", obs), ("action", action), ("reward", reward)):
        print(f"{'-' * 10} {title} {'-' * 10}\n{pformat(value)}")
    print(f"terminated: {terminated} truncated: {truncated}\n{_RULE}")
    done = np.logical_or(terminated, truncated)
    return bool(np.all(done))


def run_and_print_episode(
    env: Any, policy: Callable[[Any], Any], ignore_done: bool = False, max_steps: float = 1e9
) -> None:
    """Reset ``env`` (unseeded, as GEM did), step ``policy(obs)`` until done or ``max_steps``; print each turn."""
    started = time.perf_counter()
    obs, _ = env.reset()
    steps = 0
    while True:
        steps += 1
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        print(_RULE)
        done = _show(obs, action, reward, terminated, truncated)
        obs = next_obs
        if (done and not ignore_done) or steps >= max_steps:
            break
    print(f"----TIME: {time.perf_counter() - started:.2f} seconds")


async def run_and_print_episode_async(
    env: Any, policy: Callable[[Any], Any], ignore_done: bool = False, max_steps: float = 1e9
) -> None:
    """:func:`run_and_print_episode` for an env whose ``reset`` and ``step`` are coroutines."""
    started = time.perf_counter()
    obs, _ = await env.reset()
    steps = 0
    while True:
        steps += 1
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = await env.step(action)
        print(_RULE)
        done = _show(obs, action, reward, terminated, truncated)
        obs = next_obs
        if (done and not ignore_done) or steps >= max_steps:
            break
    print(f"----TIME: {time.perf_counter() - started:.2f} seconds")


def run_and_print_episode_with_selective_step(
    env: Any, policy: Callable[[Any], Any], ignore_done: bool = False, max_steps: float = 1e9, seed: int | None = None
) -> None:
    """Drive a vector env with GEM's selective step, printing what comes back.

    Each step sends a random non-empty subset of ``policy(obs)``'s actions as ``{index: action}``.
    The subset is drawn from a generator of its own (``seed``), not from the global RNG.
    """
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    obs, _ = env.reset()
    steps = 0
    while True:
        steps += 1
        actions = list(policy(obs))
        chosen = [i for i in range(len(actions)) if rng.random() > 0.5] or [int(rng.integers(len(actions)))]
        active = {i: actions[i] for i in chosen}
        next_obs, reward, terminated, truncated, _ = env.step(active)
        print(f"{_RULE}\nStep {steps}")
        done = _show(next_obs, active, reward, terminated, truncated)
        obs = next_obs
        if (done and not ignore_done) or steps >= max_steps:
            break
    print(f"----TIME: {time.perf_counter() - started:.2f} seconds")


#: The name GEM's tests import.
run_and_print_episode_with_random_selection = run_and_print_episode_with_selective_step
