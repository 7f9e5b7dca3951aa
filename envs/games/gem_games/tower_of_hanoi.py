"""Tower of Hanoi: move every disk from peg A to peg C, one disk at a time, never a larger on a smaller.

Rewards follow GEM's ``game:TowerofHanoi-v0-*``: 1.0 when the tower stands on peg C; if the
turn budget runs out first, the last turn pays ``disks on C / disks``. An illegal move is
rejected (reward 0, the turn is spent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import Field

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome

__all__ = ["PEGS", "HanoiBoard", "TowerofHanoiConfig", "TowerofHanoiEnv", "next_move", "optimal_moves"]

PEGS = "ABC"
_PEG_WORD = re.compile(r"[ABC123]", re.IGNORECASE)
_NOISE = re.compile(r"\b(?:peg|from|to|move|disk|the|onto|on)\b|[\s,;:()\[\]<>=→-]+", re.IGNORECASE)


def optimal_moves(num_disks: int, source: str = "A", target: str = "C", spare: str = "B") -> list[tuple[str, str]]:
    """The classic recursion: ``2**num_disks - 1`` moves that carry the tower from ``source`` to ``target``."""
    if num_disks == 0:
        return []
    return [
        *optimal_moves(num_disks - 1, source, spare, target),
        (source, target),
        *optimal_moves(num_disks - 1, spare, target, source),
    ]


def next_move(pegs: dict[str, list[int]], target: str = "C") -> tuple[str, str] | None:
    """The first move of the shortest way from any legal position to the whole tower on ``target``."""
    where = {disk: name for name, disks in pegs.items() for disk in disks}
    goal = target
    # Walk down from the largest disk: the largest one not yet on its goal decides the next move.
    move: tuple[str, str] | None = None
    for disk in sorted(where, reverse=True):
        if where[disk] != goal:
            # Disk must go src -> goal, so every smaller disk must first gather on the third peg.
            move = (where[disk], goal)
            goal = next(p for p in PEGS if p not in (where[disk], goal))
    return move


@dataclass
class HanoiBoard:
    """Three pegs; each is a list of disk sizes from bottom to top."""

    num_disks: int
    pegs: dict[str, list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.pegs = {"A": list(range(self.num_disks, 0, -1)), "B": [], "C": []}

    @property
    def solved(self) -> bool:
        return len(self.pegs["C"]) == self.num_disks

    def render(self) -> str:
        """One line per peg, bottom disk first, e.g. ``A: [3, 2, 1]  (top: 1)``."""
        lines = []
        for name in PEGS:
            disks = self.pegs[name]
            top = f"  (top: {disks[-1]})" if disks else "  (empty)"
            lines.append(f"{name}: {disks}{top}")
        return "\n".join(lines)

    @staticmethod
    def parse(content: str) -> tuple[str, str] | None:
        """Read a move like ``A C``, ``a->c``, ``from A to C`` or ``1 3``; ``None`` if it is not one."""
        rest = _NOISE.sub(" ", content).split()
        if len(rest) == 1 and len(rest[0]) == 2:  # "AC"
            rest = list(rest[0])
        if len(rest) != 2 or not all(_PEG_WORD.fullmatch(tok) for tok in rest):
            return None
        src, dst = (PEGS[int(t) - 1] if t.isdigit() else t.upper() for t in rest)
        return src, dst

    def move(self, src: str, dst: str) -> tuple[bool, str]:
        """Move the top disk of ``src`` onto ``dst``; returns ``(accepted, feedback)``."""
        if src == dst:
            return False, f"Source and target are both {src}; a move needs two different pegs."
        if not self.pegs[src]:
            return False, f"Peg {src} is empty; there is no disk to move."
        disk = self.pegs[src][-1]
        if self.pegs[dst] and self.pegs[dst][-1] < disk:
            return False, f"Disk {disk} cannot go on top of the smaller disk {self.pegs[dst][-1]} on peg {dst}."
        self.pegs[dst].append(self.pegs[src].pop())
        return True, f"Moved disk {disk} from {src} to {dst}."


class TowerofHanoiConfig(GameConfig):
    """Configuration of :class:`TowerofHanoiEnv`.

    Attributes:
        num_disks: Disks on peg A at the start; the shortest solution takes ``2**num_disks - 1`` moves.
        max_turns: Moves allowed.
        randomize: Draw ``num_disks`` from 3..5 and ``max_turns = 2**num_disks - 1 + 2 * num_disks``
            at every reset.
    """

    num_disks: int = Field(3, ge=1, le=12)
    max_turns: int = Field(10, ge=1, le=10_000)


class TowerofHanoiEnv(GameEnv[TowerofHanoiConfig]):
    """Move the tower from peg A to peg C.

    Rewards: 1.0 when every disk is on peg C (terminated, success). When the turns run out first, the
    last turn pays ``disks on C / num_disks``. Moving from an empty peg, onto a smaller disk or onto the
    same peg is rejected: reward 0 and the turn is spent. A box that does not name two pegs is a format error.
    """

    config_model = TowerofHanoiConfig
    title = "Tower of Hanoi"

    def _draw_config(self) -> TowerofHanoiConfig:
        disks = self.py_random.randint(3, 5)
        return self.config.model_copy(update={"num_disks": disks, "max_turns": 2**disks - 1 + 2 * disks})

    def _new_game(self) -> None:
        self.board = HanoiBoard(self.params.num_disks)

    def rules(self) -> str:
        n = self.params.num_disks
        return (
            f"There are three pegs, A, B and C. Peg A holds {n} disk{'s' if n != 1 else ''}, numbered by size "
            f"(1 is the smallest). Move the whole tower to peg C: one top disk per turn, and never a larger disk "
            "on top of a smaller one. Pegs are listed bottom disk first."
        )

    def move_format(self) -> tuple[str, str]:
        return "the peg to take the top disk from and the peg to put it on", "A C"

    def render(self) -> str:
        return self.board.render()

    def _play(self, content: str) -> Outcome:
        move = HanoiBoard.parse(content)
        if move is None:
            return Outcome(f"{content[:40]!r} does not name two pegs from A, B and C.", status="format_error")
        src, dst = move
        accepted, feedback = self.board.move(src, dst)
        parsed = f"{src} {dst}"
        if not accepted:
            return Outcome(f"{feedback} That turn is lost.", parsed=parsed, invalid=True)
        if self.board.solved:
            return Outcome(f"{feedback} The tower stands on peg C.", REWARD_SUCCESS, "won", parsed=parsed)
        return Outcome(feedback, parsed=parsed)

    def _on_truncation(self) -> tuple[float, str]:
        on_c = len(self.board.pegs["C"])
        return on_c / self.params.num_disks, f"Out of turns with {on_c} of {self.params.num_disks} disks on peg C."

    def expert_moves(self) -> list[str]:
        """The optimal recursion from the start position, as boxed answers (the scripted expert)."""
        return [f"\\boxed{{{src} {dst}}}" for src, dst in optimal_moves(self.params.num_disks)]

    def expert_action(self) -> str:
        """The next optimal move from the current position (it recovers from earlier mistakes)."""
        move = next_move(self.board.pegs) or ("A", "C")
        return f"\\boxed{{{move[0]} {move[1]}}}"

    def sample_random_action(self) -> str:
        src, dst = self.py_random.sample(PEGS, 2)
        return f"\\boxed{{{src} {dst}}}"
