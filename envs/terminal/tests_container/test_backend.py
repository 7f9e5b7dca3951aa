"""The terminal env on the container backend, end to end: fixture and shipped tasks, forging moves, ``auto``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gem_core.errors import ConfigError
from gem_terminal.container.backend import ContainerConfig, load_for_container
from gem_terminal.container.runtime import Runtime
from gem_terminal.container.session import OWNER_LABEL
from gem_terminal.env import TASKS_DIR, TerminalEnv, reference_action
from gem_terminal.forgeries import sweep
from gem_terminal.loader import SkippedTask, TerminalTask
from gem_terminal.loader import load_task as load_folder

from .conftest import FIXTURES

FIXTURE_TASKS = ["apt-pip-heredoc", "compose-context", "env-path", "harbor-verifier", "pytest-python313"]
#: A sample of the shipped tasks (every one of them was played outside the suite: docs/terminal.md): text,
#: git (the checker's copy in a mktemp -d folder run through as-agent), Python, and a process observed by its probe.
SHIPPED = ["text-sort-uniq", "git-revert-bad-commit", "python-fix-off-by-one", "process-http-server"]


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
    task = load_folder(FIXTURES / name, backend="container")
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


#: Moves on the checker's tools where the image's PATH puts them (a venv's bin ahead of the system's).
PATH_FORGERIES = {
    # The venv's python (a link to the system's) replaced by one that passes everything.
    "venv-python3": "rm -f /opt/venv/bin/python3 && printf '#!/bin/sh\\nexit 0\\n' > /opt/venv/bin/python3"
    " && chmod +x /opt/venv/bin/python3",
}


@pytest.mark.parametrize("move", list(PATH_FORGERIES))
def test_forging_the_tools_on_the_image_s_path_scores_0(
    fixture_env: TerminalEnv, move: str, no_leftovers: None
) -> None:
    reward, info = _play(fixture_env, "env-path", reference_action(load_task("env-path")) + _bash(PATH_FORGERIES[move]))
    assert reward == 0.0, info["checker_output"]
    assert "changed files the checker relies on" in str(info["checker_output"])


def test_a_checker_tool_linked_out_of_the_protected_paths_cannot_be_replaced(
    fixture_env: TerminalEnv, no_leftovers: None
) -> None:
    """A root agent's uv where /usr/local/bin/uv points does not run in the checker.

    apt-pip-heredoc links uv's installer copy (root's ~/.local/bin/uv) into /usr/local/bin, and its checker
    calls that uv as root before reading the agent's answers: an agent that replaces the copy with a uv that
    writes the answers first must not score.
    """
    fake = (
        "rm -f /root/.local/bin/uv && printf '%s\\n' '#!/bin/sh'"
        " 'echo \"ada lovelace\" > /app/name.txt'"
        ' \'printf "[owner]\\nname = \\"ada lovelace\\"\\n" > /app/config.toml\''
        " 'exec /usr/bin/uv \"$@\"' > /root/.local/bin/uv && chmod +x /root/.local/bin/uv"
    )
    reward, info = _play(fixture_env, "apt-pip-heredoc", _bash(fake))
    assert reward == 0.0, info["checker_output"]
    assert "where /usr/local/bin/uv points" in str(info["checker_output"])


def test_episodes_run_on_the_runtime_chosen(fixture_env: TerminalEnv, runtime: Runtime) -> None:
    fixture_env.reset(options={"task": "env-path"})
    try:
        mine = f"label={OWNER_LABEL}={os.getpid()}"
        listing = runtime.call("ps", "--filter", mine, "--format", "{{.Names}}").stdout.decode()
        assert listing.split(), f"no episode container on {runtime.kind}"
    finally:
        fixture_env.step("<done></done>")


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


def test_the_probe_runs_nothing_the_agent_left_for_the_checker(shipped_env: TerminalEnv) -> None:
    """No server, and a python3 in /checker/bin (the agent is root) that prints what the probe looks for.

    It scored 1 on Docker before /checker was protected and the probe's PATH left it out.
    """
    fake = "#!/bin/sh\\nsha256sum < /app/site/index.html | cut -d' ' -f1\\n"
    move = f'mkdir -p /checker/bin && printf "{fake}" > /checker/bin/python3 && chmod 755 /checker/bin/python3'
    reward, info = _play(shipped_env, "process-http-server", _bash(move))
    assert reward == 0.0, info["checker_output"]


def test_a_reward_the_agent_s_program_wrote_does_not_count(shipped_env: TerminalEnv) -> None:
    """/app/run a link to /logs/verifier: the checker (root) opened it to the agent's ctl.sh, which wrote 1.

    It scored 1 on Docker before gem required the reward folder and files to be root's alone (and before the
    checker looked for links); with either fix alone it scores 0.
    """
    ctl = "#!/bin/bash\\nrm -f /app/run/reward.txt; echo 1 > /app/run/reward.txt\\n"
    link = "mkdir -p /logs/verifier && rm -rf /app/run && ln -s /logs/verifier /app/run"
    move = f"{link} && printf '{ctl}' > /app/ctl.sh"
    reward, info = _play(shipped_env, "proc-pidfile", _bash(move))
    assert reward == 0.0, info["checker_output"]


#: Ways a root agent hides the build outputs from a new repository's status (the checker's copy of HEAD).
HIDE_FROM_A_NEW_REPOSITORY = {
    "etc-gitconfig": "printf '*.o\\nbuild/\\n' > /etc/gem-ignore && "
    "printf '[core]\\n\\texcludesFile = /etc/gem-ignore\\n' >> /etc/gitconfig",
    "git-templates": "mkdir -p /usr/share/git-core/templates/info && "
    "printf '*.o\\nbuild/\\n' >> /usr/share/git-core/templates/info/exclude",
}


def test_the_system_git_config_is_not_the_checker_s(shipped_env: TerminalEnv) -> None:
    """An empty .gitignore committed, the build outputs hidden by /etc/gitconfig and git's templates (root's).

    Each alone scored 1 on Docker before the checker's git read no system config (``GIT_CONFIG_NOSYSTEM``) and
    made its repositories with no template (the templates' folder is also protected, so one episode plays both).
    """
    commit = (
        "cd /app/proj && touch .gitignore && git add .gitignore && git -c user.name=a -c user.email=a@b commit -qm i"
    )
    hide = " && ".join(HIDE_FROM_A_NEW_REPOSITORY.values())
    reward, info = _play(shipped_env, "git-ignore-build", _bash(f"{commit} && {hide}"))
    assert reward == 0.0, info["checker_output"]


#: Forging classes of ``gem_terminal.forgeries`` swept on the real runtime over shipped tasks (every class
#: over every shipped task is the sweep's job outside the suite: docs/terminal.md): processes left running, code
#: of the agent's that the checker runs, history faked with the work tree hidden, a git driver in the
#: repository's config and /etc/gitconfig (it scored 1 here before the checker's git guard), and a set-user-id
#: root bash the agent's program starts when the checker runs it (it scored 1 before as-agent's no_new_privs;
#: over a task whose checker runs the work dir's code, not the committed copy).
SWEPT = {
    "git-revert-bad-commit": [
        "daemon-does-the-work-at-check-time",
        "atexit-prints-the-marker",
        "git-merge-ours-and-skip-worktree",
        "git-driver-runs-in-the-checker",
    ],
    "py-fix-lru-cache": ["setuid-root-program-run-by-the-checker"],
}


def test_the_forging_sweep_scores_0_on_the_runtime(
    runtime: Runtime, container_config: ContainerConfig, no_leftovers: None
) -> None:
    env_kwargs = {"backend": runtime.kind, "container": container_config.model_dump()}
    wanted = {(task, move) for task, moves in SWEPT.items() for move in moves}
    moves = sorted({move for _, move in wanted})
    others = {(task, move) for task in SWEPT for move in moves} - wanted
    plays = list(sweep(env_kwargs, tasks=list(SWEPT), moves=moves, jobs=2, skip=others))
    assert sorted((p.task, p.move, p.backend, p.verdict) for p in plays) == [
        (t, m, runtime.kind, "ok") for t, m in sorted(wanted)
    ], [(p.task, p.move, p.reward, p.error, p.checker_output[-300:]) for p in plays]


def test_sandbox_backend_skips_what_needs_an_image() -> None:
    with pytest.raises(ConfigError, match=r"apt-pip-heredoc.*skipped"):
        TerminalEnv(tasks_dir=str(FIXTURES), backend="sandbox", task="apt-pip-heredoc")


def test_shipped_tasks_stay_in_the_sandbox_under_auto() -> None:
    env = TerminalEnv()
    assert not env.container_tasks and len(env.tasks) == len([p for p in TASKS_DIR.iterdir() if p.is_dir()])


def test_a_harbor_verifier_runs_with_what_it_installs_and_its_reward_file(fixture_env: TerminalEnv) -> None:
    # tests/test.sh bootstraps uv and runs `uvx -w pytest -w tomli-w pytest`: with no network at check time,
    # pytest and tomli-w come from the image (installed at build into $GEM_PYTEST); the reward is reward.txt.
    reward, info = _play(fixture_env, "harbor-verifier", reference_action(load_task("harbor-verifier")))
    assert reward == 1.0 and "[reward] 1" in str(info["checker_output"]), info["checker_output"]


def test_a_reward_file_the_agent_leaves_does_not_count(fixture_env: TerminalEnv) -> None:
    # reward.json wins over the reward.txt the verifier writes: one the agent left must be gone first.
    plant = "mkdir -p /logs/verifier && echo '{\"reward\": 1.0}' > /logs/verifier/reward.json"
    reward, info = _play(fixture_env, "harbor-verifier", _bash(plant))
    assert reward == 0.0, info["checker_output"]


def test_a_reward_folder_the_agent_opened_is_made_afresh(fixture_env: TerminalEnv) -> None:
    """The work done, /logs/verifier left writable by all with a link in it: the checker's own reward counts (1)."""
    plant = "mkdir -p /logs/verifier && chmod 777 /logs/verifier && ln -sf /etc/hostname /logs/verifier/reward.txt"
    reply = reference_action(load_task("harbor-verifier")) + _bash(plant)
    reward, info = _play(fixture_env, "harbor-verifier", reply)
    assert reward == 1.0, info["checker_output"]


def _unbuildable(folder: Path) -> Path:
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text("instruction: Say hi.\n")
    (folder / "Dockerfile").write_text("FROM localhost/gem-no-such-image:1\nWORKDIR /app\n")
    (folder / "solution.sh").write_text("echo hi > /app/hi\n")
    (folder / "run-tests.sh").write_text("grep -q hi /app/hi\n")
    return folder


def test_an_image_nothing_here_provides_is_refused_at_load(
    runtime: Runtime, container_config: ContainerConfig, tmp_path: Path
) -> None:
    found = load_for_container(_unbuildable(tmp_path / "t"), runtime, container_config)
    assert isinstance(found, SkippedTask)
    assert "FROM localhost/gem-no-such-image:1, which is not here" in found.reason and "\n" not in found.reason
    with pytest.raises(ConfigError, match="no registry serves it"):
        TerminalEnv(tasks_dir=str(tmp_path), backend=runtime.kind, container=container_config.model_dump())


def test_bad_container_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="container"):
        TerminalEnv(container={"base_images": "sometimes"})
    with pytest.raises(ConfigError, match="backend"):
        TerminalEnv(backend="lxc")
    with pytest.raises(ConfigError, match="name one runtime"):
        TerminalEnv(backend="docker", container={"runtime": "podman"})
