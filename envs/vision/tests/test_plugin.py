"""Every vision:* id is registered through the entry point, builds with make() and keeps the env contract."""

from __future__ import annotations

from pathlib import Path

import gem_core
import pytest
from gem_core.multimodal import Content
from gem_core.testing import check_env

IDS = [
    "vision:Geometry-v0",
    "vision:BarChart-v0",
    "vision:LineChart-v0",
    "vision:PieChart-v0",
    "vision:Sudoku-v0-easy",
]


@pytest.mark.parametrize("env_id", IDS)
def test_each_id_keeps_the_contract_with_images(env_id: str) -> None:
    env = gem_core.make(env_id)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, Content) and len(obs.images) == 1
    check_env(env, env_factory=lambda: gem_core.make(env_id), num_steps=6)


def test_the_hard_sudoku_shows_a_9x9_board() -> None:
    # check_env on the easy board covers the class; the hard one's 9x9 generator is slow under fuzzing
    obs, _ = gem_core.make("vision:Sudoku-v0-hard").reset(seed=0)
    assert isinstance(obs, Content) and obs.images[0].size == (28 + 9 * 36 + 8,) * 2


def test_geometry3k_id_takes_the_data_folder(g3k_dir: Path) -> None:
    env = gem_core.make("vision:Geometry3K-v0", data_dir=str(g3k_dir))
    check_env(env, env_factory=lambda: gem_core.make("vision:Geometry3K-v0", data_dir=str(g3k_dir)))


def test_ids_are_listed_without_importing_pillow() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gem_core; ids = gem_core.list_envs(namespace='vision'); "
        "assert len(ids) == 7, ids; assert 'PIL' not in sys.modules, 'listing imported Pillow'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
