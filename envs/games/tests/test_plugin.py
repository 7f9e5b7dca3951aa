"""Registration: ids, variants, the GEM alias, and that listing ids imports no game."""

from __future__ import annotations

import subprocess
import sys

import gem_core
import pytest
from gem_core.registry import EnvAlias, EnvSpec

from gem_games import plugin


def test_every_declaration_is_a_game_spec() -> None:
    specs = plugin.register_envs()
    assert specs, "no specs declared"
    for spec in specs:
        assert isinstance(spec, (EnvSpec, EnvAlias))
        assert spec.id.startswith("game:")


def test_every_game_has_easy_hard_random() -> None:
    ids = gem_core.list_envs(namespace="game")
    games = {i.split(":", 1)[1].split("-v", 1)[0] for i in ids}
    for game in games:
        for variant in ("easy", "hard", "random"):
            assert f"game:{game}-v0-{variant}" in ids


def test_gem_alias_is_deprecated_easy_variant() -> None:
    with pytest.warns(DeprecationWarning, match="GuessTheNumber-v0-easy"):
        env = gem_core.make("game:GuessTheNumber-v0")
    assert env.spec is not None and env.spec.id == "game:GuessTheNumber-v0-easy"
    obs, _ = env.reset(seed=0)
    assert "from 1 to 10" in obs


def test_listing_imports_no_game_module() -> None:
    code = (
        "import sys, gem_core\n"
        "ids = gem_core.list_envs(namespace='game')\n"
        "assert ids\n"
        "light = {'gem_games', 'gem_games.plugin', 'gem_games._specs'}\n"
        "heavy = [m for m in sys.modules if m.startswith('gem_games.') and m not in light\n"
        "         and not m.startswith('gem_games.specs')]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
