"""What a task's shell text installs or downloads, whether this host already has it, and the standard checker.

Tasks install their tools the way their images do (``apt-get install``, ``pip install``) and their
checkers fetch pytest through uv (Terminal-Bench's ``run-tests.sh``, Harbor's ``uvx ... pytest``).
Where nothing can be downloaded, such a line is only a problem when what it installs is missing:
each Debian package is looked up with ``dpkg-query`` (or a command of its name on ``PATH``), each
Python distribution in the system ``python3``. The standard checker is rewritten to run the pytest
gem provides (``$GEM_PYTEST``); a line that truly downloads is reported with its text.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PYTEST_COMMAND",
    "Provisioned",
    "does_nothing",
    "host_debian_packages",
    "host_python",
    "host_python_modules",
    "missing_imports",
    "provision_script",
    "python_facts",
    "python_fetches",
    "remote_fetches",
    "remote_urls",
    "split_commands",
]

#: What a checker's pytest line becomes: a shell function (:data:`CHECKED_PYTEST`, put at the top of the
#: checker) that runs the system python3 with gem's pytest copy first on its path.
PYTEST_COMMAND = "gem_checked_pytest"
#: The function behind :data:`PYTEST_COMMAND`. pytest starts with the folder it runs in off ``sys.path``
#: (a ``pytest.py`` the agent left there is not imported; ``-P`` does the same but needs Python 3.11,
#: and images have older ones). Its status is pytest's, and 0 only when the JUnit report
#: pytest writes (to a fresh folder of the checker's own) holds at least one test and no failure or
#: error: code of the agent's that a test imports and that exits 0 early (``os._exit``, an ``atexit``
#: hook) leaves no report, so it fails.
CHECKED_PYTEST = """gem_pytest_main='import sys; sys.path = [p for p in sys.path if p]; import pytest
sys.exit(pytest.main())'
gem_checked_pytest() {
  gem_report_dir=$(mktemp -d) || return 1
  PYTHONPATH="$GEM_PYTEST${PYTHONPATH:+:$PYTHONPATH}" python3 -c "$gem_pytest_main" -p no:cacheprovider "$@" \\
    --junitxml="$gem_report_dir/report.xml"
  gem_status=$?
  if [ "$gem_status" -ne 0 ]; then return "$gem_status"; fi
  python3 -I -c '
import sys, xml.etree.ElementTree as T
try:
    root = T.parse(sys.argv[1]).getroot()
except (OSError, T.ParseError):
    sys.exit("gem: pytest exited 0 but wrote no report: the run ended early")
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
count = lambda key: sum(int(s.get(key) or 0) for s in suites)
if count("tests") == 0 or count("failures") + count("errors") > 0:
    sys.exit("gem: the pytest report holds no test, or a failure or error")
' "$gem_report_dir/report.xml"
}
"""
#: Commands that fetch from the network whatever their arguments.
_DOWNLOADS = re.compile(
    r"(?:^|[\s|;&(`])(curl|wget|git\s+clone|git\s+fetch|git\s+pull|npm\s+(?:install|i|ci)|npx|yarn\s+add|"
    r"conda\s+install|cargo\s+install|go\s+install|go\s+get|gem\s+install|apk\s+add|yum\s+install|dnf\s+install|"
    r"huggingface-cli\s+download|snap\s+install)\b"
)
_SHELL_PREFIX = re.compile(r"^(?:then|do|else|elif|if|while|until|\{|\(|!|time)\s+")
#: pytest plugins whose only use in the standard checkers is a report file gem does not read.
_REPORT_PLUGINS = {"pytest-json-ctrf", "pytest-json-report"}
#: Installing or upgrading these installs no tool a task uses.
_INSTALLER_TOOLS = {"pip", "uv", "setuptools", "wheel", "virtualenv"}


@dataclass(frozen=True)
class Provisioned:
    """Shell text with its installs resolved.

    Attributes:
        text: The text to run here: installs of what the host has, package-index bookkeeping and the uv
            bootstrap replaced by ``true`` (so compound statements stay valid), pytest runs pointed at
            gem's pytest.
        missing: What it installs that this host lacks (``"Debian package 'jq'"``...): the no-daemon sandbox
            cannot run it; a container backend installs it at build.
        downloads: Lines that fetch from the network beyond installs (``curl URL``, ``git clone``...):
            nothing can run them without network.
        ran_pytest: Whether a pytest run was found and pointed at gem's pytest.
        installs: What it installs (Debian packages and Python requirements), as named.
        pytest_args: The arguments of the pytest runs found (test files among them).
        apt_installs: The Debian packages among ``installs``.
        python_installs: The Python requirements among ``installs`` (pytest and its report plugins
            left out), with the packages a pytest runner adds (``uvx -w PKG``).
        project_installs: Those of ``python_installs`` that uv puts into a project's venv (``uv add``,
            ``uv pip install`` without ``--system``): the venv ``uv run pytest`` would run in.
    """

    text: str
    missing: tuple[str, ...] = ()
    downloads: tuple[str, ...] = ()
    ran_pytest: bool = False
    installs: tuple[str, ...] = field(default=())
    pytest_args: tuple[str, ...] = ()
    apt_installs: tuple[str, ...] = ()
    python_installs: tuple[str, ...] = ()
    project_installs: tuple[str, ...] = ()


_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "su", "sudo", "runuser", "chroot", "env"})
_HEREDOC_OPENER = re.compile(r"""(?<!<)<<(?!<)(-?)\s*(['"]?)([A-Za-z_][\w.-]*)\2""")


def split_commands(text: str) -> list[tuple[str, str]]:
    """Top-level commands of shell text as ``(separator before it, command)``; quotes and escapes respected.

    Separators are ``&&``, ``||``, ``;`` and newlines (not inside quotes, ``$(...)`` or after a backslash);
    a pipeline stays one command. A heredoc's body is data, not commands: it is part of the separator
    after the line that opens it (``separator + command`` of every piece still makes up ``text``).
    """
    pieces: list[tuple[str, str]] = []
    current: list[str] = []
    separator = ""
    quote = ""
    depth = 0
    pending: list[tuple[bool, str]] = []  # heredocs opened on this line: (tabs stripped, end word)

    def close(piece: str) -> None:
        pieces.append((separator, piece))
        head = (piece.split() or [""])[0].rsplit("/", 1)[-1]
        if head not in _SHELLS:  # `bash <<EOF` runs its body: those lines stay commands
            pending.extend(
                (match.group(1) == "-", match.group(3))
                for match in _HEREDOC_OPENER.finditer(piece)
                # `$((x<<y))` is a shift, not a heredoc
                if piece.count("(", 0, match.start()) == piece.count(")", 0, match.start())
            )

    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            current.append(char)
            if char == "\\" and quote == '"' and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif char == quote:
                quote = ""
        elif char == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 1
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == "#" and (not current or current[-1][-1:].isspace()):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            current.append(text[i:end])
            i = end - 1
        elif char == "(":
            depth += 1
            current.append(char)
        elif char == ")":
            depth = max(0, depth - 1)
            current.append(char)
        elif depth == 0 and (text.startswith("&&", i) or text.startswith("||", i)):
            close("".join(current))
            separator, current = text[i : i + 2], []
            i += 1
        elif depth == 0 and char in ";\n" and not text.startswith(";;", i):
            close("".join(current))
            separator, current = char, []
            if char == "\n" and pending:  # the bodies of the heredocs this line opened, each to its end word
                end = i + 1
                for dash, word in pending:
                    while end < len(text):
                        line_end = text.find("\n", end)
                        line_end = len(text) if line_end < 0 else line_end
                        line = text[end:line_end]
                        end = line_end + 1
                        if (line.lstrip("\t") if dash else line) == word:
                            break
                pending.clear()
                separator = text[i : min(end, len(text))]
                i = min(end, len(text)) - 1
        else:
            current.append(char)
        i += 1
    close("".join(current))
    return pieces


@functools.cache
def _dpkg_installed(name: str) -> bool:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", name], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.strip() == "installed"


#: Packages Terminal-Bench's images carry for its harness, not for tasks (it records sessions with asciinema).
HARNESS_PACKAGES = frozenset({"asciinema"})


def host_debian_packages(names: list[str]) -> list[str]:
    """Those of ``names`` (apt package names, version or arch suffixes allowed) this host lacks.

    A package counts as present when dpkg lists it installed, or a command of its name is on ``PATH``
    (``python3-pip`` has no ``python3-pip`` command, but ``git`` installed by hand is still git).
    """
    missing = []
    for name in names:
        bare = re.split(r"[=:]", name, maxsplit=1)[0]
        if bare not in HARNESS_PACKAGES and not (_dpkg_installed(bare) or shutil.which(bare)):
            missing.append(bare)
    return missing


_HOST_PYTHON_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "d = {}\n"
    "for x in m.distributions():\n"
    "    n = x.metadata['Name']\n"
    "    if n: d[n.lower().replace('_', '-').replace('.', '-')] = x.version\n"
    "import pkgutil\n"
    "mods = sorted({x.name for x in pkgutil.iter_modules()} | set(sys.builtin_module_names)"
    " | set(getattr(sys, 'stdlib_module_names', ())))\n"
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'dists': d, 'modules': mods}))\n"
)


#: The Python the sandbox's commands get by default: the host's own, under its /usr.
SYSTEM_PYTHON = "/usr/bin/python3"


@functools.cache
def python_facts(python: str = SYSTEM_PYTHON) -> tuple[str, dict[str, str], frozenset[str]]:
    """A Python's version (``"3.11"``), distributions (normalised name: version) and importable top-level modules.

    ``("", {}, frozenset())`` when it cannot be run.
    """
    try:
        out = subprocess.run([python, "-I", "-c", _HOST_PYTHON_PROBE], capture_output=True, text=True, timeout=60)
        data = json.loads(out.stdout)
        return str(data["version"]), dict(data["dists"]), frozenset(data["modules"])
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        return "", {}, frozenset()


def host_python() -> tuple[str, dict[str, str]]:
    """The system ``python3``'s version (``"3.11"``) and its distributions (normalised name: version).

    ``("", {})`` when there is none: the sandbox's commands use the host's ``/usr``.
    """
    version, dists, _ = python_facts()
    return version, dists


def host_python_modules() -> frozenset[str]:
    """Top-level modules the system ``python3`` can import (standard library and installed)."""
    return python_facts()[2]


def missing_imports(
    sources: dict[str, str], local: frozenset[str] = frozenset(), python: str = SYSTEM_PYTHON
) -> list[str]:
    """Top-level modules the given Python files import unconditionally that neither they nor the host provide.

    ``sources`` maps relative paths to text (a task's ``tests/``); imports inside ``try`` or functions
    are left out (they may be optional), and so are the files' own modules, ``local`` (modules the
    task's own files provide) and ``pytest``.
    """
    import ast

    local = local | {Path(name).stem for name in sources} | {Path(name).parts[0] for name in sources if "/" in name}
    have = python_facts(python)[2]
    if not have:
        return []
    wanted: list[str] = []
    for text in sources.values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            wanted.extend(name.split(".")[0] for name in names)
    return sorted({n for n in wanted if n not in have and n not in local and n not in ("pytest", "_pytest")})


_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(?:(==|>=|<=|~=|!=|>|<)\s*([^\s;,]+))?")


_PYTHON_HEREDOC = re.compile(
    r"^[^#\n]*\bpython(?:3(?:\.\d+)?)?\b[^\n]*?<<(-?)\s*(['\"]?)([A-Za-z_]\w*)\2[^\n]*\n(.*?)^\s*\3\s*$",
    re.MULTILINE | re.DOTALL,
)


def _python_heredocs(text: str) -> list[str]:
    """The bodies of heredocs that ``text`` feeds to a Python interpreter (``python3 - <<'PY'``)."""
    return [match.group(4) for match in _PYTHON_HEREDOC.finditer(text)]


#: Calls that run a command: ``os.system``, ``os.popen`` and ``subprocess``'s (a string elsewhere is text).
_PROCESS_CALLS = frozenset({"system", "popen", "run", "call", "check_call", "check_output", "Popen"})


def python_pip_installs(code: str) -> list[str]:
    """What Python ``code`` installs by running pip: ``subprocess`` argument lists and shell strings.

    ``[sys.executable, "-m", "pip", "install", "x==1", *pkgs]`` names ``x==1`` and the string items of a
    list or tuple assigned to ``pkgs``; ``os.system("pip install x")`` and ``subprocess.run("pip install x",
    shell=True)`` name ``x``. Code that does not parse installs nothing that can be told.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    literals: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple):
            strings = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            for target in node.targets:
                if isinstance(target, ast.Name):
                    literals[target.id] = strings
    names: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func not in _PROCESS_CALLS:
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                for _, command in split_commands(arg.value):
                    try:
                        words = _drop_env_assignments(shlex.split(command))
                    except ValueError:
                        continue
                    kind, found = _classify(words, command)
                    if kind == "pip-install":
                        names.extend(found)
            elif isinstance(arg, ast.List | ast.Tuple):
                words = []
                for element in arg.elts:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        words.append(element.value)
                    elif isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                        words.extend(literals.get(element.value.id, []))
                    else:
                        words.append("-")  # sys.executable and the like: a word that names no package
                at = next(
                    (i for i in range(len(words) - 1) if words[i] in ("pip", "pip3") and words[i + 1] == "install"),
                    None,
                )
                if at is not None:
                    names.extend(_packages(words[at + 2 :], value_options=_PIP_VALUE_OPTIONS))
    return list(dict.fromkeys(n for n in names if n != "-"))


def _python_missing(requirements: list[str], python: str = SYSTEM_PYTHON) -> list[str]:
    """Those requirements (``numpy==1.26.4``, ``requests``) ``python`` does not satisfy."""
    _, dists, _ = python_facts(python)
    missing = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement.strip())
        if not match:
            missing.append(requirement)
            continue
        name = match.group(1).lower().replace("_", "-").replace(".", "-")
        have = dists.get(name)
        if have is None or (match.group(3) == "==" and have != match.group(4)):
            missing.append(requirement + (f" (the host has {have})" if have else ""))
    return missing


def _strip_prefix(command: str) -> tuple[str, str]:
    """``("then ", "apt-get ...")`` for a command behind a shell keyword, so it can be judged alone."""
    stripped = command.strip()
    match = _SHELL_PREFIX.match(stripped)
    while match:
        stripped = stripped[match.end() :]
        match = _SHELL_PREFIX.match(stripped)
    prefix = command[: len(command) - len(command.lstrip())] + command.strip()[: len(command.strip()) - len(stripped)]
    return prefix, stripped


def _drop_env_assignments(words: list[str]) -> list[str]:
    index = 0
    while index < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[index]):
        index += 1
    if words[index : index + 1] in (["sudo"], ["env"]):
        return _drop_env_assignments(words[index + 1 :])
    return words[index:]


def _packages(words: list[str], *, value_options: tuple[str, ...] = ()) -> list[str]:
    """Positional words (package names) after the subcommand, options and their values left out."""
    names: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in value_options:
            skip = True
        elif not word.startswith("-"):
            names.append(word)
    return names


_PIP_VALUE_OPTIONS = (
    "-i", "--index-url", "--extra-index-url", "-c", "--constraint", "--python", "-p", "-f", "--find-links",
    "--retries", "--timeout", "-t", "--target", "--prefix", "--root", "--platform", "--python-version",
    "--only-binary", "--no-binary", "--cache-dir", "-r", "--requirement", "-e", "--editable", "--progress-bar",
)  # fmt: skip
_APT_BOOKKEEPING = {"update", "clean", "autoclean", "autoremove", "upgrade", "dist-upgrade"}
_UV_BOOTSTRAP = re.compile(
    r"^(?:(?:curl|wget)\b[^|]*astral\.sh/uv[^|]*\|\s*(?:env\s+\S+\s+)?(?:ba)?sh\b.*|"
    r"(?:source|\.)\s+(?:\$HOME|~|\$\{HOME\}|/root)/\.(?:local/bin|cargo)/env\b.*|"
    r"(?:source|\.)\s+\S*/bin/activate\b.*|uv\s+(?:init|venv|sync)\b.*)$"
)


def _classify(words: list[str], command: str) -> tuple[str, list[str]]:
    """``(kind, names)``: apt-bookkeeping, apt-install, pip-install, uv-bootstrap, pytest, cleanup, other."""
    if not words:
        return "other", []
    for index, word in enumerate(words):
        if re.match(r"^(?:\d?>>?|&>|\||<|\|\|)", word):
            words = words[:index]  # what follows a redirection or pipe is not the command's arguments
            break
    if not words:
        return "other", []
    head = words[0].rsplit("/", 1)[-1]
    if head in ("apt-get", "apt", "aptitude"):
        sub = next((w for w in words[1:] if not w.startswith("-")), "")
        if sub in _APT_BOOKKEEPING:
            return "apt-bookkeeping", []
        if sub == "install":
            return "apt-install", _packages(words[words.index("install") + 1 :], value_options=("-o", "-t"))
        return "other", []
    if head in ("rm",) and any("/var/lib/apt/lists" in w or "/var/cache/apt" in w for w in words):
        return "cleanup", []
    if _UV_BOOTSTRAP.match(command.strip()):
        return "uv-bootstrap", []
    pip_at = _pip_install_at(words)
    if pip_at is not None:
        requirement_files = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")] + [
            w.split("=", 1)[1] for w in words if w.startswith("--requirement=")
        ]
        names = _packages(words[pip_at:], value_options=_PIP_VALUE_OPTIONS)
        if requirement_files:
            return "pip-requirements", names + [f"-r {f}" for f in requirement_files]
        if names and set(names) <= _INSTALLER_TOOLS:
            return "uv-bootstrap", []  # the installers themselves: only what they install matters
        return "pip-install", names
    if head == "uv" and words[1:2] == ["add"]:
        return "pip-install", _packages(words[2:], value_options=("--python", "-p", "--group"))
    if _pytest_at(words) is not None:
        return "pytest", []
    return "other", []


def _pip_install_at(words: list[str]) -> int | None:
    """Where the requirements start when ``words`` is a pip/uv install, else ``None``."""
    head = words[0].rsplit("/", 1)[-1]
    if re.fullmatch(r"pip3?(?:\.\d+)?", head) and words[1:2] == ["install"]:
        return 2
    if re.fullmatch(r"python3?(?:\.\d+)?", head) and words[1:4] == ["-m", "pip", "install"]:
        return 4
    if head == "uv" and words[1:3] == ["pip", "install"]:
        return 3
    return None


def _pytest_at(words: list[str]) -> tuple[int, list[str]] | None:
    """``(where pytest's own arguments start, packages the runner adds)`` for a pytest run, else ``None``.

    Forms: ``pytest ARGS``, ``python3 -m pytest ARGS``, ``uv run [opts] pytest|python -m pytest ARGS``,
    ``uvx [-p V] [-w PKG]... pytest ARGS``.
    """
    extra: list[str] = []
    index = 0
    head = words[0].rsplit("/", 1)[-1] if words else ""
    if head == "uv" and words[1:2] == ["run"]:
        index = 2
    elif head == "uvx" or (head == "uv" and words[1:3] == ["tool", "run"]):
        index = 1 if head == "uvx" else 3
    if index:
        while index < len(words) and words[index].startswith("-"):
            option = words[index]
            takes_value = option in ("-p", "--python", "-w", "--with", "--from", "--project", "--directory")
            if option in ("-w", "--with") and index + 1 < len(words):
                extra.append(words[index + 1])
            index += 2 if takes_value else 1
    rest = words[index:]
    if rest[:1] == ["pytest"] or (rest[:1] and rest[0].endswith("/pytest")):
        return index + 1, extra
    if rest[:1] and re.fullmatch(r"python3?(?:\.\d+)?", rest[0].rsplit("/", 1)[-1]) and rest[1:3] == ["-m", "pytest"]:
        return index + 3, extra
    return None


def _pytest_arguments(arguments: list[str]) -> list[str]:
    """Pytest's arguments without the report-plugin options gem does not provide (``--ctrf FILE``...)."""
    kept: list[str] = []
    skip = False
    for word in arguments:
        if re.match(r"^(?:\d?>>?|&>|\||<|2>&1)", word):
            break  # redirections and pipes are kept as written
        if skip:
            skip = False
        elif word in ("--ctrf", "--json-report-file"):
            skip = True
        elif word.startswith(("--ctrf=", "--json-report")):
            continue
        else:
            kept.append(word)
    return kept


def _requirement_lines(text: str) -> list[str]:
    """Requirements of a requirements file (comments, options and environment markers left out)."""
    lines = (line.split("#", 1)[0].split(";", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def provision_script(
    text: str,
    *,
    checker: bool,
    read_file: Callable[[str], str | None] | None = None,
    python: str = SYSTEM_PYTHON,
    _depth: int = 0,
) -> Provisioned:
    """Resolve what ``text`` installs against this host; point pytest runs at gem's pytest when ``checker``.

    Args:
        text: Shell text (a RUN line, ``run-tests.sh``, ``tests/test.sh``, a solution).
        checker: Rewrite the standard checker's uv bootstrap and pytest run (a checker runs pytest from
            ``$GEM_PYTEST``).
        read_file: The text of a file the script names (``pip install -r PATH``), or ``None`` when unknown.
        python: The Python whose packages count as installed.
    """
    out: list[str] = []
    missing: list[str] = []
    downloads: list[str] = []
    installs: list[str] = []
    apt_installs: list[str] = []
    python_installs: list[str] = []
    project_installs: list[str] = []
    ran_pytest = False
    pytest_args: list[str] = []
    for separator, command in split_commands(text):
        prefix, body = _strip_prefix(command)
        try:
            words = _drop_env_assignments(shlex.split(body.replace("\\\n", " "), comments=True))
        except ValueError:
            words = []
        kind, names = _classify(words, body)
        replacement = None
        if kind in ("apt-bookkeeping", "cleanup"):
            replacement = "true"
        elif kind == "apt-install":
            installs.extend(names)
            apt_installs.extend(names)
            lacking = host_debian_packages(names)
            missing.extend(f"Debian package {name!r}" for name in lacking)
            replacement = "true"
        elif kind == "uv-bootstrap":
            replacement = None if checker else _host_venv(words)
            replacement = replacement or "true"
        elif kind in ("pip-install", "pip-requirements"):
            wanted: list[str] = []
            for name in names:
                if name.startswith("-r "):
                    text_of = read_file(name[3:]) if read_file else None
                    if text_of is None:
                        missing.append(f"the Python requirements in {name[3:]!r}")
                        continue
                    wanted.extend(_requirement_lines(text_of))
                else:
                    wanted.append(name)
            # pytest and its report plugins: gem provides pytest to checkers ($GEM_PYTEST).
            wanted = [n for n in wanted if not _is_pytest_package(n)]
            installs.extend(wanted)
            python_installs.extend(wanted)
            if words[0].rsplit("/", 1)[-1] == "uv" and "--system" not in words:
                project_installs.extend(wanted)
            missing.extend(f"Python package {name!r}" for name in _python_missing(wanted, python))
            replacement = "true"
        elif kind == "pytest" and checker:
            at, extra = _pytest_at(words) or (0, [])
            wanted = [n for n in extra if not _is_pytest_package(n)]
            python_installs.extend(wanted)
            missing.extend(f"Python package {name!r}" for name in _python_missing(wanted, python))
            redirect = _redirections(body)
            pytest_args.extend(_pytest_arguments(words[at:]))
            replacement = " ".join([PYTEST_COMMAND, *map(_quote, _pytest_arguments(words[at:]))]) + redirect
            ran_pytest = True
        elif kind == "other" and _downloads(words):
            downloads.append(body.strip()[:120])
        elif kind == "other" and read_file is not None and _depth < 3:
            # A script of the build context the line runs (`bash /app/setup.sh`): what it downloads or
            # installs counts as the line's (its text runs as written).
            script = _script_run(words)
            inner_text = read_file(script) if script else None
            program = _python_program(words)
            code = read_file(program) if program else None
            fetched = python_fetches(code) if code is not None else []
            if fetched:
                downloads.append(f"{body.strip()[:60]} ({program} fetches {fetched[0][:60]})")
            if inner_text is not None:
                inner = provision_script(
                    inner_text, checker=checker, read_file=read_file, python=python, _depth=_depth + 1
                )
                downloads.extend(inner.downloads)
                missing.extend(inner.missing)
                installs.extend(inner.installs)
                apt_installs.extend(inner.apt_installs)
                python_installs.extend(inner.python_installs)
                project_installs.extend(inner.project_installs)
        if kind == "other" and words[:2] == ["uv", "run"]:
            replacement = shlex.join(words[2:])
        elif kind == "other" and not checker:
            replacement = _host_venv(words)
        trailing = command[len(command.rstrip()) :]
        text_now = command if replacement is None else prefix + replacement + trailing
        out.append(separator + text_now)
    # pip run from a Python heredoc (`python3 - <<'PY'` ... `subprocess.check_call([..., "pip", "install", ...])`):
    # its packages are installed at run time too.
    for code in _python_heredocs(text):
        wanted = [n for n in python_pip_installs(code) if not (checker and _is_pytest_package(n))]
        installs.extend(wanted)
        python_installs.extend(wanted)
        missing.extend(f"Python package {name!r}" for name in _python_missing(wanted, python))
    script = "".join(out)
    if ran_pytest:
        script = _with_checked_pytest(script)
    return Provisioned(
        script,
        tuple(dict.fromkeys(missing)),
        tuple(downloads),
        ran_pytest,
        tuple(installs),
        tuple(pytest_args),
        tuple(dict.fromkeys(apt_installs)),
        tuple(dict.fromkeys(python_installs)),
        tuple(dict.fromkeys(project_installs)),
    )


def _script_run(words: list[str]) -> str | None:
    """The script file a command runs (``bash x.sh``, ``sh -e /app/setup.sh``, ``. ./env.sh``, ``./run.sh``).

    ``None`` when it runs none (``bash -c TEXT``, a program).
    """
    if not words:
        return None
    head = words[0].rsplit("/", 1)[-1]
    if head in ("bash", "sh", "dash", "source", "."):
        operands = [w for w in words[1:] if not w.startswith("-")]
        return operands[0] if operands and "-c" not in words else None
    if "/" in words[0] and words[0].endswith(".sh"):
        return words[0]
    return None


def _python_program(words: list[str]) -> str | None:
    """The ``.py`` file a command runs with Python (``python3 setup.py``, ``python -u gen.py ARGS``), else ``None``."""
    if not words or not re.fullmatch(r"python[\d.]*", words[0].rsplit("/", 1)[-1]):
        return None
    operands = [w for w in words[1:] if not w.startswith("-")]
    return operands[0] if operands and operands[0].endswith(".py") and "-c" not in words and "-m" not in words else None


#: Calls that fetch a model or a dataset from the Hugging Face hub (no network here).
_HUB_CALLS = re.compile(r"\b(?:load_dataset|from_pretrained|hf_hub_download|snapshot_download|load_model)\s*\(")


def python_fetches(source: str) -> list[str]:
    """What a Python program fetches from the network: a non-loopback URL through an HTTP client, a hub call."""
    return remote_urls(source) + [m.group(0).rstrip("( ") for m in _HUB_CALLS.finditer(source)]


def _host_venv(words: list[str]) -> str | None:
    """A venv an image or solution makes, seeing its Python's packages; ``None``: no venv made.

    What a task installs into its venv resolves against the host's packages (the install is dropped), so
    the venv must see them: ``python3 -m venv DIR`` gets ``--system-site-packages``, and ``uv venv [DIR]``
    and ``virtualenv DIR`` (neither need be here) become the same, so a later ``DIR/bin/python`` exists.
    """
    if not words:
        return None
    head = words[0].rsplit("/", 1)[-1]
    if re.fullmatch(r"python[\d.]*", head) and words[1:3] == ["-m", "venv"]:
        options, rest = words[:3], words[3:]
    elif head == "uv" and words[1:2] == ["venv"]:
        options, rest = ["python3", "-m", "venv", "--clear"], words[2:]
    elif head == "virtualenv":
        options, rest = ["python3", "-m", "venv"], words[1:]
    else:
        return None
    if head == "uv" and "--seed" not in rest:
        options.append("--without-pip")  # uv's venvs have no pip unless seeded
    if head != "virtualenv":  # venv's own flags that uv shares; virtualenv's mean other things
        options += [w for w in rest if w in ("--clear", "--symlinks", "--copies", "--without-pip")]
    operands = _packages(
        rest, value_options=("--python", "-p", "--prompt", "--index-url", "--extra-index-url", "--cache-dir")
    )
    if head == "uv" and not operands:
        operands = [".venv"]  # uv's default
    if not operands:
        return None
    if "--system-site-packages" not in options:
        options.append("--system-site-packages")
    return shlex.join([*dict.fromkeys(options), *operands])


def _with_checked_pytest(script: str) -> str:
    """``script`` with :data:`CHECKED_PYTEST` defined first (after a ``#!`` line, which must stay first)."""
    if script.startswith("#!"):
        shebang, newline, rest = script.partition("\n")
        return shebang + newline + CHECKED_PYTEST + rest
    return CHECKED_PYTEST + script


def does_nothing(text: str) -> bool:
    """Whether shell text is only ``true``, comments and blanks (an install resolved away)."""
    for _, command in split_commands(text):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            return False
        if words not in ([], ["true"]):
            return False
    return True


_LOOPBACK_URL = re.compile(r"^(?:[a-z]+://)?(?:localhost|127\.\d+\.\d+\.\d+|0\.0\.0\.0|\[::1\])(?:[:/]|$)")


_NETWORK_MODULES = re.compile(
    r"^\s*(?:import\s+[^\n#]*\b|from\s+)(?:requests|httpx|aiohttp|urllib3?|http\.client|websockets?|grpc)\b",
    re.MULTILINE,
)
_URL = re.compile(r"""\bhttps?://[^\s'"<>)]+""")


def remote_urls(python_source: str) -> list[str]:
    """The non-loopback ``http(s)://`` URLs a Python file that imports an HTTP client names.

    Such a test talks to a server on the network at check time (a remote judge, an API): no backend
    here gives the checker a network. URLs in a file without an HTTP client are text, not requests.
    """
    if not _NETWORK_MODULES.search(python_source):
        return []
    return [url for url in _URL.findall(python_source) if not _LOOPBACK_URL.match(url.split("://", 1)[1])]


_FETCH = re.compile(r"""(?<![\w.-])(?:curl|wget)(?![\w.-])([^\n]*)""")
_FETCH_VALUE_OPTIONS = (
    "-o", "-O", "-X", "-H", "-d", "-w", "-u", "-A", "-e", "-T", "-P", "-m", "--output", "--header", "--data",
    "--user", "--request", "--output-document", "--max-time", "--connect-timeout", "--retry", "--user-agent",
)  # fmt: skip
_HOST = re.compile(r"^(?:[a-z]+://)?(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?::\d+)?(?:/\S*)?$|^[a-z]+://\S+$")


def remote_fetches(source: str) -> list[str]:
    """The non-loopback hosts a test fetches with ``curl`` or ``wget`` (``os.popen("curl example.com")``).

    Shell or Python text alike: the first operand after the command, quotes and list commas aside. Such
    a test needs the network at check time, which no backend here gives the checker.
    """
    return [t for t in _fetch_targets(source) if _HOST.match(t) and not _LOOPBACK_URL.match(t)]


def _fetch_targets(source: str) -> list[str]:
    """What each ``curl``/``wget`` in ``source`` fetches: its first operand, quotes and list commas aside."""
    targets: list[str] = []
    for match in _FETCH.finditer(source):
        words = [w for w in re.split(r"""[\s'",\[\]]+""", match.group(1)) if w]
        operands = _packages(words, value_options=_FETCH_VALUE_OPTIONS)
        if operands:
            targets.append(operands[0].rstrip(");"))
    return targets


_NETWORK_OR_SOCKET = re.compile(
    r"^\s*(?:import\s+[^\n#]*\b|from\s+)(?:requests|httpx|aiohttp|urllib3?|urllib\.request|http\.client|websockets?"
    r"|grpc|socket)\b",
    re.MULTILINE,
)
_LOOPBACK_PORT = re.compile(
    r"""(?:https?://)?(?:localhost|127\.0\.0\.1|0\.0\.0\.0):\d+|['"](?:localhost|127\.0\.0\.1)['"]\s*,\s*[1-9]\d*"""
)
# What starts a process (a server) from a test or checker: a test that starts its own server needs none of the agent's.
_STARTS_PROCESS = re.compile(
    r"\b(?:subprocess|Popen|os\.system|os\.spawn\w*|os\.fork|multiprocessing|threading|HTTPServer|socketserver"
    r"|start_server|uvicorn|TestClient|nohup|systemctl|service\s+\S+\s+(?:re)?start)\b|&\s*$",
    re.MULTILINE,
)


def loopback_servers(python_source: str) -> list[str]:
    """The loopback servers a Python test queries.

    ``host:port`` in a file importing an HTTP client or ``socket``, and what a ``curl``/``wget`` it runs
    fetches from a loopback address. A test that queries one talks to a server some process must keep
    running through the check.
    """
    fetched = [t for t in _fetch_targets(python_source) if _LOOPBACK_URL.match(t)]
    if not _NETWORK_OR_SOCKET.search(python_source):
        return fetched
    return _LOOPBACK_PORT.findall(python_source) + fetched


def starts_process(text: str) -> bool:
    """Whether a test file or checker script starts a process (a server of its own, a background job)."""
    return bool(_STARTS_PROCESS.search(text))


def _downloads(words: list[str]) -> bool:
    """Whether a command fetches from the network: a download tool, unless every URL it names is loopback."""
    if not words or _is_echo(words) or not _DOWNLOADS.search(" " + " ".join(words)):
        return False
    head = words[0].rsplit("/", 1)[-1]
    if head in ("curl", "wget"):
        targets = [w for w in words[1:] if not w.startswith("-") and ("://" in w or "." in w or ":" in w)]
        return not targets or not all(_LOOPBACK_URL.match(t) for t in targets)
    return True


def _is_pytest_package(requirement: str) -> bool:
    name = re.split(r"[=<>~!\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")
    return name == "pytest" or name in _REPORT_PLUGINS or name in _INSTALLER_TOOLS


def _quote(word: str) -> str:
    """A word for the shell again: variables (``$TEST_DIR``) stay expandable, anything else odd is quoted."""
    if re.fullmatch(r"[\w@%+=:,./${}-]+", word):
        return word
    return shlex.quote(word)


def _is_echo(words: list[str]) -> bool:
    return bool(words) and words[0] in ("echo", "printf", "#")


def _redirections(body: str) -> str:
    """Trailing output redirections and pipes of a pytest line (``| tee log``, ``> out 2>&1``), kept as written."""
    match = re.search(r"\s((?:\d?>>?|\|)\s*.*)$", body.strip())
    return " " + match.group(1) if match else ""
