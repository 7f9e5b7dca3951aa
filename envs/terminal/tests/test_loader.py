"""The task loader: both formats (Terminal-Bench v1, Harbor), what loads, what is refused and why, and playing them."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError, ToolError
from gem_core.testing import check_env
from gem_terminal.env import TerminalEnv, reference_action
from gem_terminal.loader import SkippedTask, TerminalTask, _host_has_pytest, load_task, load_tasks, read_reward
from gem_terminal.provision import CHECKED_PYTEST, PYTEST_COMMAND
from gem_tool_python.episode import episodes_available

FIXTURES = Path(__file__).parent / "fixtures"
BASE = "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\n"
needs_episodes = pytest.mark.skipif(
    not episodes_available()[0], reason=f"episode sandbox unavailable: {episodes_available()[1]}"
)


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


HARBOR_TOML = '[verifier]\ntimeout_sec = 20.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nmemory = "1G"\n'
HARBOR_TEST = (
    "#!/bin/bash\nmkdir -p /logs/verifier\ngrep -qx hello /app/out.txt && echo 1 > /logs/verifier/reward.txt\n"
)


def write_harbor(folder: Path, **files: str | None) -> Path:
    """A task folder in Harbor's format; ``files`` replaces (``None``: removes) a default file."""
    defaults = {
        "task.toml": HARBOR_TOML,
        "instruction.md": "Write hello to /app/out.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
        "tests/test.sh": HARBOR_TEST,
    }
    folder.mkdir(parents=True)
    for name, text in {**defaults, **files}.items():
        if text is None:
            continue
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


# --- The fixture tasks: every feature, both formats -----------------------------------------------------------


def test_the_dockerfile_fixture_is_read_line_by_line() -> None:
    task = load_task(FIXTURES / "tb-dockerfile")
    assert isinstance(task, TerminalTask), task
    assert task.format == "terminal-bench" and task.reward == "exit-code"
    # FROM --platform: the flag apart from the image; the ARG before FROM substituted into it.
    assert task.base_image == "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"
    assert task.platform == "linux/amd64" and task.python_version == ""
    assert task.workdir == "/app" and task.dockerfile == FIXTURES / "tb-dockerfile" / "Dockerfile"
    assert task.env == {"LANG": "C.UTF-8", "TASK_MODE": "fast mode", "LEGACY_FORM": "some value"}
    # COPY --chown --chmod src/ ./src/: relative to the WORKDIR of that line.
    assert task.copies == ((str((FIXTURES / "tb-dockerfile" / "src").resolve()), "/app/src"),)
    # apt-get of what the host has resolved away; the RUN after the relative WORKDIR runs in /app/src.
    assert not any("apt-get" in step for step in task.setup)
    assert "cd /app/src" in task.setup[0] and "export GREETING=hello" in task.setup[0]
    assert "/app/config.ini" in task.setup[1]  # COPY <<EOT
    assert "greeting.txt" in task.setup[2] and "cd /app/src" in task.setup[2]  # RUN <<EOF
    assert "exec-form" in task.setup[3] and "cd /app" in task.setup[3]  # exec form, back in /app
    assert task.setup_root == (False, False, False, False)
    # The standard run-tests.sh: uv and pytest's install gone, pytest from $GEM_PYTEST on the same file.
    assert "curl" not in task.checker and "uv pip" not in task.checker
    assert task.checker.startswith("#!/bin/bash\n" + CHECKED_PYTEST)
    assert f"\n{PYTEST_COMMAND} $TEST_DIR/test_outputs.py -rA\n" in task.checker
    assert task.checker_path == FIXTURES / "tb-dockerfile" / "run-tests.sh"
    assert (task.agent_timeout_s, task.test_timeout_s, task.tags) == (120.0, 60.0, ("dockerfile",))
    assert task.metadata["author_name"] == "gem"


def test_the_compose_fixture_builds_from_its_context_with_its_args() -> None:
    task = load_task(FIXTURES / "tb-compose-context")
    assert isinstance(task, TerminalTask), task
    context = (FIXTURES / "tb-compose-context" / "client").resolve()
    assert task.build_context == context and task.dockerfile == context / "Dockerfile.client"
    assert task.compose_build == {
        "context": "client",
        "dockerfile": "Dockerfile.client",
        "args": {"FILES_DIR": "files"},
    }
    assert task.copies == ((str(context / "files"), "/srv/files"),)  # ARG from compose, source from the context
    assert task.env == {"COUNT_UNIT": "lines"}  # compose environment, the harness's TEST_DIR left out
    assert "wc -l" in task.solution and "COUNT_UNIT" in task.solution  # solution.yaml


def test_harbor_fields_map_as_harbor_reads_them() -> None:
    task = load_task(FIXTURES / "harbor-reward-txt")
    assert isinstance(task, TerminalTask), task
    assert task.format == "harbor" and task.reward == "reward-file"
    assert (task.agent_timeout_s, task.test_timeout_s, task.build_timeout_s) == (120.0, 60.0, 300.0)
    assert (task.cpus, task.memory_mb, task.storage_mb, task.network) == (1.0, 2048, 4096, "no-network")
    assert task.metadata["version"] == "1.0" and task.difficulty == "easy" and task.tags == ("harbor", "python")
    assert task.python_version == "3.11" and task.base_image == "python:3.11-slim"
    assert task.solution_files == {"total.py": (FIXTURES / "harbor-reward-txt/solution/total.py").read_bytes()}
    assert "/tmp/gem-solution/total.py" in task.solution and "/solution/" not in task.solution.split("\n", 1)[1]
    # uvx -w pytest -w pytest-json-ctrf pytest --ctrf FILE: gem's pytest, the report option left out.
    assert "uvx" not in task.checker and "--ctrf" not in task.checker and "/tests/test_report.py -rA" in task.checker
    json_task = load_task(FIXTURES / "harbor-reward-json")
    assert isinstance(json_task, TerminalTask), json_task
    assert json_task.workdir == "/work" and json_task.compose_build == {"context": "."}
    assert json_task.agent_timeout_s == 60.0 and json_task.memory_mb == 1024 and json_task.network == "public"


def play(folder: Path, *replies: str) -> tuple[float, dict]:
    env = TerminalEnv(tasks_dir=str(folder))
    try:
        env.reset(seed=0)
        for reply in replies:
            env.step(reply)
        _, reward, *_, info = env.step("<done></done>")
        return reward, info
    finally:
        env.close()


@pytest.mark.parametrize(
    "solve",
    ["echo a\nGEM_SOLVE_SH\necho b\n", "GEM_SOLVE_SH\r\nGEM_SOLVE_SH_\r\n", "cat <<'EOF'\nx\nEOF\n"],
    ids=["delimiter-line", "crlf-and-two-delimiter-lines", "its-own-heredoc"],
)
def test_a_harbor_solution_is_written_whole_to_a_file_and_run_from_there(tmp_path: Path, solve: str) -> None:
    # Harbor runs `bash /solution/solve.sh`: the reference run writes solve.sh beside its files and runs it.
    task = load_task(write_harbor(tmp_path / "t", **{"solution/solve.sh": solve}))
    assert isinstance(task, TerminalTask), task
    first, rest = task.solution.split("\n", 1)
    delimiter = first.rsplit("<<", 1)[1].strip("'")
    text = solve.replace("\r\n", "\n")  # read as text: CR LF line ends become LF
    assert delimiter not in text.splitlines()
    assert rest == f"{text.rstrip(chr(10))}\n{delimiter}\nbash /tmp/gem-solution/solve.sh"


FIXTURE_NAMES = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())


@needs_episodes
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_each_fixture_task_scores_one_with_its_reference_and_zero_with_a_no_op(name: str) -> None:
    task = load_task(FIXTURES / name)
    assert isinstance(task, TerminalTask), task
    reward, info = play(FIXTURES / name, reference_action(task))
    assert reward == 1.0, info["checker_output"]
    reward, info = play(FIXTURES / name)
    assert reward == 0.0, info["checker_output"]


@needs_episodes
def test_a_harbor_reward_json_counts_its_reward_entry() -> None:
    commit = "git -c user.name=a -c user.email=a@b commit -qm x"
    half = f"<bash>cd /work/repo && touch NOTES.md && git add NOTES.md && {commit}</bash>"
    reward, info = play(FIXTURES / "harbor-reward-json", half)
    assert reward == 0.5 and "[reward] 0.5" in info["checker_output"]


@needs_episodes
def test_the_agent_cannot_leave_a_reward_file_for_the_verifier(tmp_path: Path) -> None:
    # The verifier exits before writing a reward: only what the agent left there could count.
    write_harbor(tmp_path / "t", **{"tests/test.sh": "#!/bin/bash\nexit 0\n"})
    forge = (
        "<bash>mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > "
        "/logs/verifier/reward.json; echo 1 > /tmp/reward.txt; ln -s /tmp/reward.txt /logs/verifier/reward.txt</bash>"
    )
    reward, info = play(tmp_path / "t", forge)
    assert reward == 0.0 and "wrote no reward file" in info["checker_output"]


@pytest.mark.parametrize(
    ("json_text", "text", "expected"),
    [
        pytest.param("", "1\n", (1.0, ""), id="txt"),
        pytest.param('{"reward": 0.25, "other": 1}', "1", (0.25, ""), id="json-wins"),
        pytest.param('{"a": 1, "b": 0}', "", (0.5, ""), id="json-mean"),
        pytest.param("0.75", "", (0.75, ""), id="json-number"),
        pytest.param("", "", (0.0, "the verifier wrote no reward file"), id="none"),
        pytest.param("", "yes", (0.0, "reward.txt is not a number ('yes')"), id="txt-word"),
        pytest.param("", "nan", (0.0, "the reward is not finite"), id="nan"),
        pytest.param('{"reward": true}', "", (0.0, "reward.json holds no number"), id="json-bool"),
        pytest.param("{", "1", (0.0, "reward.json is not JSON"), id="json-broken"),
    ],
)
def test_read_reward_follows_harbors_verifier_contract(json_text: str, text: str, expected: tuple) -> None:
    assert read_reward(json_text, text) == expected


# --- Refusals: one line naming the reason ----------------------------------------------------------------------

MISSING_APT = BASE + "RUN apt-get update && apt-get install -y gem-no-such-package && rm -rf /var/lib/apt/lists/*\n"
#: A test that submits the agent's code to a judge over HTTP (Terminal-Bench adapters of online judges do).
JUDGE = (
    "import os, requests\nBASE = os.environ.get('BASE_URL', '{url}')\n\n"
    "def test_judged():\n    assert requests.post(BASE + '/submit', timeout=5).ok\n"
)


def test_a_test_that_talks_to_loopback_or_names_a_url_as_text_loads(tmp_path: Path) -> None:
    local = load_task(
        write_task(tmp_path / "a", **{"tests/test_outputs.py": JUDGE.format(url="http://127.0.0.1:8081")})
    )
    text = "def test_doc():\n    assert 'https://example.com' in open('/srv/out.txt').read()\n"
    named = load_task(write_task(tmp_path / "b", **{"tests/test_outputs.py": text}), backend="container")
    assert isinstance(named, TerminalTask), named
    assert isinstance(local, TerminalTask) or "reaches" not in local.reason, local


#: A test of a server the agent was to leave running (what a public Harbor task checks).
SERVER_TEST = (
    "import json, urllib.request\n\ndef test_health():\n"
    "    with urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=5) as r:\n"
    "        assert json.loads(r.read())['status'] == 'ok'\n"
)
SOCKET_TEST = "import socket\n\ndef test_port():\n    socket.create_connection(('localhost', 6379), timeout=5)\n"


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"tests/serve.py": "import subprocess\nsubprocess.Popen(['python3', '/srv/app.py'])\n"}, id="py"),
        pytest.param({"run-tests.sh": "python3 /srv/app.py &\nsleep 1\npytest $TEST_DIR/test_outputs.py\n"}, id="sh"),
        pytest.param({"tests/gem-probe.sh": "curl -s http://127.0.0.1:8080/health\n"}, id="probe"),
    ],
)
def test_a_server_test_loads_when_the_checker_starts_the_server_or_a_probe_observes_it(
    tmp_path: Path, files: dict[str, str]
) -> None:
    task = load_task(write_task(tmp_path / "t", **{"tests/test_outputs.py": SERVER_TEST, **files}))
    assert isinstance(task, TerminalTask), task


TB_REFUSALS = [
    pytest.param(
        {"run-tests.sh": None, "tests/test_outputs.py": SERVER_TEST},
        "tests/test_outputs.py queries http://127.0.0.1:8080, a server the agent must leave running",
        id="server-left-running",
    ),
    pytest.param(
        {"run-tests.sh": None, "tests/test_outputs.py": SOCKET_TEST},
        "tests/test_outputs.py queries 'localhost', 6379, a server the agent must leave running",
        id="socket-left-running",
    ),
    pytest.param({"Dockerfile": "FROM postgres:16\n"}, "needs the image 'postgres:16'", id="other-image"),
    pytest.param({"Dockerfile": MISSING_APT}, "Debian package 'gem-no-such-package', which this host lacks", id="apt"),
    pytest.param({"Dockerfile": BASE + "RUN pip install gem-no-such-dist\n"}, "'gem-no-such-dist'", id="pip"),
    pytest.param({"Dockerfile": BASE + "COPY data.txt /etc/x\n"}, "outside the work dir", id="copy-outside"),
    pytest.param(
        {"Dockerfile": "FROM debian AS build\n" + BASE + "COPY --from=build /x /srv/x\n"}, "multi-stage", id="stages"
    ),
    pytest.param({"Dockerfile": BASE + "ENV A='unbalanced\n"}, "cannot read the Dockerfile", id="bad-quotes"),
    pytest.param({"Dockerfile": "RUN true\n"}, "RUN before the first FROM", id="no-from"),
    pytest.param({"Dockerfile": BASE + "RUN <<EOF\ntrue\n"}, "never ends", id="open-heredoc"),
    pytest.param({"Dockerfile": BASE + "COPY missing.txt /srv/\n"}, "'missing.txt' is not in the build", id="no-src"),
    pytest.param(
        {"Dockerfile": BASE + "RUN curl -fsSL https://example.com/tool.tgz | tar xz\n"},
        "its image build downloads ('curl -fsSL https://example.com/tool.tgz | tar xz')",
        id="build-download",
    ),
    pytest.param({"Dockerfile": BASE + "ADD https://example.com/x.tgz /srv/\n"}, "ADD of a URL", id="add-url"),
    pytest.param(
        {"Dockerfile": "FROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"},
        "its image provides Python 3.13; the sandbox has /usr/bin/python3",
        id="python-3-13",
    ),
    pytest.param(
        {"Dockerfile": BASE + "RUN mkdir -p /opt/tool && echo hi > /usr/local/bin/tool\n"},
        "its set-up needs root",
        id="root",
    ),
    pytest.param({"docker-compose.yaml": "services:\n  app: {}\n  db: {}\n"}, "needs 2 containers", id="two-services"),
    pytest.param(
        {
            "docker-compose.yaml": "services:\n  client:\n    build: .\n    deploy:\n      resources:\n"
            "        reservations:\n          devices:\n            - capabilities: [gpu]\n"
        },
        "needs a GPU",
        id="compose-gpu",
    ),
    pytest.param({"docker-compose.yaml": "services:\n  client:\n    build: nowhere\n"}, "not a folder", id="ctx"),
    pytest.param({"solution.sh": None}, "no reference solution", id="no-solution"),
    pytest.param(
        {"solution.sh": "#!/bin/bash\n# This is a template solution script.\n\n# UNKNOWN\n"},
        "its reference solution runs no command",
        id="template-solution",
    ),
    pytest.param(
        {"solution.sh": "git clone https://github.com/example/x\n"},
        "its reference solution downloads at run time",
        id="solution-network",
    ),
    pytest.param({"run-tests.sh": None, "tests/check.py": None}, "no checker", id="no-checker"),
    pytest.param(
        # another harness's layout under the same file name (mini-harness-bench: set-up script, reference/)
        {
            "Dockerfile": None,
            "solution.sh": None,
            "run-tests.sh": None,
            "setup.sh": "true\n",
            "reference/a.sh": "true\n",
        },
        "not a Terminal-Bench v1 task folder",
        id="other-harness",
    ),
    pytest.param(
        {"run-tests.sh": "curl -s https://example.com/expected -o /tmp/e\ncmp /tmp/e /srv/out.txt\n"},
        "its checker downloads at run time ('curl -s https://example.com/expected -o /tmp/e')",
        id="checker-network",
    ),
    pytest.param(
        {"run-tests.sh": "source $TEST_DIR/setup.sh\n", "tests/setup.sh": "curl -LsSf x | sh\n"},
        "tests/setup.sh downloads",
        id="tests-script-network",
    ),
    pytest.param(
        {"run-tests.sh": None, "tests/test_outputs.py": "import gem_no_such_module\n"},
        "its tests import gem_no_such_module",
        id="test-imports",
    ),
    pytest.param(
        {"run-tests.sh": "uv run pytest $TEST_DIR/test_outputs.py -rA\n"},
        "its checker runs tests/test_outputs.py, which the task does not have",
        id="tests-missing",
    ),
    pytest.param({"task.yaml": "instruction: ''\n"}, "no instruction", id="empty-instruction"),
    pytest.param({"task.yaml": "- a list\n"}, "not a mapping", id="yaml-list"),
    pytest.param({"task.yaml": "instruction: x\nmax_agent_timeout_sec: -1\n"}, "positive number", id="bad-timeout"),
    pytest.param({"task.yaml": "instruction: [unclosed\n"}, "not valid YAML", id="bad-yaml"),
    pytest.param(
        {"tests/test_outputs.py": JUDGE.format(url="http://203.0.113.5:8081")},
        "tests/test_outputs.py reaches http://203.0.113.5:8081 at check time; no network here",
        id="remote-judge",
    ),
]


@pytest.mark.parametrize(("files", "reason"), TB_REFUSALS)
def test_a_terminal_bench_task_that_cannot_run_is_refused_with_one_line(
    tmp_path: Path, files: dict[str, str], reason: str
) -> None:
    found = load_task(write_task(tmp_path / "t", **files))
    assert isinstance(found, SkippedTask), found
    assert reason in found.reason and "\n" not in found.reason


HARBOR_REFUSALS = [
    pytest.param(
        {"tests/test_outputs.py": SERVER_TEST},
        "queries http://127.0.0.1:8080, a server the agent must leave running; every process of the agent ends",
        id="server-left-running",
    ),
    pytest.param({"task.toml": "[environment]\ngpus = 1\n"}, "needs a GPU", id="gpu"),
    pytest.param({"task.toml": "[[steps]]\nname = 'a'\n[[steps]]\nname = 'b'\n"}, "multi-step", id="steps"),
    pytest.param({"task.toml": "[environment]\nos = 'windows'\n"}, "needs a windows container", id="windows"),
    pytest.param({"task.toml": "[environment.env]\nKEY = '${OPENAI_API_KEY}'\n"}, "OPENAI_API_KEY", id="host-env"),
    pytest.param({"task.toml": "[verifier\n"}, "task.toml is not valid TOML", id="bad-toml"),
    pytest.param({"instruction.md": None}, "without instruction.md", id="no-instruction"),
    pytest.param({"tests/test.sh": None}, "no tests/test.sh", id="no-verifier"),
    pytest.param({"environment/Dockerfile": None}, "no environment/Dockerfile and no", id="no-image"),
    pytest.param(
        {"environment/Dockerfile": None, "task.toml": "[environment]\ndocker_image = 'redis:7'\n"},
        "runs the prebuilt image 'redis:7'",
        id="prebuilt",
    ),
    pytest.param(
        {"environment/docker-compose.yaml": "services:\n  main:\n    build: .\n  db:\n    image: postgres\n"},
        "needs 2 containers (main, db)",
        id="two-services",
    ),
    pytest.param(
        {"environment/Dockerfile": "FROM python:3.13-slim\n"}, "its image provides Python 3.13", id="python-3-13"
    ),
]


@pytest.mark.parametrize(("files", "reason"), HARBOR_REFUSALS)
def test_a_harbor_task_that_cannot_run_is_refused_with_one_line(
    tmp_path: Path, files: dict[str, str], reason: str
) -> None:
    found = load_task(write_harbor(tmp_path / "t", **files))
    assert isinstance(found, SkippedTask), found
    assert reason in found.reason and "\n" not in found.reason


@pytest.mark.parametrize(
    ("files", "field", "value"),
    [
        pytest.param(
            {"Dockerfile": "FROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/python-3-13:20250620\n"},
            "python_version",
            "3.13",
            id="python-version",
        ),
        pytest.param(
            {"Dockerfile": BASE + "RUN mkdir -p /opt/tool && echo hi > /usr/local/bin/tool\nRUN echo ok > ok\n"},
            "setup_root",
            (True, False),
            id="root-per-step",
        ),
        pytest.param(
            {"Dockerfile": BASE + "WORKDIR /build\nRUN make\nWORKDIR /srv\n"}, "setup_root", (True,), id="root-workdir"
        ),
        pytest.param(
            {"Dockerfile": BASE + "WORKDIR /srv\nRUN mkdir -p /data '/\\tests' && echo x > /data/x\n"},
            "setup_root",
            (True,),
            id="root-top-level-folder",
        ),
        pytest.param(
            {
                "Dockerfile": BASE + "WORKDIR /app\nRUN python3 -m venv /opt/verifier-venv\nRUN /usr/bin/python3.11"
                " -m venv --clear /srv/venv\nRUN virtualenv -p python3 /usr/local/venv\nRUN python3 -m venv .venv\n"
                "RUN python3 -m venv /app/venv\n"
            },
            "setup_root",
            (True, True, True, False, False),
            id="root-venv-folder",
        ),
        pytest.param({"Dockerfile": MISSING_APT}, "setup", (), id="apt-for-the-builder"),
    ],
)
def test_a_container_backend_gets_what_only_the_sandbox_cannot_run(
    tmp_path: Path, files: dict[str, str], field: str, value: object
) -> None:
    task = load_task(write_task(tmp_path / "t", **files), backend="container")
    assert isinstance(task, TerminalTask), task
    assert getattr(task, field) == value and task.sandbox_reason
    assert isinstance(load_task(tmp_path / "t"), SkippedTask)


SETUP_FOLDERS = [
    pytest.param(
        BASE + "RUN echo ok > ready && mkdir -p data && cp ready data/\nCOPY data.txt .\n", False, id="t-bench-app"
    ),
    pytest.param("FROM ubuntu:24.04\nRUN echo ok > ready\nWORKDIR /app\n", True, id="relative-write-at-the-top"),
    pytest.param("FROM debian:bookworm\nRUN mkdir data\nWORKDIR /app\n", True, id="relative-mkdir-at-the-top"),
    pytest.param("FROM debian:bookworm\nRUN python3 -m venv .venv\nWORKDIR /app\n", True, id="venv-at-the-top"),
    pytest.param("FROM debian:bookworm\nRUN uv venv /opt/uv\nWORKDIR /app\n", True, id="uv-venv-in-opt"),
    pytest.param("FROM debian:bookworm\nRUN cd /tmp && echo ok > ready\nWORKDIR /app\n", False, id="cd-followed"),
    pytest.param("FROM debian:bookworm\nWORKDIR /app\nRUN cd .. && touch x\n", True, id="cd-up-to-the-top"),
    pytest.param('FROM debian:bookworm\nRUN cd "$X" && touch x\nWORKDIR /app\n', False, id="cd-unknown-unjudged"),
    pytest.param(
        "FROM debian:bookworm\nWORKDIR /srv/app\nRUN echo x > /srv/app/x && mkdir -p /srv/app/d && sed -i s/x/y/ "
        "/srv/app/x\n",
        False,
        id="work-dir-under-a-system-folder",
    ),
    pytest.param(
        BASE + 'RUN python3 -c "print(1>2)" 2>&1 | tee -a log.txt\n', False, id="quoted-and-duplicated-redirections"
    ),
    pytest.param("FROM debian:bookworm\nWORKDIR /app\nRUN echo x | tee /opt/x\n", True, id="tee-in-a-pipeline"),
    pytest.param(
        "FROM debian:bookworm\nRUN mkdir -p /app/d 2>/dev/null && cp /etc/hostname /app/h > /tmp/log\nWORKDIR /app\n",
        False,
        id="redirections-are-no-operands",
    ),
    pytest.param(
        "FROM debian:bookworm\nWORKDIR /app\nRUN cat > notes.txt <<'EOF'\nx > /etc/y\nEOF\n",
        False,
        id="heredoc-is-data",
    ),
]


@pytest.mark.parametrize(("dockerfile", "root"), SETUP_FOLDERS)
def test_set_up_paths_are_read_from_the_folder_each_line_runs_in(tmp_path: Path, dockerfile: str, root: bool) -> None:
    # Docker runs a line before any WORKDIR in the base image's folder (/app for Terminal-Bench's), relative
    # paths from there: what only root may write is refused by the sandbox at load, never failing at reset.
    write_task(tmp_path / "t", Dockerfile=dockerfile, **{"run-tests.sh": "#!/bin/bash\ntrue\n"})
    task = load_task(tmp_path / "t", backend="container")
    assert isinstance(task, TerminalTask), task
    assert task.setup_root == (root,), task.setup
    in_sandbox = load_task(tmp_path / "t")
    if root:
        assert isinstance(in_sandbox, SkippedTask) and "its set-up needs root" in in_sandbox.reason
    else:
        assert isinstance(in_sandbox, TerminalTask), in_sandbox


@needs_episodes
def test_a_set_up_file_larger_than_the_default_file_limit_is_written_as_a_container_would(tmp_path: Path) -> None:
    # extract-safely's shape (an 80 MB file made at build): a container's only bound is its disk.
    dockerfile = BASE + "WORKDIR /app\nRUN truncate -s 70M big.dat\n"
    write_task(tmp_path / "tasks" / "big", Dockerfile=dockerfile, **{"run-tests.sh": "#!/bin/bash\ntrue\n"})
    env = TerminalEnv(tasks_dir=str(tmp_path / "tasks"))
    try:
        env.reset(seed=0)
        assert "73400320" in env.step("<bash>stat -c %s big.dat</bash>")[0]
    finally:
        env.close()
    small = TerminalEnv(tasks_dir=str(tmp_path / "tasks"), sandbox={"max_file_mb": 8})  # a user's own limit holds
    try:
        with pytest.raises(ToolError, match="SIGXFSZ"):
            small.reset(seed=0)
    finally:
        small.close()


@needs_episodes
def test_set_up_before_any_workdir_runs_in_app_and_its_venvs_see_the_hosts_packages(tmp_path: Path) -> None:
    dockerfile = BASE + "COPY data.txt .\nRUN echo prepared > ready && uv venv && python3 -m venv --without-pip tools\n"
    write_task(tmp_path / "tasks" / "app", Dockerfile=dockerfile, **{"run-tests.sh": "#!/bin/bash\ntrue\n"})
    env = TerminalEnv(tasks_dir=str(tmp_path / "tasks"))
    try:
        obs, _ = env.reset(seed=0)
        assert "in /app" in obs
        out = env.step(
            "<bash>pwd; cat ready data.txt; grep -h system-site .venv/pyvenv.cfg tools/pyvenv.cfg;"
            " .venv/bin/python -c 'import sys; print(sys.prefix)'</bash>"
        )[0]
        assert "/app\nprepared\ndata\n" in out
        assert out.count("include-system-site-packages = true") == 2 and "/app/.venv" in out, out
    finally:
        env.close()


CONTAINER_REFUSALS = [
    pytest.param(
        {"solution.sh": "#!/bin/bash\npip install tomli-w==1.0.0\necho hello > /srv/out.txt\n"},
        "its reference solution installs tomli-w==1.0.0 at run time, which its image does not",
        id="solution-installs",
    ),
    pytest.param(
        {"solution.sh": "#!/bin/bash\napt-get update && apt-get install -y jq\necho hello > /srv/out.txt\n"},
        "its reference solution installs jq at run time",
        id="solution-apt",
    ),
    pytest.param(
        {
            "solution.sh": "#!/bin/bash\npython3 - <<'PY'\nimport subprocess, sys\nPKGS = ['tomli-w==1.0.0']\n"
            "subprocess.check_call([sys.executable, '-m', 'pip', 'install', *PKGS])\nPY\necho hello > /srv/out.txt\n"
        },
        "its reference solution installs tomli-w==1.0.0 at run time, which its image does not",
        id="solution-installs-from-python",
    ),
    pytest.param({"Dockerfile": None}, "no Dockerfile and no prebuilt image", id="no-dockerfile"),
    pytest.param(
        {
            "tests/test_outputs.py": "import os\n\ndef test_page():\n"
            "    os.popen('/usr/bin/curl example.com > /srv/p').read()\n    assert open('/srv/p').read()\n"
        },
        "tests/test_outputs.py fetches example.com at check time; no network here",
        id="test-runs-curl",
    ),
    pytest.param(
        {
            "tests/test_outputs.py": "import subprocess, sys\n\ndef test_pip():\n"
            "    assert subprocess.run([sys.executable, '-m', 'pip', 'install', 'six']).returncode == 0\n"
        },
        "tests/test_outputs.py installs six at check time, which its image does not",
        id="test-runs-pip",
    ),
]


@pytest.mark.parametrize(("files", "reason"), CONTAINER_REFUSALS)
def test_a_container_backend_refuses_at_load_what_it_cannot_run(
    tmp_path: Path, files: dict[str, str | None], reason: str
) -> None:
    found = load_task(write_task(tmp_path / "t", **files), backend="container")
    assert isinstance(found, SkippedTask), found
    assert reason in found.reason and "\n" not in found.reason


def test_what_the_image_installs_a_solution_may_install_offline(tmp_path: Path) -> None:
    dockerfile = BASE + "RUN apt-get update && apt-get install -y jq && pip install tomli_w==1.0.0\nWORKDIR /srv\n"
    solution = "#!/bin/bash\napt-get install -y jq\npip install tomli-w\necho hello > /srv/out.txt\n"
    task = load_task(
        write_task(tmp_path / "t", Dockerfile=dockerfile, **{"solution.sh": solution}), backend="container"
    )
    assert isinstance(task, TerminalTask) and task.container_reason == "", task


def test_what_the_checker_installs_is_kept_for_the_containers_image(tmp_path: Path) -> None:
    test_sh = (
        "#!/bin/bash\napt-get update && apt-get install -y curl jq\n"
        "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\n"
        "uvx -p 3.13 -w pytest==8.4.1 -w requests==2.32.3 pytest /tests/test_x.py -rA\n"
        "echo $? > /logs/verifier/reward.txt\n"
    )
    task = load_task(
        write_harbor(tmp_path / "t", **{"tests/test.sh": test_sh, "tests/test_x.py": "def test_a():\n    pass\n"}),
        backend="container",
    )
    assert isinstance(task, TerminalTask), task
    assert (task.checker_apt, task.checker_python, task.checker_pytest) == (
        ("curl", "jq"),
        ("requests==2.32.3",),
        True,
    )
    plain = load_task(write_task(tmp_path / "plain"), backend="container")
    assert isinstance(plain, TerminalTask)
    assert (plain.checker_apt, plain.checker_python, plain.checker_pytest) == ((), (), False)


def test_the_uv_project_the_image_makes_is_what_the_checkers_pytest_sees(tmp_path: Path) -> None:
    # path-tracing's shape: a build script makes the uv project `uv run pytest` would run in; gem's pytest
    # runs on the image's python3, so the checker's tools get that project's packages.
    install = "uv init\nuv add pytest==8.4.1\nuv pip install pillow==11.2.1 numpy==2.3.1\n"
    dockerfile = (
        BASE + "WORKDIR /app\nCOPY install.sh /app\nRUN bash /app/install.sh\nRUN uv pip install --system rich\n"
    )
    checker = "#!/bin/bash\nsource $TEST_DIR/setup-uv-pytest.sh\nbash $TEST_DIR/run-uv-pytest.sh\n"
    files = {
        "Dockerfile": dockerfile,
        "install.sh": install,
        "run-tests.sh": checker,
        "tests/setup-uv-pytest.sh": "uv init\nuv add pytest==8.4.1\n",
        "tests/run-uv-pytest.sh": "uv run pytest $TEST_DIR/test_outputs.py -rA\n",
        "tests/test_outputs.py": "def test_a():\n    import numpy\n",
    }
    task = load_task(write_task(tmp_path / "t", **files), backend="container")
    assert isinstance(task, TerminalTask), task
    assert task.checker_pytest and task.checker_python == ("pillow==11.2.1", "numpy==2.3.1")


def test_a_folder_that_is_no_task_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    found = load_task(tmp_path / "empty")
    assert isinstance(found, SkippedTask) and "no task.yaml (Terminal-Bench) or task.toml (Harbor)" in found.reason


def test_a_harbor_task_without_a_solution_loads_with_an_empty_one(tmp_path: Path) -> None:
    task = load_task(write_harbor(tmp_path / "t", **{"solution/solve.sh": None}))
    assert isinstance(task, TerminalTask) and task.solution == "" and task.solution_path is None
    template = load_task(write_harbor(tmp_path / "u", **{"solution/solve.sh": "#!/bin/bash\n# TODO\n"}))
    assert isinstance(template, TerminalTask) and template.solution == "", template


# --- Playing loaded tasks ----------------------------------------------------------------------------------


@needs_episodes
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


@needs_episodes
def test_a_harbor_folder_plays_and_a_python_image_has_python(tmp_path: Path) -> None:
    solve = "#!/bin/bash\npython -c 'print(\"hello\")' > /app/out.txt\n"
    write_harbor(tmp_path / "one", **{"environment/Dockerfile": "FROM python:3.11\nWORKDIR /app\n"})
    (tmp_path / "one" / "solution" / "solve.sh").write_text(solve)
    reward, info = play(tmp_path / "one", reference_action(load_task(tmp_path / "one")))  # type: ignore[arg-type]
    assert reward == 1.0, info["checker_output"]


PYTEST_TESTS = """
from pathlib import Path


def test_the_file_says_hello():
    assert Path("/srv/out.txt").read_text().strip() == "hello"
"""


@needs_episodes
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


#: Checkers whose pytest run imports the agent's code: Terminal-Bench's default (no run-tests.sh) and
#: its standard uv script, which gem rewrites to its own pytest.
PYTEST_CHECKERS = [
    pytest.param(None, id="default-checker"),
    pytest.param(
        "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\nsource $HOME/.local/bin/env\n"
        "uv init\nuv add pytest==8.4.1\nuv run pytest $TEST_DIR/test_outputs.py -rA\n",
        id="standard-run-tests",
    ),
]


@pytest.mark.skipif(not episodes_available()[0], reason=f"episode sandbox unavailable: {episodes_available()[1]}")
@pytest.mark.parametrize("checker", PYTEST_CHECKERS)
@pytest.mark.parametrize(
    "planted",
    [
        "import os; os._exit(0)",
        "import atexit, os; atexit.register(lambda: os._exit(0))\nraise SystemExit(0)",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef hello(): return 'bye'",
    ],
    ids=["exit-0-on-import", "system-exit-with-atexit", "wrong-answer-atexit-exit-0"],
)
def test_a_pytest_checker_is_not_passed_by_an_early_exit(tmp_path: Path, planted: str, checker: str | None) -> None:
    """A test imports the agent's module, which exits 0 (at once, or at exit): pytest's report is missing (0)."""
    write_task(
        tmp_path / "tasks" / "greet",
        **{
            "run-tests.sh": checker,
            "tests/test_outputs.py": IMPORTING_TESTS,
            "solution.sh": "#!/bin/bash\nprintf 'def hello():\\n    return \"hello\"\\n' > /srv/greet.py\n",
        },
    )
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
    write_task(tmp_path / "bad", Dockerfile=MISSING_APT)
    write_harbor(tmp_path / "harbor-gpu", **{"task.toml": "[environment]\ngpus = 2\n"})
    (tmp_path / "not-a-task").mkdir()
    loaded, skipped = load_tasks(tmp_path)
    assert [t.name for t in loaded] == ["good"] and [s.name for s in skipped] == ["bad", "harbor-gpu"]
    with pytest.raises(ConfigError, match="skipped, its image installs Debian package 'gem-no-such-package'"):
        TerminalEnv(tasks_dir=str(tmp_path), task="bad", backend="sandbox")
    with pytest.raises(ConfigError, match=r"no runnable task .*harbor-gpu: needs a GPU"):
        TerminalEnv(tasks_dir=str(tmp_path / "harbor-gpu"), backend="sandbox")


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)
LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "FROM ubuntu",
                "FROM --platform=linux/amd64 python:3.11",
                "WORKDIR /app",
                "WORKDIR sub",
                "COPY a b",
                "COPY <<EOT /app/x",
                "EOT",
                "RUN <<EOF",
                "EOF",
                "RUN apt-get install -y git",
                "ARG X=1",
                "ENV A=1",
                "ENV A",
                "COPY",
                "\\",
            ]
        ),
        TEXT,
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dockerfile=LINES, meta=TEXT, compose=TEXT, toml=TEXT, harbor=st.booleans())
def test_no_folder_content_crashes_the_loader(
    tmp_path: Path, dockerfile: list[str], meta: str, compose: str, toml: str, harbor: bool
) -> None:
    folder = tmp_path / "fuzz"
    if folder.exists():
        shutil.rmtree(folder)
    if harbor:
        write_harbor(folder, **{"environment/Dockerfile": "\n".join(dockerfile), "task.toml": toml})
    else:
        write_task(folder, **{"Dockerfile": "\n".join(dockerfile), "task.yaml": meta, "docker-compose.yaml": compose})
    for backend in ("sandbox", "container"):
        found = load_task(folder, backend=backend)  # type: ignore[arg-type]
        assert isinstance(found, TerminalTask | SkippedTask)
        assert isinstance(found, TerminalTask) or "\n" not in found.reason


def other_python() -> tuple[str, str] | None:
    """``(version, executable)`` of an interpreter whose version differs from the system python3's, if any."""
    import glob

    from gem_terminal.provision import python_facts

    system = python_facts()[0]
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3.[0-9]*"))
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in range(10, 16)]
    for exe in (c for c in candidates if c and "/shims/" not in c):
        version = python_facts(exe)[0]
        if version and version != system and not exe.endswith("-config"):
            return version, exe
    return None


OTHER_PYTHON = other_python()


@needs_episodes
@pytest.mark.skipif(OTHER_PYTHON is None, reason="no interpreter of another version than the system python3 here")
def test_a_python_image_of_another_version_runs_only_with_a_stand_in_of_that_version(tmp_path: Path) -> None:
    assert OTHER_PYTHON is not None
    version, exe = OTHER_PYTHON
    image = f"FROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/python-{version.replace('.', '-')}:1\n"
    write_task(
        tmp_path / "t",
        Dockerfile=image + "WORKDIR /srv\n",
        **{
            "solution.sh": "python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' > /srv/out.txt\n",
            "run-tests.sh": f'test "$(cat /srv/out.txt)" = {version}\n'
            + "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' > /tmp/v\n"
            + f'test "$(cat /tmp/v)" = {version}\n',
        },
    )
    refused = load_task(tmp_path / "t")
    assert isinstance(refused, SkippedTask) and f"its image provides Python {version}" in refused.reason
    task = load_task(tmp_path / "t", pythons={version: exe})
    assert isinstance(task, TerminalTask) and task.python == exe
    env = TerminalEnv(tasks_dir=str(tmp_path / "t"), pythons={version: exe})
    try:
        env.reset(seed=0)
        env.step(reference_action(task))
        _, reward, *_, info = env.step("<done></done>")
        assert reward == 1.0, info["checker_output"]
    finally:
        env.close()


def _path_task(folder: Path) -> Path:
    # The set-up puts a tool in a folder of its own and the image's ENV puts that folder on PATH.
    tool = "RUN mkdir -p tool && printf '#!/bin/sh\\necho 42\\n' > tool/answer && chmod 755 tool/answer\n"
    return write_task(
        folder,
        Dockerfile=BASE + "WORKDIR /srv\n" + tool + "ENV PATH=/srv/tool:$PATH\n",
        **{
            "solution.sh": "#!/bin/bash\nanswer > /srv/out.txt\n",
            "run-tests.sh": '#!/bin/bash\nset -e\ntest "$(cat /srv/out.txt)" = "$(answer)"\npython3 -c "exit(0)"\n'
            'test "$(command -v python3)" != /srv/tool/python3\n',
        },
    )


@needs_episodes
def test_the_checker_has_the_image_s_path_after_the_system_s(tmp_path: Path) -> None:
    # `ENV PATH=/srv/tool:$PATH` extends the base image's PATH (not an empty one): the agent's commands
    # and the checker both find `answer` and the system's programs; in the sandbox the checker takes the
    # system's folders first, so a python3 the agent leaves in /srv/tool is not the checker's.
    task = load_task(_path_task(tmp_path / "path"))
    assert isinstance(task, TerminalTask), task
    assert task.env["PATH"] == "/srv/tool:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = TerminalEnv(tasks_dir=str(tmp_path), backend="sandbox")
    plays = {
        "reference": reference_action(task),
        "no-op": "",
        "shadowing python3": reference_action(task).replace(
            "answer > /srv/out.txt",
            "echo 41 > /srv/out.txt; printf '#!/bin/sh\\\\nexit 0\\\\n' > /srv/tool/python3;"
            " chmod +x /srv/tool/python3; ln -sf /bin/true /srv/tool/test",
        ),
    }
    rewards = {}
    for name, reply in plays.items():
        env.reset(options={"task": "path"})
        rewards[name] = env.step(reply + "<done></done>")[1]
    env.close()
    assert rewards == {"reference": 1.0, "no-op": 0.0, "shadowing python3": 0.0}
