from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gem_core.seed_streams import SEED_BLOCK, SeedStream, episode_seed, episode_seeds, fresh_root_seed


def test_episode_seed_matches_seed_sequence_spawning() -> None:
    words = np.random.SeedSequence(9, spawn_key=(2, 1)).generate_state(64, np.uint64)
    assert episode_seed(9, 2, 64 + 5) == int(words[5]) >> 1
    assert len({episode_seed(9, i, k) for i in range(4) for k in range(100)}) == 400
    stream = episode_seeds(9, 3)
    assert [next(stream) for _ in range(130)] == [episode_seed(9, 3, k) for k in range(130)]


@given(root=st.integers(0, 2**64), index=st.integers(0, 1000), start=st.integers(0, 3 * SEED_BLOCK))
def test_seed_stream_continues_anywhere(root: int, index: int, start: int) -> None:
    stream = SeedStream(index, root, episodes=start)
    assert [stream.take() for _ in range(SEED_BLOCK + 1)] == [
        episode_seed(root, index, k) for k in range(start, start + SEED_BLOCK + 1)
    ]
    assert stream.episodes == start + SEED_BLOCK + 1
    stream.restart(root)
    assert stream.take() == episode_seed(root, index, 0)


def test_fresh_root_seeds_differ_and_old_import_path_works() -> None:
    from gem_core.vector.base import episode_seed as reexported

    assert reexported is episode_seed
    assert fresh_root_seed() != fresh_root_seed()
