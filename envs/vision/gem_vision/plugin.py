"""gem-vision's plugin: declares every ``vision:*`` id; entry points are strings, imported only by ``make``."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest

_TAGS = ("vision", "multimodal", "offline")


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1, namespaces=("vision",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            id="vision:Geometry-v0",
            entry_point="gem_vision.geometry:GeometryEnv",
            description="Geometry3K-style problems on a drawn diagram (angles, lengths, areas), exact answers",
            tags=(*_TAGS, "math", "single-turn"),
        ),
        *[
            EnvSpec(
                id=f"vision:{kind.title()}Chart-v0",
                entry_point="gem_vision.charts:ChartEnv",
                kwargs={"kind": kind},
                description=f"questions on a {kind} chart drawn from data with known answers",
                tags=(*_TAGS, "charts", "single-turn"),
            )
            for kind in ("bar", "line", "pie")
        ],
        *[
            EnvSpec(
                id=f"vision:Sudoku-v0-{variant}",
                entry_point="gem_vision.sudoku:VisualSudokuEnv",
                kwargs=kwargs,
                description=f"game:Sudoku with the board shown as a picture ({variant})",
                tags=(*_TAGS, "game", "multi-turn", variant),
            )
            for variant, kwargs in (
                ("easy", {"scale": 4, "clues": 10, "max_turns": 15}),
                ("hard", {"scale": 9, "clues": 50, "max_turns": 50}),
            )
        ],
        EnvSpec(
            id="vision:Geometry3K-v0",
            entry_point="gem_vision.geometry3k:Geometry3KEnv",
            description="Geometry3K (InterGPS release) from a local folder: make(..., data_dir=..., split=...)",
            tags=(*_TAGS, "math", "single-turn", "dataset"),
        ),
    ]
