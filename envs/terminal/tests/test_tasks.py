"""Every shipped task: its reference solution scores 1 and a no-op scores 0, through the env's own parsing."""

from __future__ import annotations

import pytest

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
