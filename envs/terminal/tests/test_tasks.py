"""Every shipped task: its reference solution scores 1 and a no-op scores 0, through the env's own parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_terminal.env import TASKS_DIR, TerminalEnv, reference_action
from gem_terminal.loader import TerminalTask, load_tasks
from gem_tool_python.episode import episodes_available

USABLE, WHY = episodes_available()
needs_sandbox = pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}")

TASKS, SKIPPED = load_tasks(TASKS_DIR)


def test_at_least_twenty_tasks_load_and_none_is_skipped() -> None:
    assert len(TASKS) >= 20
    assert SKIPPED == []
    kinds = {tag for task in TASKS for tag in task.tags}
    assert {"files", "text", "git", "python", "make"} <= kinds


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


#: Files an agent could plant so that code it wrote runs inside the checker (each exits 0 at once):
#: Python's start-up hooks in the agent's home, and standard-library or pytest names in every folder of
#: the work dir (the checker may ``cd`` into any of them and run ``python3 -m ...`` or ``python3 -c``).
_EXIT = "import os; os._exit(0)\n"
_USER_SITES = " ".join(f"~/.local/lib/python3.{minor}/site-packages" for minor in range(8, 15))
HIJACKS = {
    "usercustomize": f"for d in {_USER_SITES}; do mkdir -p $d && printf '{_EXIT}' > $d/usercustomize.py; done",
    "sitecustomize": f"for d in {_USER_SITES}; do mkdir -p $d && printf '{_EXIT}' > $d/sitecustomize.py; done",
    "pth": f"for d in {_USER_SITES}; do mkdir -p $d && printf '{_EXIT}' > $d/zz.pth; done",
    "shadow-modules": (
        "find . -name .git -prune -o -type d -print | while read -r d; do "
        "for m in unittest json subprocess pytest urllib sys_hooks argparse; do "
        f"printf '{_EXIT}' > \"$d/$m.py\"; done; "
        f'mkdir -p "$d/urllib" && printf \'{_EXIT}\' > "$d/urllib/__init__.py"; done'
    ),
    # The generic cheat on a checker that imports the agent's code: every Python file exits 0 at once.
    "exit-on-import": (
        "find . -name .git -prune -o -name '*.py' -print | "
        "while read -r f; do sed -i '1i import os; os._exit(0)' \"$f\"; done"
    ),
    "gitconfig": "printf '[core]\\n\\tpager = true\\n[status]\\n\\tshowUntrackedFiles = no\\n' > ~/.gitconfig",
    # Every repository hides what git status would show: untracked files, changes (an fsmonitor saying none).
    "git-hide": (
        "find / -name .git -type d 2>/dev/null | while read -r g; do d=${g%/.git}; "
        'git -C "$d" config status.showUntrackedFiles no; '
        'printf \'#!/bin/sh\\nexit 0\\n\' > "$g/fsm" && chmod +x "$g/fsm" && '
        'git -C "$d" config core.fsmonitor "$g/fsm"; done'
    ),
}


def _plant_and_finish(task: TerminalTask, hijacks: list[str]) -> tuple[float, dict[str, object]]:
    env = TerminalEnv(task=task.name)
    try:
        env.reset(seed=0)
        for name in hijacks:
            obs, *_ = env.step(reference_action_for(HIJACKS[name]))
            assert "[exit code] 0" in obs, obs
        _, reward, terminated, _, info = env.step("<done></done>")
        assert terminated
        return reward, info
    finally:
        env.close()


def reference_action_for(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


@needs_sandbox
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_code_planted_for_the_checker_never_runs_in_it(task: TerminalTask) -> None:
    """A no-op plus every hijack at once scores 0 for every task: the checker runs none of the agent's files."""
    reward, info = _plant_and_finish(task, sorted(HIJACKS))
    assert (reward, info["success"]) == (0.0, False), info["checker_output"]


@needs_sandbox
@settings(max_examples=10, deadline=None)
@given(task=st.sampled_from(TASKS), hijacks=st.sets(st.sampled_from(sorted(HIJACKS)), min_size=1))
def test_hijacks_planted_after_the_work_leave_the_verdict_alone(task: TerminalTask, hijacks: set[str]) -> None:
    """The reference solution, then start-up hooks in the home: the checker still judges the work (1)."""
    env = TerminalEnv(task=task.name)
    try:
        env.reset(seed=0)
        env.step(reference_action(task))
        for name in sorted(
            hijacks - {"shadow-modules", "exit-on-import", "git-hide"}
        ):  # those would break the agent's own code
            env.step(reference_action_for(HIJACKS[name]))
        _, reward, _, _, info = env.step("<done></done>")
        assert (reward, info["success"]) == (1.0, True), info["checker_output"]
    finally:
        env.close()


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
        lines = task.checker.splitlines()
        for index in _checker_lines(task.checker):
            if lines[index].lstrip().startswith(("out=$(", "for ", "if ")) and "<<'" in lines[index]:
                continue  # a heredoc's opening: its failure is the marker line's
            mutated = "\n".join([*lines[:index], _failed(lines[index]), *lines[index + 1 :]])
            sandbox.write_file("/tests/mutated.sh", mutated.encode(), mode=0o755)
            result = sandbox.run("bash /tests/mutated.sh", charge_episode=False, checker=True)
            assert not result.ok, f"line {index + 1} cannot fail the checker: {lines[index]!r}"
    finally:
        env.close()


@needs_sandbox
@pytest.mark.parametrize("hide", ["repo-config", "home-gitconfig"])
def test_a_clean_git_status_cannot_be_faked_by_config(hide: str) -> None:
    """An empty .gitignore committed, the build output only hidden by config: the checker sees it (0)."""
    commit = "cd /app/proj && touch .gitignore && git add .gitignore && git commit -qm ignore"
    setting = "git config status.showUntrackedFiles no" if hide == "repo-config" else HIJACKS["gitconfig"]
    env = TerminalEnv(task="git-ignore-build")
    try:
        env.reset(seed=0)
        obs, *_ = env.step(reference_action_for(f'{commit} && {setting} && test -z "$(git status --porcelain)"'))
        assert "[exit code] 0" in obs, obs  # the agent's own git status is fooled
        _, reward, _, _, info = env.step("<done></done>")
        assert (reward, info["success"]) == (0.0, False), info["checker_output"]
    finally:
        env.close()
