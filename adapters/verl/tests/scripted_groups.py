"""Groups of episodes whose outcomes a test chooses: a scripted env and policy, played by ``gem_env_agent``.

``test:Scripted-v0`` pays what the action says (``"r=2"``), ends on ``"end"`` (with
``info["success"]`` when the action says ``"win"``), raises on ``"boom"`` (an env error)
and gives -0.5 and a format error to a cut reply (``INVALID_ACTION``). A session's
policy is a :data:`Script` (one move per turn); :func:`expected_metrics` works out, from
the script alone, what each per-episode metric must be. The rows go through verl's v1
worker into the stand-in store, and their prompt groups are registered as verl's
trainer registers them, so verl's own replay buffer can sample them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from verl_harness import Server, Storage, config, play, row, store

import gem_core
from gem_core.conformance import CASES
from gem_core.core import Env
from gem_core.episode import INVALID_ACTION

ENV_ID = "test:Scripted-v0"
MAX_TURNS = 4
MAX_TURN_TOKENS = 16
CUT_REWARD = -0.5


class ScriptedEnv(Env):
    """Pays, ends and fails as the action says."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "Play your moves.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == INVALID_ACTION:
            return "That reply was cut.", CUT_REWARD, False, False, {"format_error": True}
        if "boom" in action:
            raise RuntimeError("ScriptedEnv: boom")
        paid = re.search(r"r=(-?\d+)", action)
        reward = float(paid.group(1)) if paid else 0.0
        if "end" in action:
            return "Done.", reward, True, False, {"success": "win" in action}
        return "Next.", reward, False, False, {}


@dataclasses.dataclass(frozen=True)
class Move:
    """One turn of a scripted policy: ``kind`` is ``"pay"``, ``"cut"`` (a reply over the cap) or ``"boom"``."""

    kind: str = "pay"
    reward: int = 0
    end: bool = False
    win: bool = False

    def text(self) -> str:
        if self.kind == "cut":
            return "x " * MAX_TURN_TOKENS  # more tokens than the per-turn cap
        if self.kind == "boom":
            return "boom"
        return f"r={self.reward}" + (" end" if self.end else "") + (" win" if self.win else "")


#: One session's policy: its moves by turn (turns past the script play ``r=0``).
Script = tuple[Move, ...]
FILLER = Move()


def expected_metrics(script: Script) -> dict[str, float]:
    """The per-episode metrics of a session that plays ``script``, worked out without gem's code."""
    total, turns, cuts = 0.0, 0, 0
    for turn in range(MAX_TURNS):
        move = script[turn] if turn < len(script) else FILLER
        if move.kind == "boom":  # the env raised in this step: the episode ends there, its turns so far kept
            return _metrics(total, turns, cuts, success=False, terminated=False, truncated=False, env_error=True)
        turns += 1
        if move.kind == "cut":
            total, cuts = total + CUT_REWARD, cuts + 1
            continue
        total += move.reward
        if move.end:
            return _metrics(total, turns, cuts, success=move.win, terminated=True, truncated=False, env_error=False)
    return _metrics(total, turns, cuts, success=False, terminated=False, truncated=True, env_error=False)


def _metrics(
    total: float, turns: int, cuts: int, *, success: bool, terminated: bool, truncated: bool, env_error: bool
) -> dict[str, float]:
    return {
        "episode_return": total,
        "success": float(success),
        "num_turns": float(turns),
        "terminated": float(terminated),
        "truncated": float(truncated),
        "cut_turns": float(cuts),
        "format_errors": float(cuts),
        "env_error": float(env_error),
    }


BASE_CASE = dataclasses.replace(
    next(c for c in CASES if c.name == "bisect"),
    name="scripted",
    env_id=ENV_ID,
    limits=dataclasses.replace(CASES[0].limits, max_turns=MAX_TURNS, max_turn_tokens=MAX_TURN_TOKENS),
)


def register() -> None:
    gem_core.register(ENV_ID, ScriptedEnv, override=True)


def loop_config(layout: str, **overrides: Any) -> Any:
    """The trainer config of these tests: rebn, gamma 0.9, ``rollout.n`` sessions per row."""
    cfg = config(BASE_CASE, layout=layout, gamma=0.9)
    for key, value in overrides.items():
        node, _, leaf = key.rpartition(".")
        cfg_node = cfg
        for part in node.split(".") if node else []:
            if part not in cfg_node or cfg_node[part] is None:
                cfg_node[part] = {}
            cfg_node = cfg_node[part]
        cfg_node[leaf] = value
    return cfg


def policy(script: Script) -> Any:
    """The session's ``reply(turn, text)``."""
    return lambda turn, text: (script[turn] if turn < len(script) else FILLER).text()


def play_group(
    storage: Storage, cfg: Any, tokenizer: Any, uid: str, scripts: Sequence[Script], *, global_steps: int = 1
) -> list[str]:
    """Play one dataset row's ``rollout.n`` sessions, store them with verl's v1 worker, mark the group finished.

    Returns the group's new trajectory keys (``{uid}_{session}_{index}``, verl's format).
    """
    before = set(storage.samples)
    storage.kv_batch_put(keys=[uid], partition_id="train", tags=[_prompt_tag("running", global_steps)])
    episodes = []
    for session, script in enumerate(scripts):
        fields = {**row(ENV_ID, seed=session, index=0, session_id=session), "uid": uid, "global_steps": global_steps}
        case = dataclasses.replace(BASE_CASE, reply=policy(script))
        episodes.append((play(cfg, Server(case, tokenizer, global_steps=global_steps), tokenizer, fields), fields))
    store(storage, cfg, tokenizer, episodes)
    storage.kv_batch_put(keys=[uid], partition_id="train", tags=[_prompt_tag("finished", global_steps)])
    return [key for (partition, key) in storage.samples if (partition, key) not in before]


def _prompt_tag(status: str, global_steps: int) -> dict[str, Any]:
    # what verl's trainer and worker write for a prompt group (is_prompt, status, global_steps)
    return {"is_prompt": True, "status": status, "global_steps": global_steps}
