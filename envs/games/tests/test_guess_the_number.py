from __future__ import annotations

import math
import re

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.guess_the_number import GuessTheNumberEnv

VARIANTS = ["easy", "hard", "random"]
_HINT = re.compile(r"secret number is (higher|lower) than (-?\d+)")
_RANGE = re.compile(r"from (-?\d+) to (-?\d+)")


def binary_search(env: GuessTheNumberEnv, obs: str) -> str:
    """Bisect the interval the observations leave open; reads only the observation text."""
    if env.turn == 0:
        low, high = (int(x) for x in _RANGE.search(obs).groups())  # type: ignore[union-attr]
        env.expert_bounds = [low, high]  # type: ignore[attr-defined]
    bounds = env.expert_bounds  # type: ignore[attr-defined]
    if (hint := _HINT.search(obs)) is not None:
        direction, guess = hint.group(1), int(hint.group(2))
        if direction == "higher":
            bounds[0] = guess + 1
        else:
            bounds[1] = guess - 1
    return f"My guess is \\boxed{{{(bounds[0] + bounds[1]) // 2}}}"


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"seed{s}")
def test_binary_search_wins_within_log2_turns(variant: str, seed: int, expert_wins) -> None:
    episode = expert_wins(f"game:GuessTheNumber-v0-{variant}", binary_search, seed)
    low, high = (int(x) for x in _RANGE.search(episode.observations[0]).groups())  # type: ignore[union-attr]
    assert episode.total == 1.0
    assert episode.turns <= math.ceil(math.log2(high - low + 1)) + 1


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
def test_builtin_expert_matches_the_bound(variant: str, expert_wins) -> None:
    for seed in range(20):
        episode = expert_wins(f"game:GuessTheNumber-v0-{variant}", seed=seed)
        low, high = (int(x) for x in _RANGE.search(episode.observations[0]).groups())  # type: ignore[union-attr]
        assert episode.turns <= math.ceil(math.log2(high - low + 1)) + 1


def test_guess_zero_is_an_invalid_move_not_a_format_error() -> None:
    env = GuessTheNumberEnv(low=1, high=10, max_turns=4)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\\boxed{0}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["format_error"] is False and info["invalid_move"] is True
    assert "outside the range 1 to 10" in obs


def test_zero_can_be_the_secret() -> None:
    env = GuessTheNumberEnv(low=0, high=1, max_turns=2)
    secrets = set()
    for seed in range(20):
        env.reset(seed=seed)
        secrets.add(env.secret)
        if env.secret == 0:
            assert env.step("\\boxed{0}")[1] == 1.0
    assert secrets == {0, 1}


@pytest.mark.parametrize(
    "content", ["seven", "3.5", "1e3", "5, 6", ""], ids=["word", "fraction", "exp", "two", "empty"]
)
def test_non_integer_box_is_a_format_error(content: str) -> None:
    env = GuessTheNumberEnv()
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{content}}}")
    assert reward == REWARD_FORMAT_ERROR and terminated and info["format_error"]
    assert "whole number from 1 to 10" in obs


@pytest.mark.parametrize("content", ["7", " 7 ", "+7", "7.0", "\\text{7}", "007"], ids=str)
def test_integer_spellings_are_read(content: str) -> None:
    env = GuessTheNumberEnv(low=1, high=10)
    env.reset(seed=0)
    assert env.step(f"\\boxed{{{content}}}")[4]["parsed_action"] == "7"


def test_huge_number_is_out_of_range() -> None:
    env = GuessTheNumberEnv()
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("\\boxed{" + "9" * 5000 + "}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, True)


def test_truncation_pays_closeness_of_last_guess() -> None:
    env = GuessTheNumberEnv(low=1, high=50, max_turns=2)
    env.reset(seed=3)
    wrong = 1 if env.secret > 1 else 50
    env.step(f"\\boxed{{{wrong}}}")
    last = 50 if env.secret != 50 else 49
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{last}}}")
    assert truncated and not terminated and info["success"] is False
    assert reward == pytest.approx(1 - abs(last - env.secret) / 49)
    assert f"was {env.secret}" in obs


def test_truncation_without_valid_guess_pays_nothing() -> None:
    env = GuessTheNumberEnv(max_turns=1)
    env.reset(seed=0)
    assert env.step("\\boxed{99}")[1:4] == (0.0, False, True)


def test_history_is_in_the_observation() -> None:
    env = GuessTheNumberEnv(low=1, high=50, max_turns=7)
    env.reset(seed=5)
    assert 1 < env.secret < 50
    env.step("\\boxed{1}")
    obs = env.step("\\boxed{50}")[0]
    assert "Guesses so far: 1 (secret is higher), 50 (secret is lower)." in obs


def test_random_variant_draws_documented_ranges() -> None:
    env = gem_core.make("game:GuessTheNumber-v0-random")
    spans = set()
    for seed in range(60):
        env.reset(seed=seed)
        p = env.params
        assert 1 <= p.low <= 10 and 5 <= p.high - p.low <= 50
        assert p.max_turns == math.ceil(math.sqrt(p.high - p.low)) + 1
        spans.add(p.high - p.low)
    assert len(spans) > 10


def test_bad_range_is_a_config_error() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="low"):
        gem_core.make("game:GuessTheNumber-v0-easy", low=10, high=3)
