"""Every shipped task: its reference solution scores 1 and a no-op scores 0, through the env's own parsing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_terminal.env import TASKS_DIR, TerminalEnv, reference_action
from gem_terminal.forgeries import FORGERIES, Forgery, as_tool_call
from gem_terminal.loader import TerminalTask, load_tasks
from gem_tool_python.episode import episodes_available

USABLE, WHY = episodes_available()
needs_sandbox = pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}")

TASKS, SKIPPED = load_tasks(TASKS_DIR)


#: Each shipped task's category (task.toml's ``[metadata] category``) by its name's prefix.
CATEGORIES = {"files": "files", "text": "text", "git": "git", "python": "python", "make": "build",
              "process": "processes", "sqlite": "sqlite", "perm": "permissions",
              "build": "build", "py": "python", "svc": "services", "proc": "processes"}  # fmt: skip


def test_the_shipped_tasks_load_in_harbors_format_and_cover_every_category() -> None:
    assert SKIPPED == []
    assert len(TASKS) >= 60
    assert {t.format for t in TASKS} == {"harbor"}
    for task in TASKS:
        prefix = task.name.split("-", 1)[0]
        assert task.metadata.get("category") == CATEGORIES[prefix], task.name
    assert set(CATEGORIES.values()) <= {t.metadata.get("category") for t in TASKS}
    assert sum(t.name.startswith("sqlite-") for t in TASKS) >= 6 and sum(t.name.startswith("perm-") for t in TASKS) >= 6


#: A checker's chmod/chown of a path under the agent's work dir (Python or shell).
OPENS_AGENT_PATH = re.compile(r"""os\.ch(?:mod|own)\(\s*["']/app|^\s*ch(?:mod|own)\b[^\n]*\s/app\b""", re.MULTILINE)


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_the_verifier_follows_the_shipped_conventions(task: TerminalTask) -> None:
    """What lets one tests/test.sh run under gem and under Harbor alike (docs/terminal.md, "Shipped tasks")."""
    assert task.checker_path is not None
    lines = task.checker_path.read_text().splitlines()
    commands = [line for line in lines if line.strip() and not line.startswith("#")]
    # 0 first (under set -e), 1 last: the first failing check leaves the 0.
    assert commands[0].startswith("set -e")
    assert next(c for c in commands[1:] if c != "mkdir -p /logs/verifier") == "echo 0 > /logs/verifier/reward.txt"
    assert commands[-1] == "echo 1 > /logs/verifier/reward.txt"
    assert "/checker/" not in task.checker_path.read_text(), "gem's checker folders are not there under Harbor"
    # A checker that, as root, changes the mode or owner of a path of the agent's checks first that no link
    # is on its path: through one, it would open /logs/verifier to the agent's programs.
    for path in sorted((task.checker_path.parent).rglob("*")):
        if path.is_file() and OPENS_AGENT_PATH.search(text := path.read_text(errors="replace")):
            assert "realpath" in text, f"{path.name} opens a path of the agent's without checking for links"


@needs_sandbox
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_reference_solution_scores_one_and_a_no_op_zero(task: TerminalTask) -> None:
    env = TerminalEnv(task=task.name)
    try:
        obs, info = env.reset(seed=0)
        assert task.instruction in obs and info["task"] == task.name
        obs, reward, terminated, truncated, info = env.step(reference_action(task))
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert "[exit code] 0" in obs, obs
        obs, reward, terminated, truncated, info = env.step("<done></done>")
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True), info["checker_output"]
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("<done></done>")
        assert (reward, terminated, info["success"]) == (0.0, True, False), info["checker_output"]
    finally:
        env.close()


def _play(task: TerminalTask, commands: list[str]) -> tuple[float, dict[str, object], list[str]]:
    """Reset ``task``, run ``commands`` (one reply each), say done: the reward, the last info, the outputs."""
    env = TerminalEnv(task=task.name)
    try:
        env.reset(seed=0)
        outputs = []
        for command in commands:
            obs, _, terminated, _, _ = env.step(as_tool_call(command))
            assert not terminated, obs
            outputs.append(obs)
        _, reward, terminated, _, info = env.step("<done></done>")
        assert terminated
        return reward, info, outputs
    finally:
        env.close()


#: Every (task, forging class) whose moves differ from the no-op's: a git fake on a task with no repository
#: plays no command, which the no-op already covers (and would cost an episode per task). Classes that need
#: a root agent are the container suite's (the sandbox's agent is never root).
PLAYS = [(t, f) for t in TASKS for f in FORGERIES.values() if (f.name == "no-op" or f.commands(t)) and not f.needs_root]


@needs_sandbox
@pytest.mark.parametrize(("task", "forgery"), PLAYS, ids=[f"{t.name}-{f.name}" for t, f in PLAYS])
def test_no_forging_move_scores(task: TerminalTask, forgery: Forgery) -> None:
    """Every forging class of ``forgeries.py`` over every shipped task: reward 0."""
    reward, info, outputs = _play(task, forgery.commands(task))
    assert (reward, info["success"]) == (0.0, False), (forgery.about, info["checker_output"], outputs[-3:])


#: Plantings outside the work dir (the agent's home): after the real work they must leave its reward alone.
#: (Not Python start-up hooks in the agent's user site: those run in the agent's own programs, which the
#: checker runs as the agent, so a hook that exits at once breaks the work, and the reward is rightly 0.)
HOME_PLANTS = [
    "for f in ~/.bashrc ~/.profile ~/.bash_profile; do echo 'exit 0' > $f; done",
    "mkdir -p ~/bin ~/.local/bin && for t in git diff test python3 grep tar make as-agent; do "
    "printf '#!/bin/sh\\nexit 1\\n' > ~/bin/$t && chmod +x ~/bin/$t && cp ~/bin/$t ~/.local/bin/$t; done",
    "printf '[core]\\n\\tpager = false\\n[safe]\\n\\tdirectory = /nowhere\\n' > ~/.gitconfig && "
    "mkdir -p ~/.config/git && echo '*' > ~/.config/git/ignore",
]


@needs_sandbox
@settings(max_examples=10, deadline=None)
@given(task=st.sampled_from(TASKS), plants=st.sets(st.sampled_from(HOME_PLANTS), min_size=1))
def test_plantings_after_the_work_leave_the_verdict_alone(task: TerminalTask, plants: set[str]) -> None:
    """The reference solution, then files planted in the agent's home: the checker still judges the work (1)."""
    reward, info, _ = _play(task, [task.solution, *sorted(plants)])
    assert (reward, info["success"]) == (1.0, True), info["checker_output"]


def _checker_lines(checker: str) -> list[int]:
    """Indexes of the checker's own command lines (no comments, blanks, ``set``, heredoc bodies)."""
    lines, inside, terminator = [], False, ""
    for index, line in enumerate(checker.splitlines()):
        stripped = line.strip()
        if inside:
            inside = stripped != terminator
            continue
        if "<<'" in stripped:
            inside, terminator = True, stripped.split("<<'", 1)[1].split("'", 1)[0]
        if stripped and not stripped.startswith(("#", "set ", "cd ")):
            lines.append(index)
    return lines


def _failed(line: str) -> str:
    """``line`` as if its check had failed: a negated check's command succeeds, any other fails."""
    indent = line[: len(line) - len(line.lstrip())]
    return indent + ("! true" if line.lstrip().startswith("! ") else "false")


@needs_sandbox
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_every_check_of_the_checker_can_fail_it(task: TerminalTask) -> None:
    """After the reference solution, making any one line's check fail makes the checker fail.

    Catches checks that cannot fail: ``! cmd`` under ``set -e`` (bash ignores a negated command's
    status there), ``|| true``, a check whose status is lost in a pipeline.
    """
    env = TerminalEnv(task=task.name)
    try:
        env.reset(seed=0)
        env.step(reference_action(task))
        sandbox = env._sandbox
        probe = env._probe(task)
        assert env.stage_checker() is None
        for relative, data in task.tests.items():
            sandbox.write_file(f"/tests/{relative}", data)
        if probe is not None:
            sandbox.write_file("/tests/gem-probe.out", probe.encode())
        lines = task.checker.splitlines()
        for index in _checker_lines(task.checker):
            if lines[index].lstrip().startswith(("out=$(", "for ", "if ")) and "<<'" in lines[index]:
                continue  # a heredoc's opening: its failure is the marker line's
            mutated = "\n".join([*lines[:index], _failed(lines[index]), *lines[index + 1 :]])
            sandbox.write_file("/tests/mutated.sh", mutated.encode(), mode=0o755)
            score, output = env.score_checker("bash /tests/mutated.sh")
            assert score == 0.0, f"line {index + 1} cannot fail the checker: {lines[index]!r}\n{output}"
    finally:
        env.close()


@needs_sandbox
@pytest.mark.parametrize("hide", ["repo-config", "info-exclude", "global-ignore"])
def test_a_clean_git_status_cannot_be_faked_by_config(hide: str) -> None:
    """An empty .gitignore committed, the build output only hidden by config: the checker sees it (0)."""
    commit = "cd /app/proj && touch .gitignore && git add .gitignore && git commit -qm ignore"
    setting = {
        "repo-config": "git config status.showUntrackedFiles no",
        "info-exclude": "printf 'build/\\n*.o\\n' >> .git/info/exclude",
        "global-ignore": "mkdir -p ~/.config/git && printf 'build/\\n*.o\\n' > ~/.config/git/ignore",
    }[hide]
    reward, info, outputs = _play(
        next(t for t in TASKS if t.name == "git-ignore-build"),
        [f'{commit} && {setting} && test -z "$(git status --porcelain)"'],
    )
    assert "[exit code] 0" in outputs[0], outputs[0]  # the agent's own git status is fooled
    assert (reward, info["success"]) == (0.0, False), info["checker_output"]
