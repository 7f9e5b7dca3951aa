"""Tower of Hanoi: the optimal recursion as expert, illegal moves, truncation credit."""

from __future__ import annotations

import itertools
from collections import deque

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games.tower_of_hanoi import PEGS, HanoiBoard, TowerofHanoiEnv, next_move, optimal_moves

VARIANTS = ["game:TowerofHanoi-v0-easy", "game:TowerofHanoi-v0-hard", "game:TowerofHanoi-v0-random"]


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


@pytest.mark.parametrize("disks", [1, 2, 3, 5, 7], ids=lambda n: f"{n}-disks")
def test_recursion_is_optimal_and_legal(disks: int) -> None:
    moves = optimal_moves(disks)
    assert len(moves) == 2**disks - 1
    board = HanoiBoard(disks)
    for src, dst in moves:
        assert board.move(src, dst)[0]
    assert board.solved


@pytest.mark.parametrize("env_id", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", [0, 1], ids=["seed0", "seed1"])
def test_expert_solves_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, TowerofHanoiEnv)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert episode.turns == 2**env.params.num_disks - 1 <= env.params.max_turns
    assert episode.total == 1.0
    assert f"C: {list(range(env.params.num_disks, 0, -1))}" in episode.observations[-1]


@pytest.fixture
def env() -> TowerofHanoiEnv:
    game = TowerofHanoiEnv(num_disks=3, max_turns=10)
    game.reset(seed=0)
    return game


def test_first_observation_shows_pegs(env: TowerofHanoiEnv) -> None:
    obs, info = env.reset(seed=0)
    assert "A: [3, 2, 1]  (top: 1)\nB: []  (empty)\nC: []  (empty)" in obs
    assert info == {"turn": 0, "max_turns": 10}


def test_larger_on_smaller_is_rejected(env: TowerofHanoiEnv) -> None:
    env.step("\\boxed{A C}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{A C}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"turn": 2, "format_error": False, "parsed_action": "A C", "invalid_move": True}
    assert obs.startswith("Disk 2 cannot go on top of the smaller disk 1 on peg C. That turn is lost.")
    assert env.board.pegs == {"A": [3, 2], "B": [], "C": [1]}


@pytest.mark.parametrize(
    ("action", "message"),
    [("\\boxed{B C}", "Peg B is empty"), ("\\boxed{A A}", "Source and target are both A")],
    ids=["empty-source", "same-peg"],
)
def test_other_illegal_moves_are_rejected(env: TowerofHanoiEnv, action: str, message: str) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["invalid_move"]) == (0.0, False, False, True)
    assert obs.startswith(message)


@pytest.mark.parametrize(
    "action",
    ["\\boxed{a -> c}", "\\boxed{from A to C}", "\\boxed{1 3}", "\\boxed{\\text{AC}}"],
    ids=["arrow", "words", "numbers", "text"],
)
def test_tolerant_move_syntax(env: TowerofHanoiEnv, action: str) -> None:
    *_, info = env.step(action)
    assert info["parsed_action"] == "A C" and info["invalid_move"] is False


def test_not_a_move_is_a_format_error(env: TowerofHanoiEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{A B C}")
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{A C}" in obs


def test_truncation_pays_share_of_disks_on_c() -> None:
    env = TowerofHanoiEnv(num_disks=3, max_turns=4)
    env.reset(seed=0)
    rewards = [env.step(f"\\boxed{{{s} {d}}}")[1] for s, d in optimal_moves(3)[:3]]  # disks 2 and 1 end on B
    obs, reward, terminated, truncated, info = env.step("\\boxed{A C}")  # disk 3 onto empty C
    assert rewards == [0.0, 0.0, 0.0]
    assert (terminated, truncated, info["success"]) == (False, True, False)
    assert reward == pytest.approx(1 / 3)
    assert obs.endswith("Out of turns with 1 of 3 disks on peg C.")


def distances_to_goal(disks: int) -> dict[tuple[tuple[int, ...], ...], int]:
    """BFS over every legal position (moves are reversible, so search from the goal)."""
    goal = ((), (), tuple(range(disks, 0, -1)))
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        pos = queue.popleft()
        for src, dst in itertools.permutations(range(3), 2):
            if pos[src] and (not pos[dst] or pos[dst][-1] > pos[src][-1]):
                nxt = [list(p) for p in pos]
                nxt[dst].append(nxt[src].pop())
                key = tuple(tuple(p) for p in nxt)
                if key not in dist:
                    dist[key] = dist[pos] + 1
                    queue.append(key)
    return dist


def test_next_move_is_optimal_from_every_position() -> None:
    dist = distances_to_goal(4)
    assert len(dist) == 3**4
    for pos, steps_needed in dist.items():
        board = HanoiBoard(4)
        board.pegs = {name: list(disks) for name, disks in zip(PEGS, pos, strict=True)}
        steps = 0
        while not board.solved:
            move = next_move(board.pegs)
            assert move is not None and board.move(*move)[0]
            steps += 1
        assert steps == steps_needed
    assert next_move({"A": [], "B": [], "C": [2, 1]}) is None


def test_expert_recovers_after_a_detour(play) -> None:
    env = TowerofHanoiEnv(num_disks=3, max_turns=12)
    detour = iter(["\\boxed{A B}"])
    episode = play(env, lambda env, obs: next(detour, None) or expert(env, obs), 0)
    assert (episode.terminated, episode.info["success"], episode.total) == (True, True, 1.0)
    assert episode.turns <= 12
