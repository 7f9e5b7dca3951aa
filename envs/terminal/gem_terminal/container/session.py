"""One container per episode, commands streamed through one long-lived ``exec -i bash`` session.

The session runs a small bash driver (:data:`DRIVER`) that reads one request per line and answers
one line per request, so a command costs a few forks inside the container instead of a new
``exec`` (130-290 ms each here). Each command runs as ``bash -c COMMAND`` in a process group of its
own under ``timeout`` (at the wall clock the whole group is killed: TERM, then KILL a second
later), with its stdout and stderr read through FIFOs by ``head -c`` (past the cap the reader exits
and the command gets SIGPIPE). Background jobs (``&``) outlive their command, as in the sandbox.

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
import selectors
import subprocess
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field

from gem_core.errors import ToolError
from gem_terminal.container.runtime import Runtime
from gem_tool_python.episode import CommandResult, EpisodeBudget, EpisodeConfig

__all__ = ["DRIVER", "OWNER_LABEL", "ContainerEpisode", "IntegrityReport", "integrity_violations"]

#: The session's driver. A request is a header line and raw bytes: ``RUN id timeout_s cap n_cmd n_cwd n_env``
#: then the command, its folder (empty: the session's) and ``b64(NUL-separated KEY=VALUE)`` (empty: none);
#: ``PUT id mode n_path n_data`` then the path and ``b64(data)``. Answer: ``GEM id exit_code b64(out) b64(err)``.
#: Few forks per command (they cost milliseconds each in a loaded container): FIFOs are made 32 at a time.
DRIVER = r"""
set +e
gem_lc=${LC_ALL-__unset__}
LC_ALL=C
d=$(mktemp -d /tmp/.gem-session.XXXXXX) || exit 90
mkfifo "$d/tick" && exec 9<>"$d/tick"
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
    rm -f "$d"/[oeOE]*
    fifos=(); for i in $(seq "$n" $((n + 31))); do fifos+=("$d/o$i" "$d/e$i"); done
    mkfifo "${fifos[@]}"
  fi
  head -c $((b + 1)) < "$d/o$n" > "$d/O$n" & ho=$!
  head -c $((b + 1)) < "$d/e$n" > "$d/E$n" & he=$!
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
  kill $ho $he 2>/dev/null; wait $ho $he 2>/dev/null
  printf 'GEM %s %s ' "$id" "$rc"; base64 -w0 "$d/O$n"; printf ' '; base64 -w0 "$d/E$n"; printf '\n'
  n=$((n + 1))
done
"""

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


def integrity_violations(
    diff_lines: list[str], image_programs: set[str], path_folders: tuple[str, ...] = ()
) -> list[str]:
    """The changes of a container diff (``C|A|D path`` lines) that touch :data:`PROTECTED` paths.

    A ``C`` on a folder that holds another change is the folder's own time stamp and is ignored; an
    ``A`` under :data:`ADDABLE` is allowed unless its name is one of ``image_programs``. In the other
    folders of the image's ``PATH`` (``path_folders``; the checker runs with that ``PATH``), a checker
    tool (:data:`CHECKER_TOOLS`, ``python*``) added, changed or removed, or an added program named like
    one of ``image_programs``, is a violation too.
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
        if kind == "C" and any(other.startswith(path + "/") for other in paths):
            continue  # a folder whose content changed
        if kind == "A" and _under(path, ADDABLE):
            shadows = name in image_programs or name in CHECKER_TOOLS or name.startswith("python")
            if parent in ADDABLE and not shadows:
                continue
            if parent not in ADDABLE and any(path.startswith(root + "/") for root in ADDABLE):
                # a new folder inside /usr/local/bin is no program on PATH
                continue
        bad.append(f"{kind} {path}")
    return bad


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
            ``max_episode_output_bytes``, ``episode_memory_mb``, ``max_procs``, ``env`` apply).
        workdir: Where commands start (default: the image's ``WORKDIR``).
        agent_user: Run the agent's commands as this user (default: the image's ``USER``).
        checker_network: Give the checker's container the runtime's default network (the agent never has one).

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
    ) -> None:
        self.runtime, self.image, self.config = runtime, image, config
        self.agent_user, self.checker_network = agent_user, checker_network
        self._lock = threading.Lock()
        self.budget = EpisodeBudget(config)
        self._closed = False
        self._checking = False
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
        args += ["--memory", f"{c.episode_memory_mb}m", "--pids-limit", str(c.max_procs)]
        for key, value in c.env.items():
            args += ["-e", f"{key}={value}"]
        # pid 1 must reap: processes the agent orphans are adopted by it (`sleep infinity` would leave
        # zombies that count against the pids limit). bash does, and stops at SIGTERM.
        args += ["--entrypoint", "bash", image, "-c", INIT]
        self.runtime.call(*args, timeout_s=120.0)
        return name

    def _image_config(self, image: str) -> tuple[str, dict[str, str]]:
        """The image's ``WORKDIR`` (``/`` when unset) and ``ENV``, which its containers' processes get."""
        done = self.runtime.call("image", "inspect", "--format", "{{json .Config}}", image, timeout_s=30.0)
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
        reply = self._request("RUN", ["5", "256", "0", "0"], b"\n", 30.0)
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
                    if len(parts) == 5 and parts[0] == "GEM" and parts[1] == ident:
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
        """Whether the episode is over (closed, or its session ended)."""
        return self._closed

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
            if self._closed:
                return CommandResult("closed", error="the episode's container is closed")
            if checker and not self.integrity.clean:
                listed = ", ".join(self.integrity.violations[:8])
                return CommandResult(
                    "exit",
                    exit_code=1,
                    error=f"the checker did not run: the agent changed files the checker relies on ({listed})",
                )
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
                return CommandResult("closed", elapsed_s=elapsed, error="the episode's container session ended")
            code = int(reply[2]) if reply[2].lstrip("-").isdigit() else None
            out, err = base64.b64decode(reply[3]), base64.b64decode(reply[4])
            result = CommandResult("ok" if code == 0 else "exit", exit_code=code, elapsed_s=elapsed)
            if code in (124, 137) and elapsed >= budget - 0.05:
                result.status, result.exit_code = "timeout", None
                result.error = f"the command ran past {budget:g} s; its process group was killed"
            elif len(out) > cap or len(err) > cap:
                result.status, result.exit_code = "output_limit", None
                result.error = f"the command wrote more than {cap} bytes; it was stopped"
            elif code == 137:
                result.error = "killed by SIGKILL (the episode's memory or process limit?)"
            result.stdout = out[:cap].decode("utf-8", "replace")
            result.stderr = err[:cap].decode("utf-8", "replace")
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
            if self._closed:
                raise ToolError(f"the episode's container is closed; {path} was not written")
            raw_path, encoded = path.encode("utf-8", "replace"), base64.b64encode(data)
            reply = self._request("PUT", [f"{mode:o}", str(len(raw_path)), str(len(encoded))], raw_path + encoded, 60.0)
            if reply is None or reply[2] != "0":
                raise ToolError(f"could not write {path} in the container")

    def probe(self, script: str, *, timeout_s: float, env: dict[str, str] | None = None) -> CommandResult:
        """Run a task's probe (``tests/gem-probe.sh``) while the agent's processes still run, before the check.

        It runs as root in an ``exec`` of its own (not the agent's session), with the check phase's
        environment, and is not charged to the episode. Never raises for what the script does.
        """
        with self._lock:
            if self._closed or self._checking:
                return CommandResult("closed", error="the episode's agent part is over")
            args = ["exec", "--user", "0", "--workdir", self.workdir]
            for key, value in {**CHECK_ENV, "HOME": "/root", **(env or {})}.items():
                args += ["--env", f"{key}={value}"]
            args += [self._container, "timeout", "-k", "1", f"{timeout_s:g}", "bash", "-c", script]
            started = time.monotonic()
            done = self.runtime.call(*args, timeout_s=timeout_s + 30.0, check=False)
            cap = self.config.max_output_bytes
            return CommandResult(
                "ok" if done.returncode == 0 else "exit",
                stdout=done.stdout[:cap].decode("utf-8", "replace"),
                stderr=done.stderr[:cap].decode("utf-8", "replace"),
                exit_code=done.returncode,
                elapsed_s=time.monotonic() - started,
            )

    def begin_check(self) -> None:
        """End the agent's part: kill all its processes, then continue in a fresh container of its files.

        The episode's container is stopped (the runtime kills every process in its cgroup), its
        changes are checked against :data:`PROTECTED` (:attr:`integrity`), it is committed to an image
        and removed; a new container of that image (root session, network only with
        ``checker_network``, ``HOME`` an empty folder) serves the checker.
        """
        with self._lock:
            if self._checking or self._closed:
                return
            self._checking = True
            self._kill_session()
            try:
                self.runtime.call("stop", "-t", "0", self._container, timeout_s=60.0)
                diff = self.runtime.call("diff", self._container, timeout_s=60.0).stdout.decode("utf-8", "replace")
                self._check_image = f"localhost/gem-check-{self.name[7:]}:latest"
                self.runtime.call("commit", self._container, self._check_image, timeout_s=300.0)
                self.runtime.call("rm", "-f", self._container, timeout_s=60.0)
                self._container = self._start(self.name + "-check", self._check_image, network=self.checker_network)
                programs = self._image_programs()
                path = {**self.image_env, **self.config.env}.get("PATH", "")
                violations = integrity_violations(diff.splitlines(), programs, tuple(path.split(":")))
                self.integrity = IntegrityReport(violations)
                self._open_session("0")
                prepare = CHECK_PREPARE
                reply = self._request("RUN", ["10", "256", str(len(prepare)), "0"], prepare + b"\n", 30.0)
                if reply is None or reply[2] != "0":
                    raise ToolError("could not prepare the checker's home folder")
            except ToolError:
                self._closed = True
                self._remove()
                raise

    def _image_programs(self) -> set[str]:
        # The image's programs, as the committed container sees them (its own /usr/bin and friends).
        done = self.runtime.call(
            "exec",
            self._container,
            "sh",
            "-c",
            "ls /bin /sbin /usr/bin /usr/sbin 2>/dev/null",
            timeout_s=30.0,
            check=False,
        )
        return {line for line in done.stdout.decode("utf-8", "replace").split() if line and not line.endswith(":")}

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
        for name in (self.name, self.name + "-check"):
            self.runtime.call("rm", *force, name, timeout_s=60.0, check=False)
        if self._check_image is not None:
            self.runtime.call("rmi", "-f", self._check_image, timeout_s=60.0, check=False)
            self._check_image = None

    def close(self) -> None:
        """End the episode: the session, the containers and the checker's image go. Idempotent."""
        already = self._closed and self._proc is None and getattr(self, "_removed", False)
        self._closed = True
        if already:
            return
        self._kill_session()
        if hasattr(self, "name"):
            self._remove()
        self._removed = True

    def __enter__(self) -> ContainerEpisode:
        return self

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not getattr(self, "_removed", False):
                self.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
