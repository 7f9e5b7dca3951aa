"""What the env module and the advantage step share about episodes an env error ended.

The env module (:mod:`gem_rl2.episodes`) records failed episodes and marks their last
reward; the advantage step (:mod:`gem_rl2.advantages`) finds the mark, takes the episodes
out of training and names them in one warning per batch. Both import this module, and it
imports neither, so neither imports the other.
"""

from __future__ import annotations

from gem_core.rl.types import Episode

__all__ = ["ENV_ERROR_REWARD", "KEPT", "drain", "error_reward", "mark_installed", "rebn_installed", "record"]

#: The reward of the last step of an episode an env error ended (``on_env_error="end"``). RL2's
#: rollout loop trains on every generated token and carries nothing but the reward from the env
#: to the trainer, so the reward marks the episode: gem's ``compute_advantages`` (installed by
#: ``gem-rl2-train``, see :mod:`gem_rl2.advantages`) finds it there, zeroes the episode's action
#: mask and rewards and leaves it out of every estimator's statistics. Without that patch the
#: reward is 0.0 instead (the episode then trains with reward 0).
ENV_ERROR_REWARD = float("nan")
#: Failed episodes kept until the next :func:`drain` (the oldest are dropped).
KEPT = 4096

_failed: list[Episode] = []
_installed = False


def record(episode: Episode) -> None:
    """Keep an episode an env error ended, for the batch's warning."""
    _failed.append(episode)
    del _failed[:-KEPT]


def drain() -> list[Episode]:
    """The episodes env errors ended since the last call, oldest first."""
    drained = list(_failed)
    _failed.clear()
    return drained


def mark_installed() -> None:
    """Note that this process's RL2 trainer calls gem's ``compute_advantages`` (which drops failed episodes)."""
    global _installed
    _installed = True


def rebn_installed() -> bool:
    """Whether :func:`mark_installed` ran in this process."""
    return _installed


def error_reward() -> float:
    """The last reward of a failed episode: :data:`ENV_ERROR_REWARD` where the trainer drops it, else 0."""
    return ENV_ERROR_REWARD if _installed else 0.0
