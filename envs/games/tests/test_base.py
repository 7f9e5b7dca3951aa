r"""The shared machinery: the ``\\boxed{}`` parser and the episode rules of :class:`GameEnv`."""

from __future__ import annotations

import pytest
from gem_core.errors import ConfigError, ResetNeeded
from hypothesis import given
from hypothesis import strategies as st

from gem_games._base import REWARD_FORMAT_ERROR, GameConfig, GameEnv, Outcome, extract_boxed, normalize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{7}", "7"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{  UP  }", "UP"),
        ("\\boxed {up}", "up"),
        ("\\Boxed{up}", "up"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\boxed{3}}", "3"),
        ("\\boxed{\\text{ left }}", "left"),
        ("$\\boxed{$5$}$", "5"),
        ("\\fbox{4}", "4"),
        ("\\boxed{a\n  b}", "a b"),
        ("\\boxed{}", ""),
        ("\\boxed{1} and an unclosed \\boxed{2", "1"),
        ("\\boxed{1}}}", "1"),
        ("no box at all", None),
        ("\\boxed{", None),
        ("\\boxed{" * 1000, None),
        ("\\boxed{" * 5000 + "7" + "}" * 5000, "7"),
        ("\\boxed{\\boxed{1} or \\boxed{2}} then \\boxed{x{y}}", "x{y}"),
        ("\\boxed{\\boxed{1} or \\boxed{2}}", "2"),
        ("", None),
    ],
    ids=[
        "plain",
        "last-wins",
        "whitespace",
        "space-before-brace",
        "case",
        "balanced-braces",
        "nested-box",
        "text-wrapper",
        "dollars",
        "fbox",
        "newlines",
        "empty",
        "unclosed-later",
        "extra-closers",
        "none",
        "unclosed",
        "many-unclosed",
        "deeply-nested",
        "later-top-level-wins",
        "last-nested-wins",
        "empty-text",
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@given(st.text(alphabet=st.sampled_from("\\boxed{}$ x1\n"), max_size=200) | st.text(max_size=200))
def test_extract_boxed_never_raises(text: str) -> None:
    result = extract_boxed(text)
    assert result is None or isinstance(result, str)


plain = st.text(alphabet=st.characters(blacklist_characters="{}\\$", blacklist_categories=("Cs",)), max_size=30)


@given(before=plain, move=plain.filter(lambda t: t.strip()), after=plain)
def test_last_box_round_trips(before: str, move: str, after: str) -> None:
    text = f"{before}\\boxed{{0}} {before} \\boxed{{{move}}}{after}"
    assert extract_boxed(text) == " ".join(move.split())


def test_normalize_folds_case_and_spaces() -> None:
    assert normalize("  Reveal   3\t2 ") == "reveal 3 2"


class CountTo(GameEnv[GameConfig]):
    """Say the next number, starting at 1; reaching 3 wins. Earns 1/3 per correct number."""

    title = "Count"

    def _new_game(self) -> None:
        self.count = 0

    def _play(self, content: str) -> Outcome:
        if not content.isdigit():
            return Outcome("not a number.", status="format_error")
        if int(content) != self.count + 1:
            return Outcome("wrong number.", parsed=content, invalid=True)
        self.count += 1
        return Outcome("right.", 1 / 3, "won" if self.count == 3 else "continue", parsed=content)

    def render(self) -> str:
        return f"Count: {self.count}"

    def rules(self) -> str:
        return "Count up."

    def move_format(self) -> tuple[str, str]:
        return "the next number", "1"


def test_observation_holds_board_and_format() -> None:
    env = CountTo(max_turns=5)
    obs, info = env.reset(seed=0)
    assert "Count: 0" in obs and "\\boxed{1}" in obs and "5 turns" in obs
    obs, reward, terminated, truncated, info = env.step("\\boxed{1}")
    assert "Count: 1" in obs and "4 turns left" in obs
    assert (reward, terminated, truncated) == (pytest.approx(1 / 3), False, False)
    assert info == {"turn": 1, "format_error": False, "parsed_action": "1", "invalid_move": False}


def test_win_terminates_with_success() -> None:
    env = CountTo(max_turns=5)
    env.reset(seed=0)
    total = 0.0
    for n in (1, 2, 3):
        _, reward, terminated, truncated, info = env.step(f"\\boxed{{{n}}}")
        total += reward
    assert terminated and not truncated and info["success"] is True
    assert total == pytest.approx(1.0)
    with pytest.raises(ResetNeeded, match="reset"):
        env.step("\\boxed{4}")


@pytest.mark.parametrize(
    ("action", "says"),
    [("just text", "no \\boxed"), ("\\boxed{}", "empty"), ("\\boxed{x}", "not a number")],
    ids=["no-box", "empty-box", "bad-content"],
)
def test_format_error_terminates_and_explains(action: str, says: str) -> None:
    env = CountTo(max_turns=5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert reward == REWARD_FORMAT_ERROR
    assert terminated and not truncated
    assert info["format_error"] is True and info["success"] is False
    assert obs.startswith("Format error") and says in obs and "\\boxed{1}" in obs and "Count: 0" in obs


def test_turn_limit_truncates() -> None:
    env = CountTo(max_turns=2)
    env.reset(seed=0)
    assert env.step("\\boxed{5}")[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step("\\boxed{5}")
    assert truncated and not terminated and info["success"] is False and info["invalid_move"] is True


def test_raw_answer_format_reads_whole_reply() -> None:
    env = CountTo(max_turns=3, answer_format="raw")
    obs, _ = env.reset(seed=0)
    assert "\\boxed" not in obs
    assert env.step(" 1 \n")[1] == pytest.approx(1 / 3)
    assert env.step("two is \\boxed{2}")[1] == pytest.approx(1 / 3), "a box still wins"
    obs, reward, terminated, *_ = env.step("   ")
    assert (reward, terminated) == (REWARD_FORMAT_ERROR, True) and "empty" in obs


def test_step_before_reset_raises() -> None:
    with pytest.raises(ResetNeeded, match="before reset"):
        CountTo().step("\\boxed{1}")


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        CountTo(max_turns=0)
    with pytest.raises(ConfigError, match="colour"):
        CountTo(colour="red")
