"""The failed-episode record shared by the env module and the advantage step; no import circle in gem_rl2."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import gem_rl2
from gem_rl2 import env_errors

PACKAGE = Path(gem_rl2.__file__).parent


def imports_of(path: Path) -> set[str]:
    """gem_rl2 modules a file imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gem_rl2"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gem_rl2"))
    return found


def test_gem_rl2_has_no_import_circle() -> None:
    modules = {f"gem_rl2.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph[start])

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert not circles, f"modules on an import circle: {circles}"
    assert "gem_rl2.episodes" not in graph["gem_rl2.advantages"]
    assert "gem_rl2.advantages" not in graph["gem_rl2.episodes"]


def test_failed_episodes_are_drained_once_in_order() -> None:
    from gem_core.rl.types import Episode

    env_errors.drain()
    episodes = [Episode(turns=[], start_state_id=f"test/seed={i}") for i in range(3)]
    for episode in episodes:
        env_errors.record(episode)
    assert env_errors.drain() == episodes and env_errors.drain() == []


def test_the_error_reward_marks_only_where_the_trainer_drops_it(monkeypatch) -> None:
    monkeypatch.setattr(env_errors, "_installed", False)
    assert env_errors.error_reward() == 0.0 and not env_errors.rebn_installed()
    env_errors.mark_installed()
    assert math.isnan(env_errors.error_reward()) and env_errors.rebn_installed()
