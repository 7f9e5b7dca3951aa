"""Sokoban: reverse-play generation gives solvable levels, the kept solution as expert, push rules."""

from __future__ import annotations

import random

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games.sokoban import MOVES, SokobanEnv, SokobanLevel, generate_level, solve_level

VARIANTS = ["game:Sokoban-v0-easy", "game:Sokoban-v0-hard", "game:Sokoban-v0-random"]


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("dim", "boxes", "turns"), [((6, 6), 2, 20), ((8, 8), 4, 50), ((7, 9), 3, 40)], ids=["6x6-2", "8x8-4", "7x9-3"]
)
def test_generated_levels_are_solved_by_their_solution(dim: tuple[int, int], boxes: int, turns: int) -> None:
    for seed in range(10):
        level = generate_level(dim, boxes, turns, random.Random(seed))
        assert (level.height, level.width) == dim and len(level.boxes) == len(level.targets) == boxes
        assert level.boxes_on_targets == 0 and 0 < len(level.solution) <= turns
        replay = level.copy()
        for move in level.solution:
            assert replay.move(move)[0]
        assert replay.solved


def test_impossible_config_raises_a_clear_error() -> None:
    with pytest.raises(ValueError, match="could not generate"):
        generate_level((5, 5), 2, 0, random.Random(0), attempts=5)


@pytest.mark.parametrize("env_id", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_expert_solves_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, SokobanEnv)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert episode.total == 1.0 and episode.turns == len(env.level.solution)
    assert "$" not in episode.observations[-1].split("\n\n")[1], "every box is shown on its target"


def test_random_variant_has_no_room_size_kwarg() -> None:
    spec = gem_core.spec("game:Sokoban-v0-random")
    assert spec.kwargs == {"randomize": True}
    env = gem_core.make("game:Sokoban-v0-random")
    assert isinstance(env, SokobanEnv)
    sizes = {(env.reset(seed=s), env.params.dim_room, env.params.num_boxes)[1:] for s in range(12)}
    assert len(sizes) > 1


# A fixed room:   row 1: # # # # # #
#                 row 2: # _ _ _ _ #
#                 row 3: # @ $ _ . #
#                 row 4: # _ $ # _ #
#                 row 5: # _ . _ _ #
#                 row 6: # # # # # #
ROOM = ["######", "#____#", "#@$_.#", "#_$#_#", "#_.__#", "######"]


@pytest.fixture
def env() -> SokobanEnv:
    game = SokobanEnv(dim_room=(6, 6), num_boxes=2, max_turns=6)
    game.reset(seed=0)
    cells = {(r, c): ch for r, row in enumerate(ROOM) for c, ch in enumerate(row)}
    game.level = SokobanLevel(
        6,
        6,
        walls=frozenset(p for p, ch in cells.items() if ch == "#"),
        targets=frozenset(p for p, ch in cells.items() if ch == "."),
        boxes={p for p, ch in cells.items() if ch == "$"},
        player=next(p for p, ch in cells.items() if ch == "@"),
    )
    return game


def test_board_is_in_every_observation(env: SokobanEnv) -> None:
    obs, *_ = env.step("\\boxed{down}")
    # The board is part of the observation (GEM hid it in info["suffix"]).
    assert "# _ $ _ . #\n# @ $ # _ #\n# _ . _ _ #" in obs and "Boxes on targets: 0 of 2." in obs


def test_push_into_wall_is_rejected(env: SokobanEnv) -> None:
    env.step("\\boxed{down}")  # player to (4, 2); the box right of it has a wall behind
    obs, reward, terminated, truncated, info = env.step("\\boxed{right}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"turn": 2, "format_error": False, "parsed_action": "right", "invalid_move": True}
    assert obs.startswith("The box right of you cannot move: a wall is behind it. That turn is lost.")
    assert env.level.player == (3, 1) and env.level.boxes == {(2, 2), (3, 2)}


def test_walk_into_wall_and_push_into_box_are_rejected(env: SokobanEnv) -> None:
    obs, reward, *_ = env.step("\\boxed{left}")
    assert reward == 0.0 and obs.startswith("There is a wall left of you")
    env.step("\\boxed{up}")
    env.step("\\boxed{right}")  # player at (1, 2), boxes below it are stacked
    obs, reward, *_ = env.step("\\boxed{down}")
    assert reward == 0.0 and obs.startswith("The box down of you cannot move: another box is behind it.")


def test_pushes_then_win(env: SokobanEnv) -> None:
    obs, reward, *_ = env.step("\\boxed{R}")
    assert reward == 0.0 and obs.startswith("You pushed the box right.")
    obs, reward, *_ = env.step("\\boxed{right}")
    assert reward == 0.0 and obs.startswith("You pushed the box right onto a target.")
    assert "Boxes on targets: 1 of 2." in obs
    env.step("\\boxed{left}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{down}")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert "# _ _ _ * #\n# _ @ # _ #\n# _ * _ _ #" in obs and obs.endswith("You won!")


def test_truncation_pays_share_of_boxes_on_targets(env: SokobanEnv) -> None:
    env.step("\\boxed{right}")
    env.step("\\boxed{right}")  # one box on its target
    for _ in range(3):
        env.step("\\boxed{left}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{left}")
    assert (terminated, truncated, info["success"]) == (False, True, False)
    assert reward == pytest.approx(0.5)
    assert obs.endswith("Out of turns with 1 of 2 boxes on targets.")


def test_unclear_direction_is_a_format_error(env: SokobanEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{north-east}")
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{up}" in obs


def test_bad_room_names_the_field() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="dim_room"):
        SokobanEnv(dim_room=(4, 4))
    with pytest.raises(gem_core.errors.ConfigError, match="boxes do not fit"):
        SokobanEnv(dim_room=(6, 6), num_boxes=5)


@pytest.mark.parametrize(("dim", "boxes"), [((6, 6), 2), ((8, 8), 4)], ids=["6x6-2", "8x8-4"])
def test_search_solves_generated_levels(dim: tuple[int, int], boxes: int) -> None:
    for seed in range(3):
        level = generate_level(dim, boxes, 50, random.Random(seed))
        plan = solve_level(level)
        assert plan is not None
        replay = level.copy()
        for move in plan:
            assert replay.move(move)[0]
        assert replay.solved


def test_search_reports_a_dead_end(env: SokobanEnv) -> None:
    env.level.boxes = {(1, 1), (3, 2)}  # a box in the corner can never move again
    assert solve_level(env.level) is None


def off_plan_walk(env: SokobanEnv, obs: str) -> str:
    """A step that only walks (pushes nothing, so it cannot trap a box) and differs from the expert's move."""
    planned = expert(env, obs)
    level = env.level
    for name, (dr, dc) in MOVES.items():
        ahead = (level.player[0] + dr, level.player[1] + dc)
        if f"{{{name}}}" not in planned and ahead not in level.walls and ahead not in level.boxes:
            return f"\\boxed{{{name}}}"
    return planned


@pytest.mark.parametrize("seed", [0, 1, 2, 3], ids=["seed0", "seed1", "seed2", "seed3"])
def test_expert_recovers_after_a_detour(seed: int, play) -> None:
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_turns=60)
    detour = [off_plan_walk, off_plan_walk]
    episode = play(env, lambda env, obs: (detour.pop() if detour else expert)(env, obs), seed)
    assert (episode.terminated, episode.info["success"], episode.total) == (True, True, 1.0)
