"""Which container runtime runs episodes here: Docker where a daemon answers, else Podman with runc.

Both are driven through their command-line clients (the same verbs: ``build``, ``run``, ``exec``,
``commit``, ``rm``...). Podman is run as Debian bookworm packages it (4.3.1) works on hosts with hybrid
cgroups: with runc instead of its default crun (crun refuses hybrid cgroups), with its own
``containers.conf`` (``default_ulimits`` at most the host's hard limits: ``nofile=20000`` here) given
through ``CONTAINERS_CONF``, and its storage named by ``--root``/``--runroot`` flags (a custom
``CONTAINERS_STORAGE_CONF`` made every ``run --rm`` wait 20 s for conmon here).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gem_core.errors import ToolError, ToolTimeout

__all__ = ["Runtime", "RuntimeKind", "detect_runtime", "present_runtimes", "state_dir"]

RuntimeKind = Literal["podman", "docker"]


def state_dir() -> Path:
    """Where gem keeps Podman's storage and its config (``$GEM_CONTAINER_HOME``, default ``/var/lib/gem-terminal``).

    Images built there (the base images, each task's image) stay cached across runs.
    """
    default = "/var/lib/gem-terminal" if os.geteuid() == 0 else str(Path.home() / ".cache" / "gem-terminal")
    return Path(os.environ.get("GEM_CONTAINER_HOME", default))


@dataclass(frozen=True)
class Runtime:
    """A container runtime's client with the flags and environment gem runs it with.

    Attributes:
        kind: ``podman`` or ``docker``.
        argv: The client and its global flags.
        env: The client's environment.
    """

    kind: RuntimeKind
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def command(self, *args: str) -> list[str]:
        """The full command line for ``args``."""
        return [*self.argv, *args]

    def call(
        self, *args: str, timeout_s: float = 120.0, input_bytes: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one client command, bounded by ``timeout_s``.

        The client runs in a session of its own, killed as a group at the bound (a hung client's
        children could otherwise hold its pipes open past it).

        Raises:
            ToolTimeout: it ran past ``timeout_s``.
            ToolError: (with ``check``) it exited non-zero or was killed by a signal: the message has its stderr.
        """
        process = subprocess.Popen(
            self.command(*args),
            stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(input_bytes, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise ToolTimeout(f"{self.kind} {' '.join(args[:3])}: no answer in {timeout_s:g} s") from exc
        done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        if check and done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip()[-1500:]
            how = f"exit {done.returncode}" if done.returncode > 0 else f"killed by signal {-done.returncode}"
            raise ToolError(f"{self.kind} {' '.join(args[:3])} failed ({how}): {tail}")
        return done

    def image_exists(self, tag: str) -> bool:
        """Whether ``tag`` is in the runtime's local image store."""
        return self.call("image", "inspect", tag, timeout_s=30.0, check=False).returncode == 0


def _podman(home: Path) -> Runtime:
    home.mkdir(parents=True, exist_ok=True)
    # The hard limit of the host caps what a container may ask for (no CAP_SYS_RESOURCE in many VMs).
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 20000 if nofile == resource.RLIM_INFINITY else min(nofile, 1 << 20)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 4096 if nproc == resource.RLIM_INFINITY else min(nproc, 4096)
    conf = home / "containers.conf"
    text = (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    if not conf.exists() or conf.read_text() != text:
        conf.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("CONTAINERS_STORAGE_CONF",)}
    env["CONTAINERS_CONF"] = str(conf)
    argv = (
        shutil.which("podman") or "podman",
        "--root",
        str(home / "storage"),
        "--runroot",
        str(home / "run"),
        "--storage-driver",
        "overlay",
        "--runtime",
        shutil.which("runc") or "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--events-backend",
        "file",
    )
    return Runtime("podman", argv, env)


def _docker_works() -> tuple[bool, str]:
    client = shutil.which("docker")
    if client is None:
        return False, "no docker client on PATH"
    try:
        done = subprocess.run(
            [client, "version", "--format", "{{.Server.Version}}"], capture_output=True, timeout=10, check=False
        )
    except subprocess.TimeoutExpired:
        return False, "the docker daemon did not answer in 10 s"
    if done.returncode != 0:
        return False, "no docker daemon answers (" + done.stderr.decode("utf-8", "replace").strip()[:200] + ")"
    return True, ""


def detect_runtime(preference: Literal["auto", "podman", "docker"] = "auto") -> Runtime:
    """The runtime to use: Docker where its daemon answers, else Podman with runc (``auto``), or the one named.

    Raises:
        ToolError: none is usable; the message says what was tried and what to install.
    """
    reasons = []
    if preference in ("auto", "docker"):
        works, why = _docker_works()
        if works:
            return Runtime("docker", (shutil.which("docker") or "docker",), dict(os.environ))
        reasons.append(f"docker: {why}")
    if preference in ("auto", "podman"):
        missing = [name for name in ("podman", "runc") if shutil.which(name) is None]
        if not missing:
            return _podman(state_dir() / "podman")
        reasons.append(f"podman: {' and '.join(missing)} not on PATH")
    raise ToolError(
        "no container runtime: "
        + "; ".join(reasons)
        + " (start a Docker daemon, or install podman and runc: apt-get install podman runc mmdebstrap)"
    )


def present_runtimes() -> list[RuntimeKind]:
    """The runtimes usable here, in ``auto``'s order: Docker where its daemon answers, Podman with runc."""
    kinds: list[RuntimeKind] = ["docker", "podman"]
    found = []
    for kind in kinds:
        try:
            detect_runtime(kind)
        except ToolError:
            continue
        found.append(kind)
    return found
