"""One container per episode, commands streamed through one long-lived ``exec -i bash`` session.

The session runs a small bash driver (:data:`DRIVER`) that reads one request per line and answers
one line per request, so a command costs a few forks inside the container instead of a new
``exec`` (130-290 ms each here). Each command runs as ``bash -c COMMAND`` in a process group of its
own under ``timeout`` (at the wall clock the whole group is killed: TERM, then KILL a second
later), with its stdout and stderr read through FIFOs to their end (past the cap a stream's start and
end are kept, its middle dropped; the command runs on). Background jobs (``&``) outlive their command,
as in the sandbox.

Before the checker runs (:meth:`ContainerEpisode.begin_check`), the episode's container is stopped
(every process in it is killed through its cgroup), its file system is committed to an image, and
the checker runs in a fresh container of that image, as root, with the tests copied in only then.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import posixpath
import re
import selectors
import subprocess
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from gem_core.errors import CheckPhaseError, ToolError
from gem_terminal.container.runtime import Runtime
from gem_tool_python.episode import CommandResult, EpisodeBudget, EpisodeConfig, keep_ends

__all__ = [
    "CALL_BOUNDS_S",
    "DRIVER",
    "OWNER_LABEL",
    "ContainerEpisode",
    "IntegrityReport",
    "integrity_violations",
    "solution_programs",
]

#: The session's driver. A request is a header line and raw bytes: ``RUN id timeout_s cap n_cmd n_cwd n_env``
#: then the command, its folder (empty: the session's) and ``b64(NUL-separated KEY=VALUE)`` (empty: none);
#: ``PUT id mode n_path n_data`` then the path and ``b64(data)``. Answer: ``GEM id exit_code b64(out) b64(err)
#: b64(out's end) b64(err's end)`` (the ends: the last half cap of a stream that ran past the cap).
#: Few forks per command (they cost milliseconds each in a loaded container): FIFOs are made 32 at a time.
DRIVER = r"""
set +e
gem_lc=${LC_ALL-__unset__}
LC_ALL=C
d=$(mktemp -d /tmp/.gem-session.XXXXXX) || exit 90
mkfifo "$d/tick" && exec 9<>"$d/tick"
# The first part of a stream: dd of one byte at a time reads no further than asked and writes what it
# read at once (a reader stopped while a background job holds the pipe keeps what came before). A dd
# without status=none (busybox) gets head, whose buffer such a stop loses.
if dd bs=1 count=1 status=none </dev/null 2>/dev/null; then
  first() { dd bs=1 count="$1" status=none; }
else
  first() { head -c "$1"; }
fi
n=0
while IFS=' ' read -r op id a b c e; do
  cmd= cwd= envb=
  if [ "$op" = PUT ]; then
    IFS= read -r -N "$b" p; IFS= read -r -N "$c" data
    mkdir -p "${p%/*}/" && printf %s "$data" | base64 -d > "$p" && chmod "$a" "$p"
    printf 'GEM %s %s  \n' "$id" "$?"
    continue
  fi
  [ "$op" = RUN ] || { printf 'GEM %s 99  \n' "$id"; continue; }
  [ "$c" -gt 0 ] && IFS= read -r -N "$c" cmd
  [ "$e" -gt 0 ] && IFS= read -r -N "$e" cwd
  read -r envb
  if [ $((n % 32)) = 0 ]; then
    rm -f "$d"/[oeOEPQ]*
    fifos=(); for i in $(seq "$n" $((n + 31))); do fifos+=("$d/o$i" "$d/e$i"); done
    mkfifo "${fifos[@]}"
  fi
  # Each stream's reader: its first cap+1 bytes (`first`, above), then the last half cap of the rest.
  # It reads to the end, so a command writing past the cap runs on. Its own process group (set -m), so
  # stopping it stops dd too.
  set -m
  { first $((b + 1)) > "$d/O$n"; exec tail -c $((b - b / 2)) > "$d/P$n"; } < "$d/o$n" & ho=$!
  { first $((b + 1)) > "$d/E$n"; exec tail -c $((b - b / 2)) > "$d/Q$n"; } < "$d/e$n" & he=$!
  set +m
  (
    if [ "$gem_lc" = __unset__ ]; then unset LC_ALL; else LC_ALL=$gem_lc; fi
    [ -n "$cwd" ] && { cd "$cwd" 2>/dev/null || cd /; }
    if [ -n "$envb" ]; then
      mapfile -d '' envs < <(printf %s "$envb" | base64 -d)
      exec env "${envs[@]}" timeout -k 1 "$a" bash -c "$cmd"
    fi
    exec timeout -k 1 "$a" bash -c "$cmd"
  ) > "$d/o$n" 2> "$d/e$n" < /dev/null &
  wait $!; rc=$?
  # Output still in the pipes: give the readers a moment, then stop them (a background job that
  # still holds the pipe gets SIGPIPE on its next write, as under `docker exec`).
  for _ in {1..40}; do
    kill -0 $ho 2>/dev/null || kill -0 $he 2>/dev/null || break
    read -t 0.005 -u 9
  done
  kill -- -$ho -$he 2>/dev/null; wait $ho $he 2>/dev/null
  printf 'GEM %s %s ' "$id" "$rc"; base64 -w0 "$d/O$n"; printf ' '; base64 -w0 "$d/E$n"; printf ' '
  base64 -w0 "$d/P$n" 2>/dev/null; printf ' '; base64 -w0 "$d/Q$n" 2>/dev/null; printf '\n'
  n=$((n + 1))
done
"""

#: The bound of each runtime call gem makes, by verb (seconds): a call past it is killed and raises.
CALL_BOUNDS_S = {
    "run": 120.0,
    "stop": 60.0,
    "diff": 60.0,
    "commit": 300.0,
    "rm": 60.0,
    "exec": 30.0,
    "inspect": 30.0,
    "session": 30.0,
}

#: The label naming the process (its pid) that started an episode's containers.
OWNER_LABEL = "gem-terminal.owner"
#: pid 1 of an episode's container.
INIT = 'trap "exit 0" TERM INT; while :; do sleep 86400 & wait $!; done'

#: Paths an agent that is root in its container could change to subvert the checker: the system's
#: programs and libraries, the loader's configuration, Python's and pip's/uv's system configuration.
PROTECTED = (
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local/lib",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.cache",
    "/etc/pip.conf",
    "/etc/xdg/pip",
    "/etc/uv",
    "/etc/python3",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/environment",
    # git's templates (hooks, info/exclude) for a new repository; the checker's git uses none, but other
    # gits (a public task's checker calling /usr/bin/git init) would
    "/usr/share/git-core",
    # The checker's pytest and requirements (installed into the image for the check, $GEM_PYTEST).
    "/opt/gem",
    # The checker's own folders: made afresh for the check, but a task's probe runs before that, in the
    # agent's container (a python3 the agent left in /checker/bin printed what the probe looks for).
    "/checker",
    "/gem-checker-home",
    # pytest looks for its configuration from the tests' folder (/tests) up to /: a /pytest.ini makes /
    # the root folder, and a /conftest.py there then runs inside the checker.
    "/conftest.py",
    "/pytest.ini",
    "/pyproject.toml",
    "/setup.cfg",
    "/tox.ini",
)
#: Under these, new files are allowed when they shadow no program of the image (an agent may be asked
#: to install a script there; ``python3`` or ``pytest`` in it would run in place of the image's).
ADDABLE = ("/usr/local/bin", "/usr/local/sbin")
#: Names a checker calls that an image may lack (installed at check time): never addable either.
CHECKER_TOOLS = frozenset({"pytest", "py.test", "uv", "uvx", "pip", "pip3", "python", "python3"})


#: What the check phase's container gets first: the checker's folders as the sandbox has them (``/checker/home``
#: root's alone; ``/checker/work``, where copies the agent's code runs on go, readable by ``as-agent``;
#: ``/checker/bin`` first on its PATH), ``/tests`` for root alone, and ``as-agent``, which runs
#: the agent's code in a child process as ``nobody``: it cannot read ``/tests`` (the agent was root, so its own
#: uid could), nor write what root owns; ``no_new_privs``, so a set-user-id program or one with file
#: capabilities that the agent (root) left does not make it root again.
CHECK_PREPARE = (
    b"rm -rf /gem-checker-home /checker /tests && mkdir -m 700 /gem-checker-home /tests"
    b" && mkdir -p -m 700 /checker/home && mkdir -m 755 /checker/work /checker/bin"
    b" && printf '%s\\n' '#!/bin/sh'"
    b" 'command -v setpriv >/dev/null || { echo as-agent: no setpriv in the image >&2; exit 126; }'"
    b" 'exec setpriv --no-new-privs --reuid=65534 --regid=65534 --clear-groups -- \"$@\"' > /checker/bin/as-agent"
    b" && chmod 755 /checker/bin/as-agent"
    # Harbor's verifier writes /logs/verifier (a fresh folder under Harbor): whatever the agent left at
    # /logs (a file, a link, a folder named reward.txt) must not make the reward files unwritable.
    b" && { { [ -d /logs ] && [ ! -L /logs ]; } || rm -rf /logs; } && rm -rf /logs/verifier"
    b" && mkdir -p -m 755 /logs/verifier"
)
#: Environment of every command in the check phase, under the checker's own.
CHECK_ENV = {
    "HOME": "/gem-checker-home",
    "XDG_CONFIG_HOME": "/gem-checker-home/.config",
    "PIP_CONFIG_FILE": "/dev/null",
    "UV_NO_CONFIG": "1",
    "PYTHONNOUSERSITE": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "TEST_DIR": "/tests",
}


@dataclass
class IntegrityReport:
    """What the agent changed among the checker's own files (``podman diff``/``docker diff``)."""

    violations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No protected path changed."""
        return not self.violations


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") or path.startswith(root + ".") for root in roots)


#: A program in :data:`ADDABLE` that a shell text writes: a compiler's or downloader's ``-o PATH``, a
#: redirection or ``tee`` to it, or the destination (last word) of ``cp``, ``mv``, ``install``, ``ln``.
_NAME = r"[A-Za-z0-9_.+-]+"
_WRITES = (
    re.compile(rf"(?:\s-o\s*|--output[= ]|>>?\s*|\btee\s+(?:-a\s+)?)/usr/local/s?bin/({_NAME})(?![\w/.+-])"),
    re.compile(rf"\b(?:cp|mv|install|ln)\s[^\n;&|]*\s/usr/local/s?bin/({_NAME})\s*(?:$|[;&|)])", re.MULTILINE),
)


def _is_checker_tool(name: str) -> bool:
    return name in CHECKER_TOOLS or name.startswith("python")


def solution_programs(solution: str) -> frozenset[str]:
    """The programs in ``/usr/local/bin`` or ``/usr/local/sbin`` that a task's reference solution writes.

    They are the agent's work product, not the checker's tools: a task that builds its program into
    ``/usr/local/bin`` in its image and asks the agent to rebuild it there (its reference does:
    ``go build -o /usr/local/bin/NAME``) is checked on what the agent built. A checker tool's name
    (``python*``, ``pytest``, ``uv``, ``pip``...) is never one of them.
    """
    found = {match.group(1) for pattern in _WRITES for match in pattern.finditer(solution)}
    return frozenset(name for name in found if not _is_checker_tool(name))


def integrity_violations(
    diff_lines: list[str],
    image_programs: set[str],
    path_folders: tuple[str, ...] = (),
    tool_links: dict[str, str] | None = None,
    agent_programs: frozenset[str] = frozenset(),
) -> list[str]:
    """The changes of a container diff (``C|A|D path`` lines) that touch :data:`PROTECTED` paths.

    A ``C`` on a folder that holds another change is the folder's own time stamp and is ignored; an
    ``A`` under :data:`ADDABLE` is allowed unless its name is one of ``image_programs``. In the other
    folders of the image's ``PATH`` (``path_folders``; the checker runs with that ``PATH``), a checker
    tool (:data:`CHECKER_TOOLS`, ``python*``) added, changed or removed, or an added program named like
    one of ``image_programs``, is a violation too. ``tool_links`` (a checker tool's link in a protected
    folder -> where it points, :func:`_tool_link_targets`): a change of a target outside the protected
    paths, or a folder on its way added or deleted, is one (``/usr/local/bin/uv`` linked to root's
    ``~/.local/bin/uv`` runs whatever the agent put there). ``agent_programs``: programs directly in
    :data:`ADDABLE` that the task's reference solution writes (:func:`solution_programs`); their change is
    the agent's work, not a violation (a checker tool's name never is one).
    """
    entries = []
    for line in diff_lines:
        kind, _, path = line.strip().partition(" ")
        if kind in ("A", "C", "D") and path.startswith("/"):
            entries.append((kind, path.rstrip("/") or "/"))
    paths = [p for _, p in entries]
    bad = []
    extra = tuple(f.rstrip("/") for f in path_folders if f.startswith("/") and not _under(f, PROTECTED))
    for kind, path in entries:
        parent, _, name = path.rpartition("/")
        if parent in extra and (
            name in CHECKER_TOOLS or name.startswith("python") or (kind == "A" and name in image_programs)
        ):
            bad.append(f"{kind} {path}")
            continue
        if not _under(path, PROTECTED):
            continue
        if parent in ADDABLE and name in agent_programs and not _is_checker_tool(name):
            continue  # the program the task asks the agent to build there
        if kind == "C" and any(other.startswith(path + "/") for other in paths):
            continue  # a folder whose content changed
        if kind == "A" and _under(path, ADDABLE):
            shadows = name in image_programs or _is_checker_tool(name)
            if parent in ADDABLE and not shadows:
                continue
            if parent not in ADDABLE and any(path.startswith(root + "/") for root in ADDABLE):
                # a new folder inside /usr/local/bin is no program on PATH
                continue
        bad.append(f"{kind} {path}")
    for link, target in (tool_links or {}).items():
        for kind, path in entries:
            if path == target or (kind in ("A", "D") and target.startswith(path + "/")):
                bad.append(f"{kind} {path} (where {link} points)")
    return bad


#: Lists ``link<TAB>target`` for each link named like a checker tool in the protected program folders
#: (``readlink`` without ``-f``: each hop the agent could have redirected is itself a path in the diff).
_TOOL_LINKS = (
    "for f in /bin/* /sbin/* /usr/bin/* /usr/sbin/* /usr/local/bin/* /usr/local/sbin/*; do"
    ' [ -L "$f" ] || continue; n=${f##*/}; case "$n" in python*|' + "|".join(sorted(CHECKER_TOOLS)) + ")"
    ' t=$(readlink "$f") && printf \'%s\\t%s\\n\' "$f" "$t";; esac; done; exit 0'
)


def _tool_link_targets(listing: str) -> dict[str, str]:
    """``link -> target`` (absolute, normalised) from :data:`_TOOL_LINKS`'s output, outside the protected paths.

    A target inside :data:`PROTECTED` is checked as a protected path already.
    """
    links = {}
    for line in listing.splitlines():
        link, sep, target = line.partition("\t")
        if not sep or not link.startswith("/") or not target:
            continue
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
        if not _under(resolved, PROTECTED):
            links[link] = resolved
    return links


class _AgentDisk(ToolError):
    """A runtime call of the check failed while the agent's files took more than its disk allowance."""


def _changed(violations: list[str]) -> str:
    return f"the checker did not run: the agent changed files the checker relies on ({', '.join(violations[:8])})"


def _verb(exc: BaseException) -> str:
    """The runtime verb a ``Runtime.call`` error names (``podman stop ...``: ``stop``), else ``session``."""
    words = str(exc).split(" ")
    return words[1] if len(words) > 1 and words[0] in ("podman", "docker") else "session"


#: Episodes not closed yet: their containers are removed when the interpreter exits.
_live: weakref.WeakSet[ContainerEpisode] = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    for episode in list(_live):
        with contextlib.suppress(Exception):
            episode.close()


class ContainerEpisode:
    """One episode's container, with the same interface as :class:`gem_tool_python.episode.EpisodeSandbox`.

    Args:
        runtime: The container runtime.
        image: The task's image.
        config: The episode's limits (``command_timeout_s``, ``episode_timeout_s``, ``max_output_bytes``,
            ``max_episode_output_bytes``, ``episode_memory_mb`` (``--memory`` and ``--memory-swap``: no
            swap), ``max_procs``, ``env`` apply; ``disk_mb`` is the agent's disk allowance, see
            :meth:`begin_check`).
        workdir: Where commands start (default: the image's ``WORKDIR``).
        agent_user: Run the agent's commands as this user (default: the image's ``USER``).
        checker_network: Give the checker's container the runtime's default network (the agent never has one).
        cpus: CPUs of each of the episode's containers (``--cpus``; ``None``: no limit).
        agent_programs: Programs in ``/usr/local/bin`` the agent may change: the task's reference solution
            writes them (:func:`solution_programs`).

    Raises:
        ToolError: the container or its session did not start.
    """

    def __init__(
        self,
        runtime: Runtime,
        image: str,
        config: EpisodeConfig,
        *,
        workdir: str | None = None,
        agent_user: str | None = None,
        checker_network: bool = False,
        cpus: float | None = None,
        agent_programs: frozenset[str] = frozenset(),
    ) -> None:
        self.runtime, self.image, self.config = runtime, image, config
        self.agent_programs = agent_programs
        self.agent_user, self.checker_network, self.cpus = agent_user, checker_network, cpus
        self._lock = threading.Lock()
        self.budget = EpisodeBudget(config)
        self._closed = False
        self._removed = False
        self._checking = False
        #: Why the checker must not run, by the agent's doing (``None``: it may); set by :meth:`begin_check`.
        self.refusal: str | None = None
        self._check_image: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self.integrity = IntegrityReport()
        #: The image's ``ENV`` (``KEY: value``): what the agent's commands start with, as the checker's.
        self.image_env: dict[str, str] = {}
        started = time.monotonic()
        self.name = f"gem-ep-{uuid.uuid4().hex[:12]}"
        _live.add(self)
        try:
            self._container = self._start(self.name, image, network=False)
            image_workdir, self.image_env = self._image_config(image)
            self.workdir = workdir or image_workdir
            self._open_session(agent_user)
        except BaseException:
            self.close()
            raise
        self.setup_s = time.monotonic() - started

    # --- container and session ---------------------------------------------------------------------

    def _start(self, name: str, image: str, *, network: bool) -> str:
        c = self.config
        # The owner's pid tells apart the episodes of several processes on one runtime (a killed
        # process's leftovers: `ps -a --filter label=gem-terminal.owner=PID`); commit copies it to the checker's image.
        args = [
            "run",
            "-d",
            "--name",
            name,
            "--label",
            "gem-terminal=episode",
            "--label",
            f"{OWNER_LABEL}={os.getpid()}",
        ]
        args += ["-t"]
        args += [] if network else ["--network=none"]
        # --memory-swap equal to --memory: no swap, as the sandbox's cgroup (memory.memsw / swap.max 0).
        args += ["--memory", f"{c.episode_memory_mb}m", "--memory-swap", f"{c.episode_memory_mb}m"]
        args += ["--pids-limit", str(c.max_procs)]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        for key, value in c.env.items():
            args += ["-e", f"{key}={value}"]
        # pid 1 must reap: processes the agent orphans are adopted by it (`sleep infinity` would leave
        # zombies that count against the pids limit). bash does, and stops at SIGTERM.
        args += ["--entrypoint", "bash", image, "-c", INIT]
        self.runtime.call(*args, timeout_s=CALL_BOUNDS_S["run"])
        return name

    def _image_config(self, image: str) -> tuple[str, dict[str, str]]:
        """The image's ``WORKDIR`` (``/`` when unset) and ``ENV``, which its containers' processes get."""
        done = self.runtime.call(
            "image", "inspect", "--format", "{{json .Config}}", image, timeout_s=CALL_BOUNDS_S["inspect"]
        )
        try:
            config = json.loads(done.stdout.decode()) or {}
            env = dict(str(item).partition("=")[::2] for item in config.get("Env") or [])
            workdir = str(config.get("WorkingDir") or "/")
        except (ValueError, AttributeError) as exc:
            answer = done.stdout[:200]
            raise ToolError(f"{self.runtime.kind} image inspect {image}: unreadable answer {answer!r}") from exc
        return workdir, env

    def _open_session(self, user: str | None) -> None:
        args = ["exec", "-i"] + (["--user", user] if user else []) + [self._container, "bash", "-c", DRIVER]
        self._proc = subprocess.Popen(
            self.runtime.command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.runtime.env,
        )
        self._buffer = b""
        reply = self._request("RUN", ["5", "256", "0", "0"], b"\n", CALL_BOUNDS_S["session"])
        if reply is None:
            raise ToolError(f"{self.runtime.kind}: the episode's shell session in {self._container} did not start")

    def _request(self, op: str, fields: list[str], payload: bytes, wait_s: float) -> list[str] | None:
        """Send one request (header, payload); the answer's fields, or ``None`` when the session is gone or silent."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return None
        self._next_id += 1
        ident = str(self._next_id)
        try:
            proc.stdin.write((" ".join([op, ident, *fields]) + "\n").encode() + payload)
            proc.stdin.flush()
        except (OSError, ValueError):
            return None
        deadline = time.monotonic() + wait_s
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self._buffer:
                    line, _, self._buffer = self._buffer.partition(b"\n")
                    parts = line.decode("ascii", "replace").split(" ")
                    if len(parts) in (5, 7) and parts[0] == "GEM" and parts[1] == ident:
                        return parts
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    return None
                if not chunk:
                    return None
                self._buffer += chunk

    # --- the EpisodeSandbox interface --------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether no command can run now (closed, or the session ended; the check phase opens a new one)."""
        return self._closed

    @property
    def removed(self) -> bool:
        """Whether :meth:`close` ended the episode (its containers are gone: nothing is left to check)."""
        return self._removed

    @property
    def remaining_s(self) -> float:
        """Command time left to the episode."""
        return self.budget.remaining_s

    @property
    def spent(self) -> str | None:
        """Which of the episode's budgets is spent (``time``, ``output``), ``closed``, or ``None``."""
        return self.budget.spent(self._closed)

    def run(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        charge_episode: bool = True,
        checker: bool = False,
    ) -> CommandResult:
        """Run ``command`` with ``bash -c`` in the container; never raises for what the command does.

        ``checker=True`` first ends the agent's part of the episode (:meth:`begin_check`). Arguments as
        :meth:`gem_tool_python.episode.EpisodeSandbox.run`.
        """
        if checker and not self._checking:
            self.begin_check()
        with self._lock:
            if checker and self.refusal is not None:
                return CommandResult("exit", exit_code=1, error=self.refusal)
            if self._closed:
                return CommandResult("closed", error="the episode's container is closed")
            refused = self.budget.refusal() if charge_episode else None
            if refused is not None:
                return refused
            command = command.encode("utf-8", "replace").decode()
            if "\x00" in command or "\x00" in (cwd or ""):
                return CommandResult("exit", exit_code=2, error="the command or its folder holds a NUL character")
            budget = max(self.budget.allowance(timeout_s or self.config.command_timeout_s, charge_episode), 0.01)
            # In the check phase: a HOME of its own (the agent's dotfiles, `~/.local/bin/env` and the like
            # are not read) and no pip/uv configuration (one could point the checker's installs at a fake).
            variables = {**(CHECK_ENV if self._checking else {}), **(env or {})}
            blob = b"".join(f"{k}={v}".encode("utf-8", "replace") + b"\0" for k, v in variables.items())
            cap = self.config.max_output_bytes
            started = time.monotonic()
            raw_command = command.encode()
            folder = cwd or (self.workdir if self._checking else "")
            raw_cwd = folder.encode("utf-8", "replace")
            reply = self._request(
                "RUN",
                [f"{budget:.3f}", str(cap), str(len(raw_command)), str(len(raw_cwd))],
                raw_command + raw_cwd + base64.b64encode(blob) + b"\n",
                budget + 15.0,
            )
            elapsed = time.monotonic() - started
            if reply is None:
                if charge_episode:
                    self.budget.charge(elapsed, 0)
                self._kill_session()
                self._closed = True
                if self._checking and self._oom_killed():
                    # Only code the check ran (the agent's, through as-agent) fills the container's memory.
                    return CommandResult(
                        "killed", elapsed_s=elapsed, error="the checker's container ran out of memory (OOM killer)"
                    )
                return CommandResult("closed", elapsed_s=elapsed, error="the episode's container session ended")
            code = int(reply[2]) if reply[2].lstrip("-").isdigit() else None
            out, err, out_end, err_end = (base64.b64decode(field) for field in (*reply[3:7], "", "")[:4])
            result = CommandResult("ok" if code == 0 else "exit", exit_code=code, elapsed_s=elapsed)
            if code in (124, 137) and elapsed >= budget - 0.05:
                result.status, result.exit_code = "timeout", None
                result.error = f"the command ran past {budget:g} s; its process group was killed"
            elif code == 137:
                result.error = "killed by SIGKILL (the episode's memory or process limit?)"
            result.stdout = keep_ends(out, out_end, cap).decode("utf-8", "replace")
            result.stderr = keep_ends(err, err_end, cap).decode("utf-8", "replace")
            if charge_episode:
                self.budget.charge(elapsed, len(result.stdout) + len(result.stderr))
            return result

    def write_file(self, path: str, data: bytes, *, mode: int = 0o644, owned_by_agent: bool = False) -> None:
        """Write a file in the container (as the session's user). Writing under ``/tests`` starts the check.

        Raises:
            ToolError: the episode is closed or the write failed.
        """
        if not path.startswith("/"):
            raise ToolError(f"write_file needs an absolute path inside the container, not {path!r}")
        if (path == "/tests" or path.startswith("/tests/")) and not self._checking:
            self.begin_check()  # tests enter only once the agent's processes are gone
        with self._lock:
            if self.refusal is not None:
                raise ToolError(f"{path} was not written: the checker will not run ({self.refusal})")
            if self._closed:
                raise ToolError(f"the episode's container is closed; {path} was not written")
            raw_path, encoded = path.encode("utf-8", "replace"), base64.b64encode(data)
            header = [f"{mode:o}", str(len(raw_path)), str(len(encoded))]
            reply = self._request("PUT", header, raw_path + encoded, CALL_BOUNDS_S["session"])
            if reply is None or reply[2] != "0":
                raise ToolError(f"could not write {path} in the container")

    def probe(self, script: str, *, timeout_s: float, env: dict[str, str] | None = None) -> CommandResult:
        """Run a task's probe (``tests/gem-probe.sh``) while the agent's processes still run, before the check.

        It runs as root in an ``exec`` of its own (not the agent's session), with the check phase's
        environment, and is not charged to the episode. Never raises for what the script does.

        Raises:
            ToolError: the client ran past ``timeout_s`` plus the ``exec`` bound, or was killed.
        """
        with self._lock:
            if self._closed or self._checking:
                return CommandResult("closed", error="the episode's agent part is over")
            args = ["exec", "--user", "0", "--workdir", self.workdir]
            for key, value in {**CHECK_ENV, "HOME": "/root", **(env or {})}.items():
                args += ["--env", f"{key}={value}"]
            args += [self._container, "timeout", "-k", "1", f"{timeout_s:g}", "bash", "-c", script]
            started = time.monotonic()
            done = self.runtime.call(*args, timeout_s=timeout_s + CALL_BOUNDS_S["exec"], check=False)
            if done.returncode < 0:  # the client itself was killed: the script's exit code is unknown
                raise ToolError(f"{self.runtime.kind} exec (the probe) was killed by signal {-done.returncode}")
            cap = self.config.max_output_bytes
            return CommandResult(
                "ok" if done.returncode == 0 else "exit",
                stdout=done.stdout[:cap].decode("utf-8", "replace"),
                stderr=done.stderr[:cap].decode("utf-8", "replace"),
                exit_code=done.returncode,
                elapsed_s=time.monotonic() - started,
            )

    def begin_check(self) -> str | None:
        """End the agent's part: kill all its processes, then continue in a fresh container of its files.

        The episode's container is stopped (the runtime kills every process in its cgroup), its
        changes are checked against :data:`PROTECTED` (:attr:`integrity`), it is committed to an image
        and removed; a new container of that image (root session, network only with
        ``checker_network``, ``HOME`` an empty folder) serves the checker. This works after the agent's
        session ended too (the agent killed its shell or its container's init): its files are checked.

        Returns:
            Why the checker must not run, by the agent's doing (also in :attr:`refusal`), else ``None``:
            it changed files the checker relies on; the checker's container does not start from its
            files while it does from the task's image (checked twice, so a passing fault is not the
            agent's); or a runtime call failed while its files took more than its disk allowance
            (``config.disk_mb``).

        Raises:
            CheckPhaseError: gem or the runtime failed (a call past its bound or exiting non-zero, the
                checker's container not starting from the task's image either, the episode closed by
                :meth:`close`): the check could not be made, and there is no reward.
        """
        with self._lock:
            if self._checking:
                return self.refusal
            if self._removed:
                raise self._phase_error(
                    "end-agent", "close", "the episode was closed (its containers removed) before the check"
                )
            self._checking = True
            self._kill_session()
            try:
                self.refusal = self._enter_check()
            except _AgentDisk as exc:
                self.refusal = f"the checker did not run: {exc}"
            except ToolError as exc:
                self._closed = True
                self._remove()
                if isinstance(exc, CheckPhaseError):
                    raise
                raise self._phase_error("checker-start", "session", str(exc)) from exc
            if self.refusal is not None:
                self._closed = True
                self._kill_session()
            return self.refusal

    def _enter_check(self) -> str | None:
        """:meth:`begin_check`'s steps; the agent's refusal, or ``None``."""
        agent = self._container
        self._call("end-agent", "stop", "-t", "0", agent)
        diff = self._call("end-agent", "diff", agent, disk_check=agent).stdout.decode("utf-8", "replace")
        path = tuple({**self.image_env, **self.config.env}.get("PATH", "").split(":"))
        # What is wrong whatever the image's programs are: refused before a container of the agent's
        # files is started (a deleted `bash` would keep it from starting, which is the agent's doing).
        early = integrity_violations(diff.splitlines(), set(), path, agent_programs=self.agent_programs)
        if early:
            self.integrity = IntegrityReport(early)
            return _changed(early)
        self._check_image = f"localhost/gem-check-{self.name[7:]}:latest"
        self._call("end-agent", "commit", agent, self._check_image, disk_check=agent)
        self._call("end-agent", "rm", "-f", agent)
        try:
            programs, links = self._open_checker(self._check_image)
        except ToolError as first:
            self._drop_checker()
            try:  # the same steps on the task's own image: do they fail without the agent's files too?
                self._open_checker(self.image, self.name + "-pristine")
            except ToolError as pristine:
                raise self._phase_error(
                    "checker-start",
                    _verb(first),
                    f"{first}; from the task's own image too: {pristine}",
                ) from pristine
            finally:
                self._drop_checker(self.name + "-pristine")
            try:
                programs, links = self._open_checker(self._check_image)
            except ToolError as again:
                return (
                    "the checker's container does not start from the agent's files (twice), while it does from"
                    f" the task's image: {again}"
                )
        violations = integrity_violations(diff.splitlines(), programs, path, links, self.agent_programs)
        self.integrity = IntegrityReport(violations)
        self._closed = False  # the checker's session is open
        return _changed(violations) if violations else None

    def _open_checker(self, image: str, name: str | None = None) -> tuple[set[str], dict[str, str]]:
        """Start the checker's container of ``image`` with its root session and folders.

        Returns:
            The image's programs, and its checker tools' links out of the protected paths
            (:func:`_tool_link_targets`).

        Raises:
            ToolError: a step failed (the caller tells the agent's doing from the runtime's).
        """
        self._container = self._start(name or self.name + "-check", image, network=self.checker_network)
        # The image's programs, as the container sees them (its own /usr/bin and friends), then the links
        # named like the checker's tools (one exec: a NUL between the two listings).
        listing = self.runtime.call(
            "exec",
            self._container,
            "sh",
            "-c",
            f"ls /bin /sbin /usr/bin /usr/sbin 2>/dev/null; printf '\\0'; {_TOOL_LINKS}",
            timeout_s=CALL_BOUNDS_S["exec"],
        )
        names, _, links = listing.stdout.decode("utf-8", "replace").partition("\0")
        programs = {line for line in names.split() if not line.endswith(":")}
        self._open_session("0")
        prepare = CHECK_PREPARE
        reply = self._request("RUN", ["10", "256", str(len(prepare)), "0"], prepare + b"\n", CALL_BOUNDS_S["session"])
        if reply is None:
            raise ToolError(f"{self.runtime.kind}: the checker's session in {self._container} ended while preparing")
        if reply[2] != "0":
            raise ToolError(f"could not prepare the checker's folders in {self._container} (exit {reply[2]})")
        return programs, _tool_link_targets(links)

    def _drop_checker(self, name: str | None = None) -> None:
        """Remove a checker's container that did not start right (best effort: :meth:`close` tries again)."""
        self._kill_session()
        self.runtime.call("rm", "-f", name or self.name + "-check", timeout_s=CALL_BOUNDS_S["rm"], check=False)

    def _call(self, phase: str, verb: str, *args: str, disk_check: str | None = None) -> Any:
        """One runtime call of the check phase; its failure is a :class:`CheckPhaseError`.

        With ``disk_check`` (the agent's container), a failure while the agent's files take more than
        its disk allowance is the agent's doing instead: :class:`_AgentDisk`.
        """
        try:
            return self.runtime.call(verb, *args, timeout_s=CALL_BOUNDS_S[verb])
        except ToolError as exc:
            used = self._layer_mb(disk_check) if disk_check is not None else None
            if used is not None and used > self.config.disk_mb:
                raise _AgentDisk(
                    f"the agent's files take {used} MiB, more than its disk allowance of {self.config.disk_mb}"
                    f" MiB, and `{self.runtime.kind} {verb}` failed on them: {exc}"
                ) from exc
            raise self._phase_error(phase, verb, str(exc)) from exc

    def _layer_mb(self, container: str) -> int | None:
        """MiB the container's writable layer holds (``None``: the runtime did not say)."""
        try:
            done = self.runtime.call(
                "container", "inspect", "--size", "--format", "{{.SizeRw}}", container, timeout_s=CALL_BOUNDS_S["diff"]
            )
            return int(done.stdout.decode().strip()) >> 20
        except (ToolError, ValueError):
            return None

    def _oom_killed(self) -> bool:
        """Whether the current container's memory limit killed a process of it (the runtime's record)."""
        try:
            done = self.runtime.call(
                "container",
                "inspect",
                "--format",
                "{{.State.OOMKilled}}",
                self._container,
                timeout_s=CALL_BOUNDS_S["inspect"],
                check=False,
            )
        except ToolError:  # no answer: not known to be the memory limit, so the session's end is gem's side
            return False
        return done.returncode == 0 and done.stdout.decode().strip() == "true"

    def _phase_error(self, phase: str, call: str, what: str) -> CheckPhaseError:
        kind = self.runtime.kind
        return CheckPhaseError(
            f"the check of episode {self.name} could not be made ({phase}, `{kind} {call}`): {what}. This is gem's or"
            f" the runtime's failure, not the agent's: the episode has no reward (not 0). Check that `{kind} ps`"
            " answers and the host's disk and load; the calls' bounds are"
            " gem_terminal.container.session.CALL_BOUNDS_S",
            phase=phase,
            call=f"{kind} {call}",
        )

    def _kill_session(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()

    def _remove(self) -> None:
        # `sleep infinity` as pid 1 ignores SIGTERM: remove at once (podman: -t 0; docker kills with -f).
        force = ["-f", "-t", "0"] if self.runtime.kind == "podman" else ["-f"]
        for name in (self.name, self.name + "-check", self.name + "-pristine"):
            with contextlib.suppress(ToolError):  # a runtime that no longer answers: nothing more to do here
                self.runtime.call("rm", *force, name, timeout_s=CALL_BOUNDS_S["rm"], check=False)
        if self._check_image is not None:
            with contextlib.suppress(ToolError):
                self.runtime.call("rmi", "-f", self._check_image, timeout_s=CALL_BOUNDS_S["rm"], check=False)
            self._check_image = None

    def close(self) -> None:
        """End the episode: the session, the containers and the checker's image go. Idempotent."""
        already = self._closed and self._proc is None and getattr(self, "_removed", False)
        self._closed = True
        if already:
            return
        self._removed = True
        self._kill_session()
        if hasattr(self, "name"):
            self._remove()

    def __enter__(self) -> ContainerEpisode:
        return self

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not getattr(self, "_removed", False):
                self.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
