"""Installs resolved against the host, the standard checker recognised, real downloads reported."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_terminal.provision import (
    CHECKED_PYTEST,
    PYTEST_COMMAND,
    does_nothing,
    host_debian_packages,
    loopback_servers,
    missing_imports,
    provision_script,
    python_pip_installs,
    remote_fetches,
    split_commands,
)

# The standard checkers' shapes, written here: Terminal-Bench's run-tests.sh and Harbor's test.sh.
TB_STANDARD = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uv init
uv add pytest==8.4.1
uv run pytest $TEST_DIR/test_outputs.py -rA
"""
HARBOR_STANDARD = """#!/bin/bash
apt-get update && apt-get install -y curl > /dev/null
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def bash_parses(text: str) -> bool:
    return subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True, timeout=10).returncode == 0


@pytest.mark.parametrize(
    ("script", "pytest_line"),
    [
        pytest.param(TB_STANDARD, f"{PYTEST_COMMAND} $TEST_DIR/test_outputs.py -rA", id="terminal-bench"),
        pytest.param(HARBOR_STANDARD, f"{PYTEST_COMMAND} /tests/test_state.py -rA", id="harbor-uvx"),
        pytest.param(
            "uv venv .venv\nsource .venv/bin/activate\nuv pip install pytest requests\npython -m pytest /tests -q\n",
            f"{PYTEST_COMMAND} /tests -q",
            id="venv-python-m",
        ),
    ],
)
def test_the_standard_checker_runs_gems_pytest_without_downloading(script: str, pytest_line: str) -> None:
    done = provision_script(script, checker=True)
    assert done.downloads == () and done.ran_pytest
    assert pytest_line in done.text
    assert "curl" not in done.text and "uv " not in done.text and "apt-get" not in done.text
    assert bash_parses(done.text)


def test_a_pytest_run_keeps_its_redirections() -> None:
    done = provision_script("uv run pytest /tests/t.py -rA | tee /logs/out.txt\n", checker=True)
    assert done.text == CHECKED_PYTEST + f"{PYTEST_COMMAND} /tests/t.py -rA | tee /logs/out.txt\n"


@pytest.mark.parametrize(
    ("script", "download"),
    [
        pytest.param("curl -fsSL https://example.com/data.csv -o d.csv\n", "curl -fsSL", id="curl"),
        pytest.param("wget https://example.com/x\n", "wget", id="wget"),
        pytest.param("git clone https://github.com/google/googletest.git\n", "git clone", id="git-clone"),
        pytest.param("cd web && npm install\n", "npm install", id="npm"),
        pytest.param("if curl -s https://example.com; then echo up; fi\n", "curl -s https://example.com", id="if"),
    ],
)
def test_a_real_download_is_reported_with_its_text(script: str, download: str) -> None:
    done = provision_script(script, checker=True)
    assert done.downloads and download in done.downloads[0]


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("curl -s http://localhost:8080/health\n", id="localhost"),
        pytest.param("curl -sf http://127.0.0.1:5000/api -d '{}'\n", id="loopback"),
        pytest.param("echo 'run curl https://example.com yourself'\n", id="echo"),
        pytest.param("# curl https://example.com\ntrue\n", id="comment"),
    ],
)
def test_loopback_requests_and_mentions_are_not_downloads(script: str) -> None:
    assert provision_script(script, checker=True).downloads == ()


@pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")
def test_apt_installs_of_what_the_host_has_resolve_and_missing_ones_are_named() -> None:
    assert host_debian_packages(["git", "bash=5.2-1", "coreutils:amd64", "asciinema"]) == []
    done = provision_script(
        "apt-get update && apt-get install -y --no-install-recommends git gem-nope\n", checker=False
    )
    assert done.missing == ("Debian package 'gem-nope'",) and done.installs == ("git", "gem-nope")
    assert does_nothing(done.text)


def test_pip_installs_are_checked_against_the_system_python() -> None:
    done = provision_script(
        "pip install --no-cache-dir --retries 3 pyyaml gem-nope==1.0 pytest==8.4.1\n", checker=False
    )
    assert done.missing == ("Python package 'gem-nope==1.0'",)  # pytest: gem provides it to checkers
    requirements = provision_script(
        "pip install --no-index --find-links=/w -r /tmp/requirements.txt\n",
        checker=False,
        read_file=lambda path: (
            "# pinned\ngem-other>=2 ; python_version > '3'\npytest\n" if path.endswith(".txt") else None
        ),
    )
    assert requirements.missing == ("Python package 'gem-other>=2'",)
    unknown = provision_script("pip install -r /nowhere.txt\n", checker=False, read_file=lambda path: None)
    assert unknown.missing == ("the Python requirements in '/nowhere.txt'",)


@pytest.mark.parametrize(
    ("code", "names"),
    [
        pytest.param(
            'import subprocess, sys\nPKGS = ("gem-a==1.0",)\n'
            'subprocess.check_call([sys.executable, "-m", "pip", "install", "--no-cache-dir", *PKGS, "gem-b"])\n',
            ["gem-a==1.0", "gem-b"],
            id="argument-list-with-a-starred-tuple",
        ),
        pytest.param(
            'import os\nos.system("pip3 install -i http://mirror gem-c && echo done")\n', ["gem-c"], id="shell-string"
        ),
        pytest.param(
            'from subprocess import run\nrun(["pip", "download", "gem-d"])\nprint("pip install gem-e")\n',
            [],
            id="not-an-install-and-text",
        ),
        pytest.param("pip install gem-f\n", [], id="not-python"),
    ],
)
def test_pip_run_from_python_code_is_read(code: str, names: list[str]) -> None:
    assert python_pip_installs(code) == names


def test_a_python_heredoc_s_pip_installs_count_as_the_script_s() -> None:
    script = "#!/bin/bash\npython3 - <<'PY'\nimport os\nos.system('pip install gem-nope==1.0')\nPY\necho ok\n"
    done = provision_script(script, checker=False)
    assert done.python_installs == ("gem-nope==1.0",) and done.missing == ("Python package 'gem-nope==1.0'",)
    written = provision_script(
        "cat > /app/x.py <<'PY'\nimport os\nos.system('pip install gem-nope')\nPY\n", checker=False
    )
    assert written.python_installs == ()  # a file written, not run


def test_missing_imports_leave_out_the_tasks_own_modules_and_optional_ones() -> None:
    sources = {
        "test_outputs.py": "import os\nimport gem_nope.sub\nfrom helper import x\nimport shop\n"
        "try:\n    import gem_optional\nexcept ImportError:\n    pass\n",
        "helper.py": "x = 1\n",
    }
    assert missing_imports(sources, frozenset({"shop"})) == ["gem_nope"]


def test_split_commands_respects_quotes_escapes_and_subshells() -> None:
    text = "a 'x && y'; b \"c;d\" && e $(f; g) || h\\;i\nj # k && l\n"
    assert [sep for sep, _ in split_commands(text)] == ["", ";", "&&", "||", "\n", "\n"]


FRAGMENTS = st.sampled_from(
    [
        "apt-get update",
        "apt-get install -y git",
        "apt-get install -y gem-nope > /dev/null",
        "pip install requests",
        "uv pip install pytest",
        "uv run pytest /tests -q",
        "curl -LsSf https://astral.sh/uv/install.sh | sh",
        "curl -s http://localhost:1/x",
        "source $HOME/.local/bin/env",
        "echo 'a; b && c'",
        "x=$(echo 1; echo 2)",
        "rm -rf /var/lib/apt/lists/*",
        "true",
    ]
)
SHELL = st.lists(
    st.tuples(st.sampled_from(["\n", "; ", " && ", " || "]), FRAGMENTS, st.booleans()), min_size=1, max_size=8
)


@settings(max_examples=40, deadline=None)
@given(parts=SHELL, checker=st.booleans())
def test_resolving_installs_never_breaks_the_scripts_syntax(parts: list[tuple[str, str, bool]], checker: bool) -> None:
    # Fragments, some inside if/then blocks: what bash parsed before it still parses after.
    text = ""
    for separator, fragment, wrapped in parts:
        body = f"if true; then {fragment}; fi" if wrapped else fragment
        text += (separator if text else "") + body
    text += "\n"
    assert bash_parses(text)
    done = provision_script(text, checker=checker)
    assert bash_parses(done.text), done.text
    # The checked-pytest function a checker's pytest run brings is defined ahead of the script's own commands.
    assert len(split_commands(done.text.replace(CHECKED_PYTEST, "", 1))) == len(split_commands(text))


@pytest.mark.parametrize(
    ("line", "made"),
    [
        pytest.param("python3 -m venv .venv", "python3 -m venv --system-site-packages .venv", id="venv"),
        pytest.param(
            "python3.11 -m venv --upgrade-deps --prompt x /opt/v",
            "python3.11 -m venv --system-site-packages /opt/v",
            id="venv-options",
        ),
        pytest.param("uv venv", "python3 -m venv --clear --without-pip --system-site-packages .venv", id="uv-default"),
        pytest.param(
            "uv venv --python 3.12 --seed /opt/uv",
            "python3 -m venv --clear --system-site-packages /opt/uv",
            id="uv-seed",
        ),
        pytest.param("virtualenv -p python3 env", "python3 -m venv --system-site-packages env", id="virtualenv"),
    ],
)
def test_a_venv_the_image_makes_exists_and_sees_the_packages_resolved_away(line: str, made: str) -> None:
    # Installs into the venv resolve against the host (dropped), so the venv must see its packages; a uv
    # venv must exist for a later DIR/bin/python. A checker's venv stays as written or goes (gem's pytest).
    image = provision_script(f"{line} && DIR=x pip install pyyaml", checker=False)
    assert image.text == f"{made} && true"
    assert "system-site" not in provision_script(line, checker=True).text


@pytest.mark.parametrize(
    ("source", "hosts"),
    [
        pytest.param('os.popen("/usr/bin/curl example.com > /app/x.html").read()', ["example.com"], id="popen"),
        pytest.param(
            'subprocess.run(["wget", "-q", "-O", "x", "https://pypi.org/simple"])',
            ["https://pypi.org/simple"],
            id="argv-list",
        ),
        pytest.param("curl -sk https://localhost:8443/index.html", [], id="loopback"),
        pytest.param("curl http://127.0.0.1:5000/x", [], id="loopback-ip"),
        pytest.param("if command -v curl &> /dev/null; then", [], id="command-v"),
        pytest.param("apt-get install -y curl expect git", [], id="installing-curl"),
        pytest.param('"""Test that curl can download the page."""', [], id="prose"),
        pytest.param("wget $URL", [], id="variable"),
    ],
)
def test_a_test_fetching_from_the_network_is_told_from_loopback_and_prose(source: str, hosts: list[str]) -> None:
    assert remote_fetches(source) == hosts


def test_a_loopback_server_a_test_curls_from_a_shell_string_is_one_the_agent_must_leave_running() -> None:
    source = (
        'open("v.sh", "w").write("""\nMAIN=$(curl -sk https://localhost:8443/index.html)\n""")\nos.popen("bash v.sh")\n'
    )
    assert loopback_servers(source) == ["https://localhost:8443/index.html"]
    assert loopback_servers("import os\nprint('curl can fetch pages')\n") == []


def test_a_heredoc_s_body_is_data_not_commands_unless_a_shell_reads_it() -> None:
    text = "cat > /x/f << 'EOF' && chmod +x /x/f\ncurl -X POST https://h.com/u\nEOF\necho next\nbash <<X\ncurl https://h.com\nX\n"
    pieces = split_commands(text)
    assert "".join(separator + command for separator, command in pieces) == text
    assert [command.strip() for _, command in pieces] == [
        "cat > /x/f << 'EOF'", "chmod +x /x/f", "echo next", "bash <<X", "curl https://h.com", "X", ""
    ]  # fmt: skip
    assert provision_script(text.split("echo next")[0], checker=False).downloads == ()
    shift = "echo $((1<<x))\ncurl https://h.com\n"  # a shift in arithmetic opens no heredoc
    assert provision_script(shift, checker=False).downloads == ("curl https://h.com",)
    assert provision_script(text, checker=False).downloads == ("curl https://h.com",)


def test_a_script_of_the_build_context_a_line_runs_counts_as_the_line() -> None:
    scripts = {
        "/app/setup.sh": "set -e\ngit clone https://github.com/o/r.git\n",
        "ok.sh": "cat > a <<E\nwget x.io\nE\n",
    }
    assert provision_script("bash /app/setup.sh && rm /app/setup.sh", checker=False, read_file=scripts.get).downloads
    assert not provision_script("sh -e ok.sh", checker=False, read_file=scripts.get).downloads
    assert not provision_script("bash -c 'echo /app/setup.sh'", checker=False, read_file=scripts.get).downloads
    # A Python program of the build context that fetches a dataset or a URL (reshard-c4-data's setup.py).
    programs = {
        "setup.py": "from datasets import load_dataset\nds = load_dataset('allenai/c4', split='train')\n",
        "get.py": "import requests\nrequests.get('https://example.com/data.json')\n",
        "gen.py": "import random\nprint(random.random())  # from_pretrained is a word here, not a call\n",
    }
    for program, fetches in (("setup.py", True), ("get.py", True), ("gen.py", False)):
        done = provision_script(f"python3 -u {program} --out x", checker=False, read_file=programs.get)
        assert bool(done.downloads) is fetches, (program, done.downloads)
