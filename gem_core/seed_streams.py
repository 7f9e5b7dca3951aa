"""Per-episode seeds derived from one root seed, so a whole run replays from that root.

Env ``i``'s ``k``-th episode of a run seeded with ``root`` gets :func:`episode_seed`
``(root, i, k)``. Vector envs (every backend) and the episode runner use these seeds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

__all__ = ["SEED_BLOCK", "SeedStream", "episode_seed", "episode_seeds", "fresh_root_seed"]

# Seeds are derived in blocks: one SeedSequence per (root, env, block) yields the seeds of
# SEED_BLOCK consecutive episodes, because building a SeedSequence costs far more than a step.
SEED_BLOCK = 64


def _block(root: int, env_index: int, block: int) -> list[int]:
    words = np.random.SeedSequence(root, spawn_key=(env_index, block)).generate_state(SEED_BLOCK, np.uint64)
    # 63 bits: a non-negative int that every seed consumer accepts
    return [int(w) >> 1 for w in words]


def episode_seed(root: int, env_index: int, episode: int) -> int:
    """The seed of env ``env_index``'s ``episode``-th episode (0-based) in a run seeded with ``root``.

    Derived with numpy ``SeedSequence`` spawning: ``SeedSequence(root, spawn_key=(env_index,
    episode // 64))`` generates the seeds of 64 consecutive episodes. The result depends
    only on ``(root, env_index, episode)``, so a whole vector run, autoresets included,
    replays from ``root``.
    """
    return _block(root, env_index, episode // SEED_BLOCK)[episode % SEED_BLOCK]


def episode_seeds(root: int, env_index: int) -> Iterator[int]:
    """All of env ``env_index``'s episode seeds in order: ``episode_seed(root, env_index, k)`` for k = 0, 1, ...

    Cheaper than calling :func:`episode_seed` per episode: each block of 64 seeds is derived once.
    """
    for block in itertools.count():
        yield from _block(root, env_index, block)


def fresh_root_seed() -> int:
    """A root seed drawn from OS entropy (kept by the caller so the run can be replayed)."""
    return int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]


class SeedStream:
    """One env's episode seeds with a cursor: :meth:`take` returns the next one.

    Args:
        env_index: The env's index in its run.
        root: The run's root seed; ``None`` until the first reset sets it.
        episodes: Episodes already started (the cursor), to continue a stream elsewhere.
    """

    __slots__ = ("_block", "_seeds", "env_index", "episodes", "root")

    def __init__(self, env_index: int, root: int | None = None, episodes: int = 0) -> None:
        self.env_index = env_index
        self.root = root
        self.episodes = episodes
        self._block = -1
        self._seeds: list[int] = []

    def restart(self, root: int) -> None:
        """Start over at episode 0 of ``root``'s sequence."""
        self.root, self.episodes, self._block = root, 0, -1

    def take(self) -> int:
        """The seed of the next episode; advances the cursor."""
        if self.root is None:
            raise RuntimeError("SeedStream.take() before a root seed was set")
        k = self.episodes
        self.episodes = k + 1
        block, offset = divmod(k, SEED_BLOCK)
        if block != self._block:
            self._seeds, self._block = _block(self.root, self.env_index, block), block
        return self._seeds[offset]
