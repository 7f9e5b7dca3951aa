"""Sokoban: push every box onto a target square.

Levels are generated backwards from a solved room: the player walks around and *pulls*
boxes off their targets, which only ever produces states from which the boxes can be
pushed back. Reversing that walk (with the walking between pushes shortened by BFS)
gives a solution, kept for the scripted expert and used to check that the level fits the
turn budget. Rewards follow GEM's ``game:Sokoban-v0-*``: 1.0 when every box is on a
target; if the turn budget runs out first, the last turn pays the share of boxes on targets.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass

from pydantic import Field, model_validator

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome
from gem_games._moves import parse_direction

__all__ = ["MOVES", "SokobanConfig", "SokobanEnv", "SokobanLevel", "generate_level", "solve_level"]

Pos = tuple[int, int]
MOVES: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def _add(p: Pos, d: Pos) -> Pos:
    return p[0] + d[0], p[1] + d[1]


def _sub(p: Pos, d: Pos) -> Pos:
    return p[0] - d[0], p[1] - d[1]


def _name(d: Pos) -> str:
    return next(name for name, delta in MOVES.items() if delta == d)


@dataclass
class SokobanLevel:
    """A room: walls, targets, boxes and the player; ``solution`` solves it from the start."""

    height: int
    width: int
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: set[Pos]
    player: Pos
    solution: tuple[str, ...] = ()

    @property
    def boxes_on_targets(self) -> int:
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        return self.boxes == set(self.targets)

    def copy(self) -> SokobanLevel:
        return SokobanLevel(
            self.height, self.width, self.walls, self.targets, set(self.boxes), self.player, self.solution
        )

    def render(self) -> str:
        """XSB-style rows with spaces between cells (``_`` floor, ``.`` target)."""
        rows = []
        for r in range(self.height):
            cells = []
            for c in range(self.width):
                p = (r, c)
                if p in self.walls:
                    cells.append("#")
                elif p == self.player:
                    cells.append("+" if p in self.targets else "@")
                elif p in self.boxes:
                    cells.append("*" if p in self.targets else "$")
                else:
                    cells.append("." if p in self.targets else "_")
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def move(self, direction: str) -> tuple[bool, str]:
        """Walk or push one square; returns ``(accepted, feedback)``."""
        d = MOVES[direction]
        ahead = _add(self.player, d)
        if ahead in self.walls:
            return False, f"There is a wall {direction} of you; you stay where you are."
        if ahead in self.boxes:
            behind = _add(ahead, d)
            if behind in self.walls or behind in self.boxes:
                blocker = "a wall" if behind in self.walls else "another box"
                return False, f"The box {direction} of you cannot move: {blocker} is behind it."
            self.boxes.remove(ahead)
            self.boxes.add(behind)
            self.player = ahead
            where = " onto a target" if behind in self.targets else ""
            return True, f"You pushed the box {direction}{where}."
        self.player = ahead
        return True, f"You moved {direction}."

    def walk_path(self, goal: Pos) -> list[str] | None:
        """Shortest walk (no pushes) from the player to ``goal``, or ``None`` if it is cut off."""
        if goal == self.player:
            return []
        seen = {self.player: ""}
        parent: dict[Pos, Pos] = {}
        queue = deque([self.player])
        while queue:
            p = queue.popleft()
            for name, d in MOVES.items():
                q = _add(p, d)
                if q in seen or q in self.walls or q in self.boxes:
                    continue
                seen[q], parent[q] = name, p
                if q == goal:
                    path = []
                    while q != self.player:
                        path.append(seen[q])
                        q = parent[q]
                    return path[::-1]
                queue.append(q)
        return None


def _reach(walls: frozenset[Pos], boxes: frozenset[Pos], player: Pos) -> dict[Pos, Pos | None]:
    """Every cell the player can walk to without pushing, with BFS parents for shortest walks."""
    parent: dict[Pos, Pos | None] = {player: None}
    queue = deque([player])
    while queue:
        p = queue.popleft()
        for d in MOVES.values():
            q = _add(p, d)
            if q not in parent and q not in walls and q not in boxes:
                parent[q] = p
                queue.append(q)
    return parent


def _walk(parent: dict[Pos, Pos | None], goal: Pos) -> list[str]:
    path: list[str] = []
    while (prev := parent[goal]) is not None:
        path.append(_name(_sub(goal, prev)))
        goal = prev
    return path[::-1]


def _distance(boxes: frozenset[Pos], targets: frozenset[Pos]) -> int:
    """Sum over boxes of the Manhattan distance to the nearest target: the search's guide."""
    return sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in boxes)


def solve_level(level: SokobanLevel, max_states: int = 50_000) -> tuple[str, ...] | None:
    """Weighted A* over pushes from the current position; ``None`` if unsolvable or too big to search.

    A state is the set of box squares plus the *region* the player can walk in (its smallest cell), so
    positions that differ only by walking are searched once. The plan is short but not guaranteed
    optimal (the distance guide is weighted 3x for speed); ``max_states`` bounds the work.
    """
    walls, targets = level.walls, level.targets
    boxes0 = frozenset(level.boxes)
    reach0 = _reach(walls, boxes0, level.player)
    start = (min(reach0), boxes0)
    # state -> (previous state, moves from there, where the player ends up)
    came_from: dict[tuple[Pos, frozenset[Pos]], tuple[tuple[Pos, frozenset[Pos]] | None, list[str], Pos]] = {
        start: (None, [], level.player)
    }
    # (priority, pushes, tie-break counter, state, reach): the counter keeps heap order deterministic.
    frontier = [(3 * _distance(boxes0, targets), 0, 0, start, reach0)]
    counter = 0
    while frontier:
        _, pushes, _, state, reach = heapq.heappop(frontier)
        boxes = state[1]
        if boxes == targets:
            plan: list[str] = []
            cursor: tuple[Pos, frozenset[Pos]] | None = state
            while cursor is not None:
                prev, moves, _ = came_from[cursor]
                plan[:0] = moves
                cursor = prev
            return tuple(plan)
        for box in boxes:
            for name, d in MOVES.items():
                stand, dest = _sub(box, d), _add(box, d)
                if stand not in reach or dest in walls or dest in boxes:
                    continue
                moved = boxes - {box} | {dest}
                nxt_reach = _reach(walls, moved, box)
                nxt = (min(nxt_reach), moved)
                if nxt in came_from:
                    continue
                came_from[nxt] = (state, [*_walk(reach, stand), name], box)
                counter += 1
                priority = pushes + 1 + 3 * _distance(moved, targets)
                heapq.heappush(frontier, (priority, pushes + 1, counter, nxt, nxt_reach))
        if len(came_from) > max_states:
            return None
    return None


def _room(height: int, width: int, rng: random.Random) -> tuple[frozenset[Pos], list[Pos]]:
    """Border walls plus a few inner walls that keep the floor connected."""
    interior = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    border = {(r, c) for r in range(height) for c in range(width)} - set(interior)
    for _ in range(20):
        inner = set(rng.sample(interior, rng.randint(0, len(interior) // 8)))
        floor = [p for p in interior if p not in inner]
        if _connected(floor):
            return frozenset(border | inner), floor
    return frozenset(border), interior


def _connected(floor: list[Pos]) -> bool:
    cells = set(floor)
    seen = {floor[0]}
    queue = deque([floor[0]])
    while queue:
        p = queue.popleft()
        for d in MOVES.values():
            q = _add(p, d)
            if q in cells and q not in seen:
                seen.add(q)
                queue.append(q)
    return len(seen) == len(cells)


def _reverse_play(level: SokobanLevel, steps: int, rng: random.Random) -> list[tuple[str, bool]]:
    """Walk the player backwards, pulling boxes; returns ``(forward push direction, pushed)`` in forward order.

    Walks ``steps`` steps, then goes on (up to ``3 * steps`` in all) while a box still sits on a target.
    """
    forward: list[tuple[str, bool]] = []
    for step in range(3 * steps):
        if step >= steps and not level.boxes & level.targets:
            break
        options: list[tuple[Pos, bool]] = []
        for d in MOVES.values():
            to = _add(level.player, d)
            if to in level.walls or to in level.boxes:
                continue
            options.append((d, False))
            pulled = _sub(level.player, d)
            if pulled in level.boxes:
                # Favour pulls (they make the puzzle), above all of boxes still resting on a target.
                options.extend([(d, True)] * (6 if pulled in level.targets else 3))
        if not options:
            break
        d, pull = options[rng.randrange(len(options))]
        if pull:
            level.boxes.remove(_sub(level.player, d))
            level.boxes.add(level.player)
        level.player = _add(level.player, d)
        forward.append((_name((-d[0], -d[1])), pull))
    forward.reverse()
    return forward


def _shortened(start: SokobanLevel, forward: list[tuple[str, bool]]) -> tuple[str, ...]:
    """Replay ``forward`` keeping its pushes but walking by shortest paths between them."""
    state = start.copy()
    moves: list[str] = []
    walked = state.copy()  # tracks where the original walk puts the player
    for direction, pushed in forward:
        if pushed:
            path = state.walk_path(walked.player)
            assert path is not None, "the reverse walk reached this square, so it is reachable"
            for step in path:
                state.move(step)
            moves.extend(path)
            ok, _ = state.move(direction)
            assert ok
            moves.append(direction)
        walked.move(direction)
    return tuple(moves)


def generate_level(
    dim_room: tuple[int, int],
    num_boxes: int,
    max_moves: int,
    rng: random.Random,
    attempts: int = 200,
    candidates: int = 3,
) -> SokobanLevel:
    """A seeded level whose kept solution takes at most ``max_moves`` moves and starts with every box off target.

    Of the first ``candidates`` such levels, the one needing the most pushes is kept, so that
    one-push-per-box rooms are rare.

    Raises:
        ValueError: no such level was found in ``attempts`` tries (room too small for the boxes).
    """
    height, width = dim_room
    found: list[tuple[int, SokobanLevel]] = []
    for _ in range(attempts):
        walls, floor = _room(height, width, rng)
        if len(floor) < num_boxes + 2:
            continue
        targets = frozenset(rng.sample(floor, num_boxes))
        free = [p for p in floor if p not in targets]
        solved = SokobanLevel(height, width, walls, targets, set(targets), rng.choice(free))
        forward = _reverse_play(solved, steps=rng.randint(8, 14) * num_boxes, rng=rng)
        start = solved.copy()
        start.solution = _shortened(start, forward)
        if 0 < len(start.solution) <= max_moves and start.boxes_on_targets == 0:
            found.append((sum(pushed for _, pushed in forward), start))
            if len(found) == candidates:
                break
    if not found:
        raise ValueError(
            f"could not generate a {height}x{width} Sokoban room with {num_boxes} boxes solvable in "
            f"{max_moves} moves; use a larger room, fewer boxes or more turns"
        )
    # max() keeps the first of equals, so the choice stays a pure function of the RNG stream.
    return max(found, key=lambda item: item[0])[1]


class SokobanConfig(GameConfig):
    """Configuration of :class:`SokobanEnv`.

    Attributes:
        dim_room: ``(rows, columns)`` of the room including its outer walls.
        num_boxes: Boxes (and targets).
        max_turns: Moves allowed; every generated level has a kept solution at most this long.
        randomize: Draw both sides of ``dim_room`` from 6..8, ``num_boxes`` from 1..3 and
            ``max_turns = 20 + 10 * num_boxes`` at every reset.
    """

    dim_room: tuple[int, int] = (6, 6)
    num_boxes: int = Field(2, ge=1, le=10)
    max_turns: int = Field(20, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_room(self) -> SokobanConfig:
        rows, cols = self.dim_room
        if not (5 <= rows <= 16 and 5 <= cols <= 16):
            raise ValueError(f"dim_room sides must be from 5 to 16 (walls included), got {self.dim_room}")
        if self.num_boxes > (rows - 2) * (cols - 2) // 4:
            raise ValueError(
                f"{self.num_boxes} boxes do not fit a {rows}x{cols} room; use at most a quarter of its floor"
            )
        return self


class SokobanEnv(GameEnv[SokobanConfig]):
    """Push every box onto a target in a seeded room that is guaranteed solvable within the turn budget.

    Rewards: 1.0 when all boxes are on targets (terminated, success). When the turns run out first, the
    last turn pays ``boxes on targets / num_boxes``. Walking into a wall or pushing a box into a wall or
    another box is rejected: reward 0 and the turn is spent. A box without one direction is a format error.
    """

    config_model = SokobanConfig
    title = "Sokoban"

    def _draw_config(self) -> SokobanConfig:
        rows, cols = self.py_random.randint(6, 8), self.py_random.randint(6, 8)
        boxes = self.py_random.randint(1, 3)
        return self.config.model_copy(
            update={"dim_room": (rows, cols), "num_boxes": boxes, "max_turns": 20 + 10 * boxes}
        )

    def _new_game(self) -> None:
        p = self.params
        self.level = generate_level(p.dim_room, p.num_boxes, p.max_turns, self.py_random)
        #: The expert's remaining plan; ``None`` once the player left it (the expert then searches anew).
        self._plan: list[str] | None = list(self.level.solution)

    def rules(self) -> str:
        return (
            "You are the warehouse keeper '@'. Push every box '$' onto a target '.': walk one square per turn; "
            "walking into a box pushes it one square if the square behind it is free. You cannot pull boxes or "
            "push two at once, and '#' is a wall. Legend: '_' floor, '*' box on a target, '+' you on a target."
        )

    def move_format(self) -> tuple[str, str]:
        return "one direction: up, down, left or right", "up"

    def render(self) -> str:
        lv = self.level
        return f"{lv.render()}\nBoxes on targets: {lv.boxes_on_targets} of {len(lv.targets)}."

    def _play(self, content: str) -> Outcome:
        direction = parse_direction(content)
        if direction is None:
            return Outcome(f"{content[:40]!r} is not one of up, down, left, right.", status="format_error")
        accepted, feedback = self.level.move(direction)
        if accepted and self._plan is not None:
            self._plan = self._plan[1:] if self._plan[:1] == [direction] else None
        if not accepted:
            return Outcome(f"{feedback} That turn is lost.", parsed=direction, invalid=True)
        if self.level.solved:
            return Outcome(f"{feedback} Every box is on a target.", REWARD_SUCCESS, "won", parsed=direction)
        return Outcome(feedback, parsed=direction)

    def _on_truncation(self) -> tuple[float, str]:
        on, total = self.level.boxes_on_targets, len(self.level.targets)
        return on / total, f"Out of turns with {on} of {total} boxes on targets."

    def expert_moves(self) -> list[str]:
        """The solution kept from generation, as boxed answers (the scripted expert)."""
        return [f"\\boxed{{{move}}}" for move in self.level.solution]

    def expert_action(self) -> str:
        """The next move of the kept solution or, once the player left it, of a fresh push search."""
        if not self._plan:
            self._plan = list(solve_level(self.level) or ())
        return f"\\boxed{{{self._plan[0] if self._plan else 'up'}}}"

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.choice(tuple(MOVES))}}}"
