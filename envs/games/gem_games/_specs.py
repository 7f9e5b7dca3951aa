"""Helpers for the light spec modules (``specs_*.py``): declare a game's variants in one call.

This module imports only ``gem_core.registry``; listing ids never imports a game.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gem_core.registry import EnvSpec

__all__ = ["GAME_TAGS", "game_variants"]

#: Tags shared by every game id.
GAME_TAGS: tuple[str, ...] = ("game", "multi-turn", "offline")


def game_variants(
    name: str,
    entry_point: str,
    variants: Mapping[str, Mapping[str, Any]],
    *,
    description: str,
    version: int = 0,
    tags: tuple[str, ...] = (),
    cpu_bound: bool = False,
) -> list[EnvSpec]:
    """One :class:`EnvSpec` per variant, with GEM's id scheme ``game:<name>-v<version>-<variant>``.

    Args:
        name: Game name as in the id, e.g. ``"Sudoku"``.
        entry_point: ``"gem_games.<module>:<Class>"``; imported only by ``make``.
        variants: Variant name (``easy``, ``hard``, ``random``...) to constructor kwargs.
        description: One line shown by ``gem list``; the variant name is appended.
        version: The ``-vN`` part of the id.
        tags: Extra tags besides :data:`GAME_TAGS`.
        cpu_bound: Hint for vector envs (e.g. a game whose generator runs a solver).

    Returns:
        The specs, in the order of ``variants``.
    """
    return [
        EnvSpec(
            id=f"game:{name}-v{version}-{variant}",
            entry_point=entry_point,
            kwargs=dict(kwargs),
            description=f"{description} ({variant})",
            tags=(*GAME_TAGS, *tags, variant),
            cpu_bound=cpu_bound,
        )
        for variant, kwargs in variants.items()
    ]
