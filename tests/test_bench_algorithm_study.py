"""bench/algorithm_study.py: its observation features on real game text, its estimators, and a tiny study end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("gem_games", reason="the study plays the game:* envs (the games tox env runs it)")

import gem_core
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.types import Episode, Turn

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "algorithm_study.py"


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("algorithm_study", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["algorithm_study"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _episode(rewards: list[float], seed: int = 0) -> Episode:
    turns = [Turn(observation="o", action="a0: x", reward=r) for r in rewards]
    return Episode(turns=turns, start_state_id=f"test/seed={seed}")


def test_hanoi_state_follows_the_board(study: ModuleType) -> None:
    env = gem_core.make("game:TowerofHanoi-v0-easy", num_disks=3, max_turns=20)
    observation, _ = env.reset(seed=0)
    assert study.hanoi_state(observation) == ("A", "A", "A")
    observation, *_ = env.step("\\boxed{A B}")
    assert study.hanoi_state(observation) == ("B", "A", "A")  # disk 1 (the smallest) moved


def test_hangman_mask_drops_guessed_letters(study: ModuleType) -> None:
    env = gem_core.make("game:Hangman-v0-easy")
    observation, _ = env.reset(seed=0)
    assert study.unguessed_letters(observation).all()
    for letter in "ea":
        observation, *_ = env.step(f"\\boxed{{{letter}}}")
    mask = study.unguessed_letters(observation)
    assert [study.LETTERS[i] for i in np.flatnonzero(~mask)] == ["e", "a"]


def test_largest_tile_cell_is_the_boards(study: ModuleType) -> None:
    env = gem_core.make("game:Game2048-v0-easy")
    observation, _ = env.reset(seed=3)
    grid = env.unwrapped.board.grid
    assert study.largest_tile_cell(observation) == int(np.argmax(np.array(grid).ravel()))


@pytest.mark.parametrize("seed", range(4), ids=lambda s: f"seed{s}")
def test_sliding_directions_are_the_moves_the_game_accepts(study: ModuleType, seed: int) -> None:
    env = gem_core.make("game:Game2048-v0-easy")
    observation, _ = env.reset(seed=seed)
    for _ in range(8):  # a few positions into the game, where some slides change nothing
        mask = study.sliding_directions(observation)
        for index, direction in enumerate(study.DIRECTIONS):
            probe = gem_core.make("game:Game2048-v0-easy")
            probe.reset(seed=seed)
            probe.unwrapped.board.grid = [row[:] for row in env.unwrapped.board.grid]
            *_, info = probe.step(f"\\boxed{{{direction}}}")
            assert mask[index] == (not info["invalid_move"]), (direction, observation)
        observation, _, terminated, truncated, _ = env.step(f"\\boxed{{{study.DIRECTIONS[int(np.argmax(mask))]}}}")
        if terminated or truncated:
            break


@pytest.mark.parametrize("name", ["guess", "hanoi", "hangman", "2048"])
def test_policy_moves_are_well_formed(study: ModuleType, name: str) -> None:
    """The tabular policy's answers parse in the real game: no format errors over a few turns."""
    game = study.GAMES[name]
    env = gem_core.make(game.env_id, **game.env_kwargs)
    policy = study.TabularPolicy(game, np.random.default_rng(0))
    observation, _ = env.reset(seed=1)
    for _ in range(5):
        action = asyncio.run(policy([{"role": "user", "content": observation}]))
        observation, _, terminated, truncated, info = env.step(action)
        assert not info["format_error"], (action, observation)
        if terminated or truncated:
            break


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-1, 1), min_size=1, max_size=6), min_size=2, max_size=6))
def test_reinforce_pp_with_one_token_per_turn_is_rebn(study: ModuleType, rewards: list[list[float]]) -> None:
    """One generated token per turn: REINFORCE++'s token returns are the turn returns, whitened with Bessel's std."""
    episodes = [_episode(r, i) for i, r in enumerate(rewards)]
    got = study.estimator_advantages("reinforce_pp", episodes, 1.0)
    expected = np.concatenate(rebn_advantages(episodes, 1.0, unbiased=True))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_gae_with_no_value_and_lambda_one_is_the_return(study: ModuleType) -> None:
    episodes = [_episode([0.0, 0.5, 1.0]), _episode([1.0])]
    advantages, targets = study.gae(episodes, study.GAMES["hangman"], study.ValueTable(), 1.0, 1.0)
    np.testing.assert_allclose(advantages, [1.5, 1.5, 1.0, 1.0])
    np.testing.assert_allclose(targets, advantages)


def test_a_tiny_study_writes_its_table(run_bench: Callable[..., str], tmp_path: Path) -> None:
    printed = run_bench(
        "algorithm_study",
        *("--seeds", "1", "--iterations", "2", "--batch", "4", "--group", "2", "--no-plot", "--out", str(tmp_path)),
    )
    table = (tmp_path / "algorithm_study.md").read_text()
    assert table.strip() in printed
    results = json.loads((tmp_path / "algorithm_study.json").read_text())["results"]
    assert list(results) == ["guess", "hanoi", "hangman", "2048"]
    for by_method in results.values():
        assert list(by_method) == ["rebn", "grpo", "dr_grpo", "rloo", "reinforce", "reinforce_pp", "ppo"]
        assert all(0.0 <= row["success"] <= 1.0 and len(row["curves"]["success"][0]) == 2 for row in by_method.values())
    assert table.count("\n") == 2 + 4 * 7
