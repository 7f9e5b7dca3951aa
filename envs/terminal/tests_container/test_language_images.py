"""The Go and Rust stand-ins built from Debian and played end to end with fixture tasks of ours.

Opt in with ``GEM_TEST_LANGUAGE_IMAGES=1``: each stand-in is a root file system of its own (mmdebstrap,
0.9 to 1 GB, 1.5 to 2 min on the first run), more than CI's budget has room for. What CI runs of them is the
image map and the Dockerfile rewrite (``test_images.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gem_terminal.container.backend import ContainerConfig
from gem_terminal.env import TerminalEnv, reference_action
from gem_terminal.loader import TerminalTask, load_task

from .conftest import FIXTURES

LANGUAGE_TASKS = FIXTURES.parent / "container_lang_tasks"

pytestmark = pytest.mark.skipif(
    os.environ.get("GEM_TEST_LANGUAGE_IMAGES") != "1", reason="opt in: GEM_TEST_LANGUAGE_IMAGES=1 builds them"
)


@pytest.fixture(scope="module")
def language_env(runtime: object, container_config: ContainerConfig) -> Iterator[TerminalEnv]:
    env = TerminalEnv(tasks_dir=str(LANGUAGE_TASKS), container=container_config.model_dump())
    yield env
    env.close()


def _play(env: TerminalEnv, task: str, reply: str) -> tuple[float, dict[str, object]]:
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(reply + "<done></done>")
    assert terminated
    return reward, info


@pytest.mark.parametrize("task", ["go-word-count", "rust-leap-year"])
def test_a_language_stand_in_runs_its_task_reference_1_no_op_0(
    language_env: TerminalEnv, task: str, no_leftovers: None
) -> None:
    # The build runs go/cargo; the checker relies on the official image's ENV (GOPATH, CARGO_HOME's bin on PATH).
    # go-word-count's reference rebuilds /usr/local/bin/wordcount, which its image installed: that change is
    # the agent's work (session.solution_programs), not a changed checker tool.
    loaded = load_task(LANGUAGE_TASKS / task, backend="container")
    assert isinstance(loaded, TerminalTask)
    reward, info = _play(language_env, task, reference_action(loaded))
    assert reward == 1.0, info["checker_output"]
    reward, info = _play(language_env, task, "")
    assert reward == 0.0 and info["success"] is False
