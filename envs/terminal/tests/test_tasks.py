"""Every shipped task: its reference solution scores 1 and a no-op scores 0, through the env's own parsing."""

from __future__ import annotations

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


def test_at_least_twenty_tasks_load_and_none_is_skipped() -> None:
    assert len(TASKS) >= 20
    assert SKIPPED == []
    kinds = {tag for task in TASKS for tag in task.tags}
    assert {"files", "text", "git", "python", "make", "build", "services", "processes"} <= kinds


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


@needs_sandbox
@pytest.mark.parametrize("forgery", FORGERIES.values(), ids=list(FORGERIES))
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
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
            result = env.run_checker("bash /tests/mutated.sh", task.test_timeout_s)
            assert not result.ok, f"line {index + 1} cannot fail the checker: {lines[index]!r}"
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
