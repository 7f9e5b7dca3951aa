"""The terminal env on the container backend, end to end: fixture and shipped tasks, forging moves, ``auto``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gem_core.errors import ConfigError
from gem_terminal.container.backend import ContainerConfig, load_container_task
from gem_terminal.env import TASKS_DIR, TerminalEnv, reference_action
from gem_terminal.loader import SkippedTask, TerminalTask

from .conftest import FIXTURES

FIXTURE_TASKS = ["apt-pip-heredoc", "compose-context", "pytest-python313"]
#: Shipped tasks that need nothing the base image lacks (no gcc, no process that must outlive the agent).
SHIPPED = ["text-sort-uniq", "git-resolve-conflict", "python-fix-off-by-one"]


def _bash(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


def _play(env: TerminalEnv, task: str, reply: str) -> tuple[float, dict[str, object]]:
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(reply + "<done></done>")
    assert terminated
    return reward, info


@pytest.fixture(scope="module")
def fixture_env(runtime: object, container_config: ContainerConfig) -> Iterator[TerminalEnv]:
    env = TerminalEnv(tasks_dir=str(FIXTURES), container=container_config.model_dump())
    yield env
    env.close()


def test_auto_runs_what_needs_an_image_in_a_container(fixture_env: TerminalEnv) -> None:
    # What the sandbox's loader refuses (apt/pip lines it cannot resolve here, another Python) runs in a
    # container; what it takes (it honours a compose build context) stays in the sandbox.
    from gem_terminal.loader import load_task as load_for_sandbox

    refused = {name for name in FIXTURE_TASKS if isinstance(load_for_sandbox(FIXTURES / name), SkippedTask)}
    assert "apt-pip-heredoc" in refused
    assert fixture_env.container_tasks == refused and not fixture_env.skipped
    assert {t.name for t in fixture_env.tasks} == set(FIXTURE_TASKS)


@pytest.mark.parametrize("task", FIXTURE_TASKS)
def test_fixture_task_reference_scores_1_and_no_op_0(fixture_env: TerminalEnv, task: str, no_leftovers: None) -> None:
    reward, info = _play(fixture_env, task, reference_action(load_task(task)))
    assert reward == 1.0, info["checker_output"]
    reward, info = _play(fixture_env, task, "")
    assert reward == 0.0 and info["success"] is False


def load_task(name: str) -> TerminalTask:
    task = load_container_task(FIXTURES / name)
    assert isinstance(task, TerminalTask)
    return task


FORGERIES = {
    # A process left running copies the expected output once the tests appear.
    "watcher": "nohup sh -c 'while :; do cp /tests/expected.txt /app/total.txt 2>/dev/null; sleep 0.02; done' "
    ">/dev/null 2>&1 &",
    # A python3 ahead of the real one on PATH that passes everything.
    "shadow-python3": "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3; chmod +x /usr/local/bin/python3",
    # A sitecustomize that makes every Python exit 0 at start.
    "sitecustomize": "echo 'import os; os._exit(0)' > /usr/lib/python3.13/sitecustomize.py",
    # The image's pytest made to pass everything.
    "pytest-main": "d=$(python3 -c 'import pytest,os;print(os.path.dirname(pytest.__file__))'); "
    "echo 'raise SystemExit(0)' > $d/__main__.py",
    # A pytest configuration at / (an ancestor of /tests) whose conftest reports every test passed.
    "root-conftest": "printf '[pytest]\\n' > /pytest.ini && printf '%s\\n' 'import pytest' "
    "'@pytest.hookimpl(hookwrapper=True)' 'def pytest_runtest_makereport(item, call):' "
    "'    outcome = yield' '    outcome.get_result().outcome = \"passed\"' > /conftest.py",
    # A usercustomize in the agent's (root's) home that makes every Python exit 0 at start.
    "home-usercustomize": "d=$(python3 -m site --user-site) && mkdir -p $d && "
    "echo 'import os; os._exit(0)' > $d/usercustomize.py",
}


@pytest.mark.parametrize("move", list(FORGERIES))
def test_forging_moves_score_0(fixture_env: TerminalEnv, move: str, no_leftovers: None) -> None:
    reward, info = _play(fixture_env, "pytest-python313", _bash(FORGERIES[move]))
    assert reward == 0.0, info["checker_output"]


def test_a_watcher_left_by_a_solved_episode_does_not_cost_the_reward(fixture_env: TerminalEnv) -> None:
    reply = reference_action(load_task("pytest-python313")) + _bash(FORGERIES["watcher"])
    assert _play(fixture_env, "pytest-python313", reply)[0] == 1.0


@pytest.fixture(scope="module")
def shipped_env(runtime: object, container_config: ContainerConfig) -> Iterator[TerminalEnv]:
    backend = runtime.kind  # type: ignore[attr-defined]
    env = TerminalEnv(backend=backend, container=container_config.model_dump())
    yield env
    env.close()


@pytest.mark.parametrize("task", SHIPPED)
def test_shipped_task_in_a_container(shipped_env: TerminalEnv, task: str) -> None:
    assert task in shipped_env.container_tasks
    shipped = next(t for t in shipped_env.tasks if t.name == task)
    reward, info = _play(shipped_env, task, reference_action(shipped))
    assert reward == 1.0, info["checker_output"]
    assert _play(shipped_env, task, "")[0] == 0.0


def test_sandbox_backend_skips_what_needs_an_image() -> None:
    with pytest.raises(ConfigError, match=r"apt-pip-heredoc.*skipped"):
        TerminalEnv(tasks_dir=str(FIXTURES), backend="sandbox", task="apt-pip-heredoc")


def test_shipped_tasks_stay_in_the_sandbox_under_auto() -> None:
    env = TerminalEnv()
    assert not env.container_tasks and len(env.tasks) == len([p for p in TASKS_DIR.iterdir() if p.is_dir()])


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"task.yaml": "instruction: x\n", "Dockerfile": "FROM x\n", "run-tests.sh": "true"}, "no reference solution"),
        ({"task.yaml": "instruction: x\n", "Dockerfile": "FROM x\n", "solution.sh": "true"}, "no checker"),
        ({"task.yaml": "instruction: x\n", "solution.sh": "true", "run-tests.sh": "true"}, "no Dockerfile"),
        ({"task.yaml": "[", "Dockerfile": "FROM x\n"}, "malformed"),
    ],
    ids=["no-solution", "no-checker", "no-dockerfile", "bad-yaml"],
)
def test_container_loader_names_what_is_missing(tmp_path: Path, files: dict[str, str], reason: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    item = load_container_task(tmp_path)
    assert isinstance(item, SkippedTask) and reason in item.reason


def test_bad_container_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="container"):
        TerminalEnv(container={"base_images": "sometimes"})
    with pytest.raises(ConfigError, match="backend"):
        TerminalEnv(backend="lxc")
