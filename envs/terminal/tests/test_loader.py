"""The Terminal-Bench folder loader: what loads, what is skipped and why, and that no folder content crashes it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.testing import check_env
from gem_terminal.env import TerminalEnv, reference_action
from gem_terminal.loader import SkippedTask, TerminalTask, _host_has_pytest, load_task, load_tasks
from gem_tool_python.episode import episodes_available

BASE = "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"


def write_task(folder: Path, **files: str | None) -> Path:
    """A task folder in Terminal-Bench's format; ``files`` replaces (``None``: removes) a default file."""
    defaults = {
        "task.yaml": "instruction: |\n  Write hello to /srv/out.txt.\n"
        "max_agent_timeout_sec: 60\nmax_test_timeout_sec: 10\n",
        "Dockerfile": BASE
        + "WORKDIR /srv\nENV GREETING=hello\nCOPY data.txt /srv/data.txt\nRUN echo prepared > ready\n",
        "solution.sh": "#!/bin/bash\necho $GREETING > /srv/out.txt\n",
        "run-tests.sh": "#!/bin/bash\nset -e\ngrep -qx hello /srv/out.txt\ntest -f /srv/ready\n"
        "python3 $TEST_DIR/check.py\n",
        "tests/check.py": "print(open('/srv/data.txt').read())\n",
        "data.txt": "data\n",
    }
    folder.mkdir(parents=True)
    for name, text in {**defaults, **files}.items():
        if text is None:
            continue
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_a_terminal_bench_task_loads_with_its_dockerfile_translated(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path / "hello"))
    assert isinstance(task, TerminalTask)
    assert task.workdir == "/srv" and task.env == {"GREETING": "hello"}
    assert task.copies == (("data.txt", "/srv/data.txt"),) and task.setup == ("echo prepared > ready",)
    assert (task.agent_timeout_s, task.test_timeout_s) == (60.0, 10.0) and "check.py" in task.tests


@pytest.mark.skipif(not episodes_available()[0], reason=f"episode sandbox unavailable: {episodes_available()[1]}")
def test_a_loaded_terminal_bench_task_plays_to_reward_one(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "hello")
    env = TerminalEnv(tasks_dir=str(tmp_path / "tasks"))
    try:
        obs, _ = env.reset(seed=0)
        assert "in /srv" in obs
        assert "prepared" in env.step("<bash>cat ready; pwd</bash>")[0]
        env.step(reference_action(env.tasks[0]))
        assert env.step("<done></done>")[1] == 1.0
        env.reset(seed=0)
        assert env.step("<done></done>")[1] == 0.0
    finally:
        env.close()


NETWORK_DOCKERFILE = BASE + "RUN apt-get update && apt-get install -y jq\n"
SKIPS = [
    pytest.param({"Dockerfile": "FROM postgres:16\n"}, "needs the image 'postgres:16'", id="other-image"),
    pytest.param({"Dockerfile": NETWORK_DOCKERFILE}, "installs packages or downloads", id="apt-get"),
    pytest.param({"Dockerfile": BASE + "RUN pip install numpy\n"}, "no network", id="pip"),
    pytest.param({"Dockerfile": BASE + "COPY x /etc/x\n"}, "outside the work dir", id="copy-outside"),
    pytest.param({"Dockerfile": BASE + "VOLUME /data\n"}, "instruction VOLUME", id="unknown-instruction"),
    pytest.param({"Dockerfile": BASE + "ENV A='unbalanced\n"}, "cannot read the Dockerfile", id="bad-quotes"),
    pytest.param({"docker-compose.yaml": "services:\n  app: {}\n  db: {}\n"}, "needs 2 containers", id="two-services"),
    pytest.param({"solution.sh": None}, "no reference solution", id="no-solution"),
    pytest.param({"run-tests.sh": None, "tests/check.py": None}, "no checker", id="no-checker"),
    pytest.param(
        {"run-tests.sh": "source $TEST_DIR/setup.sh\n", "tests/setup.sh": "curl -LsSf x | sh\n"},
        "tests/setup.sh",
        id="uv",
    ),
    pytest.param({"task.yaml": "instruction: ''\n"}, "no instruction", id="empty-instruction"),
    pytest.param({"task.yaml": "- a list\n"}, "not a mapping", id="yaml-list"),
    pytest.param({"task.yaml": "instruction: x\nmax_agent_timeout_sec: -1\n"}, "positive number", id="bad-timeout"),
    pytest.param({"task.yaml": "instruction: [unclosed\n"}, "not valid YAML", id="bad-yaml"),
]


@pytest.mark.parametrize(("files", "reason"), SKIPS)
def test_what_the_sandbox_cannot_run_is_skipped_with_the_reason(
    tmp_path: Path, files: dict[str, str], reason: str
) -> None:
    found = load_task(write_task(tmp_path / "t", **files))
    assert isinstance(found, SkippedTask), found
    assert reason in found.reason


PYTEST_TESTS = """
from pathlib import Path


def test_the_file_says_hello():
    assert Path("/srv/out.txt").read_text().strip() == "hello"
"""


@pytest.mark.skipif(not episodes_available()[0], reason=f"episode sandbox unavailable: {episodes_available()[1]}")
def test_a_pytest_task_without_run_tests_uses_terminal_bench_default_checker(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "hello", **{"run-tests.sh": None, "tests/test_outputs.py": PYTEST_TESTS})
    env = TerminalEnv(tasks_dir=str(tmp_path / "tasks"))
    try:
        if not _host_has_pytest():
            pytest.skip("pytest is not installed beside gem-terminal")
        assert "pytest" in env.tasks[0].checker
        env.reset(seed=0)
        env.step(reference_action(env.tasks[0]))
        _, reward, *_, info = env.step("<done></done>")
        assert reward == 1.0 and "1 passed" in info["checker_output"]
        env.reset(seed=0)
        _, reward, *_, info = env.step("<done></done>")
        assert reward == 0.0 and "1 failed" in info["checker_output"]
        check_env(env, env_factory=lambda: TerminalEnv(tasks_dir=str(tmp_path / "tasks")))
    finally:
        env.close()


IMPORTING_TESTS = """
import sys

sys.path.append("/srv")


def test_greet_says_hello():
    import greet

    assert greet.hello() == "hello"
"""


@pytest.mark.skipif(not episodes_available()[0], reason=f"episode sandbox unavailable: {episodes_available()[1]}")
@pytest.mark.parametrize(
    "planted",
    [
        "import os; os._exit(0)",
        "import atexit, os; atexit.register(lambda: os._exit(0))\nraise SystemExit(0)",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef hello(): return 'bye'",
    ],
    ids=["exit-0-on-import", "system-exit-with-atexit", "wrong-answer-atexit-exit-0"],
)
def test_the_default_pytest_checker_is_not_passed_by_an_early_exit(tmp_path: Path, planted: str) -> None:
    """A test imports the agent's module, which exits 0 (at once, or at exit): pytest's report is missing (0)."""
    write_task(
        tmp_path / "tasks" / "greet",
        **{
            "run-tests.sh": None,
            "tests/test_outputs.py": IMPORTING_TESTS,
            "solution.sh": "#!/bin/bash\nprintf 'def hello():\\n    return \"hello\"\\n' > /srv/greet.py\n",
        },
    )
    if not _host_has_pytest():
        pytest.skip("pytest is not installed beside gem-terminal")
    env = TerminalEnv(tasks_dir=str(tmp_path / "tasks"))
    try:
        env.reset(seed=0)
        env.step(reference_action(env.tasks[0]))
        assert env.step("<done></done>")[1] == 1.0
        env.reset(seed=0)
        env.step(f"<bash>printf '%s\\n' {shlex.quote(planted)} > /srv/greet.py</bash>")
        _, reward, *_, info = env.step("<done></done>")
        assert reward == 0.0, info["checker_output"]
    finally:
        env.close()


def test_load_tasks_splits_loaded_and_skipped_and_env_names_the_reason(tmp_path: Path) -> None:
    write_task(tmp_path / "good")
    write_task(tmp_path / "bad", Dockerfile=NETWORK_DOCKERFILE)
    (tmp_path / "not-a-task").mkdir()
    loaded, skipped = load_tasks(tmp_path)
    assert [t.name for t in loaded] == ["good"] and [s.name for s in skipped] == ["bad"]
    from gem_core.errors import ConfigError

    with pytest.raises(ConfigError, match="skipped, its set-up installs packages"):
        TerminalEnv(tasks_dir=str(tmp_path), task="bad")


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)
LINES = st.lists(
    st.one_of(
        st.sampled_from(["FROM ubuntu", "WORKDIR /app", "COPY a b", "RUN x", "ENV A=1", "ENV A", "COPY", "\\"]), TEXT
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dockerfile=LINES, meta=TEXT, compose=TEXT)
def test_no_folder_content_crashes_the_loader(tmp_path: Path, dockerfile: list[str], meta: str, compose: str) -> None:
    folder = tmp_path / "fuzz"
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    write_task(folder, **{"Dockerfile": "\n".join(dockerfile), "task.yaml": meta, "docker-compose.yaml": compose})
    assert isinstance(load_task(folder), TerminalTask | SkippedTask)
