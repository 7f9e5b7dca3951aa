from __future__ import annotations

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.mastermind import MastermindEnv, score_code

VARIANTS = ["easy", "hard", "random"]


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", range(15), ids=lambda s: f"seed{s}")
def test_elimination_expert_cracks_the_code(variant: str, seed: int, expert_wins) -> None:
    expert_wins(f"game:Mastermind-v0-{variant}", seed=seed)


def test_expert_with_duplicates_allowed(play) -> None:
    env = MastermindEnv(code_length=4, num_symbols=6, allow_duplicates=True, max_turns=12)
    for seed in range(5):
        assert play(env, seed=seed).total == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("guess", "secret", "pegs"),
    [((1, 2, 3, 4), (1, 2, 3, 4), (4, 0)), ((4, 3, 2, 1), (1, 2, 3, 4), (0, 4)), ((1, 1, 2, 2), (1, 2, 1, 3), (1, 2)),
     ((5, 6, 7, 8), (1, 2, 3, 4), (0, 0)), ((1, 1, 1, 1), (1, 2, 3, 4), (1, 0))],
    ids=["all-black", "all-white", "duplicates", "none", "repeats-count-once"],
)  # fmt: skip
def test_score_code(guess: tuple[int, ...], secret: tuple[int, ...], pegs: tuple[int, int]) -> None:
    assert score_code(guess, secret) == pegs


def test_milestone_rewards_pay_only_new_black_pegs() -> None:
    env = MastermindEnv(code_length=4, num_symbols=8, max_turns=30)
    env.reset(seed=0)
    env.secret = (1, 2, 3, 4)
    assert env.step("\\boxed{1 5 6 7}")[1] == pytest.approx(0.25)
    assert env.step("\\boxed{1 6 7 8}")[1] == 0.0  # one black again: no new milestone
    assert env.step("\\boxed{2 1 3 4}")[1] == pytest.approx(0.25)
    _, reward, terminated, _, info = env.step("\\boxed{1234}")
    assert reward == pytest.approx(0.5) and terminated and info["success"]


@pytest.mark.parametrize(
    ("content", "says"),
    [("1 2 3", "has 3 digits"), ("1 2 3 9", "outside 1 to 8"), ("1 1 2 3", "repeats a digit"), ("0 1 2 3", "outside")],
    ids=["short", "digit-too-big", "repeat", "zero"],
)
def test_illegal_codes_are_invalid_moves(content: str, says: str) -> None:
    env = MastermindEnv()
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{content}}}")
    assert (reward, terminated, info["invalid_move"], info["format_error"]) == (0.0, False, True, False)
    assert says in obs


@pytest.mark.parametrize("content", ["1,2,3,4", "[1 2 3 4]", "1-2-3-4", "1234"], ids=str)
def test_code_spellings_are_read(content: str) -> None:
    env = MastermindEnv()
    env.reset(seed=0)
    assert env.step(f"\\boxed{{{content}}}")[4]["parsed_action"] == "1 2 3 4"


def test_letters_are_a_format_error() -> None:
    env = MastermindEnv()
    env.reset(seed=0)
    obs, reward, terminated, _, _ = env.step("\\boxed{red blue}")
    assert reward == REWARD_FORMAT_ERROR and terminated and "4 digits from 1 to 8" in obs


def test_history_is_in_the_observation() -> None:
    env = MastermindEnv(code_length=2, num_symbols=6, max_turns=10)
    env.reset(seed=1)
    env.step("\\boxed{1 2}")
    obs = env.step("\\boxed{3 4}")[0]
    assert "1. 1 2  ->  black" in obs and "2. 3 4  ->  black" in obs


def test_random_variant_draws_documented_ranges() -> None:
    env = gem_core.make("game:Mastermind-v0-random")
    for seed in range(30):
        env.reset(seed=seed)
        p = env.params
        assert 2 <= p.code_length <= 4 and 6 <= p.num_symbols <= 8 and p.max_turns == 10 * (p.code_length - 1)
        assert len(set(env.secret)) == p.code_length and all(1 <= d <= p.num_symbols for d in env.secret)


def test_too_few_symbols_is_a_config_error() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="num_symbols"):
        MastermindEnv(code_length=5, num_symbols=4)
