"""Registration: ids, variants, the GEM alias, and that listing ids imports no game."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import gem_core
import pytest
from gem_core.errors import ConfigError
from gem_core.registry import EnvAlias, EnvSpec

import gem_games
from gem_games import plugin
from gem_games._base import GameEnv


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


MODULES = sorted(m.name for m in pkgutil.walk_packages(gem_games.__path__, "gem_games."))


@pytest.mark.parametrize("module", MODULES, ids=MODULES)
def test_module_imports_alone(module: str) -> None:
    subprocess.run([sys.executable, "-W", "error", "-c", f"import {module}"], check=True, capture_output=True)


def test_listing_does_not_import_numpy() -> None:
    code = "import sys, gem_core; gem_core.list_envs(namespace='game'); print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


# The kwargs GEM (gem-llm 0.1.0) registers for these ids, so a GEM user's config keeps working here.
GEM_KWARGS = {
    "game:GuessTheNumber-v0-easy": {"min_number": 1, "max_number": 10, "max_turns": 4},
    "game:GuessTheNumber-v0-hard": {"min_number": 1, "max_number": 50, "max_turns": 7},
    "game:Mastermind-v0-easy": {"code_length": 2, "num_numbers": 6, "max_turns": 10, "duplicate_numbers": False},
    "game:Mastermind-v0-hard": {"code_length": 4, "num_numbers": 8, "max_turns": 30, "duplicate_numbers": False},
    "game:Minesweeper-v0-easy": {"rows": 5, "cols": 5, "num_mines": 5, "max_turns": 25},
    "game:Minesweeper-v0-hard": {"rows": 8, "cols": 8, "num_mines": 12, "max_turns": 64},
    "game:Wordle-v0-easy": {"word_length": 3, "only_real_words": True, "max_turns": 15},
    "game:Wordle-v0-hard": {"word_length": 5, "only_real_words": True, "max_turns": 25},
    "game:Hangman-v0-easy": {"word_length": 3, "hardcore": False, "max_turns": 10},
    "game:Hangman-v0-hard": {"word_length": 7, "hardcore": False, "max_turns": 20},
    "game:FifteenPuzzle-v0-easy": {"num_rows": 2, "max_turns": 10},
    "game:FifteenPuzzle-v0-hard": {"num_rows": 4, "max_turns": 50},
}


@pytest.mark.parametrize("env_id", sorted(GEM_KWARGS), ids=sorted(GEM_KWARGS))
def test_gem_kwargs_give_the_same_game(env_id: str) -> None:
    ours = gem_core.make(env_id)
    theirs = gem_core.make(env_id, **GEM_KWARGS[env_id])
    assert isinstance(ours, GameEnv) and isinstance(theirs, GameEnv)
    differing = {
        name for name in type(ours.config).model_fields if getattr(ours.config, name) != getattr(theirs.config, name)
    }
    assert differing <= {"only_known_words"}, differing  # GEM's Wordle refuses unlisted words; ours by default not


def test_gem_name_overrides_the_spec_value() -> None:
    env = gem_core.make("game:GuessTheNumber-v0-easy", max_number=30)
    assert isinstance(env, GameEnv) and (env.config.low, env.config.high) == (1, 30)


def test_unsupported_gem_option_is_refused_clearly() -> None:
    with pytest.raises(ConfigError, match="hardcore"):
        gem_core.make("game:Hangman-v0-easy", hardcore=True)
