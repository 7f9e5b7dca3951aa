"""The episode sandbox: state across turns, a fresh root per episode, hostile commands, nothing left after close()."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from gem_tool_python import episode as episode_module
from gem_tool_python.episode import (
    OUTPUT_CUT,
    EpisodeConfig,
    EpisodeSandbox,
    episodes_available,
    prepare_layer,
    processes_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.errors import ToolError

USABLE, WHY = episodes_available()
pytestmark = [
    pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}"),
    # these tests assert that no process of the episodes' shared uid is left: under pytest-xdist another
    # worker's episode would be one, so they all run on one worker
    pytest.mark.xdist_group("episode-uid"),
]

# A uid of this test run's own: the leak checks look for its processes machine-wide, where another
# suite's episodes (the terminal env's, under the default uid) may be running at the same time.
RUN_UID = 1_400_100_000 + os.getpid() % 1_000_000
LIMITS = {
    "command_timeout_s": 5.0,
    "max_procs": 32,
    "max_output_bytes": 4096,
    "disk_mb": 32,
    "max_file_mb": 8,
    "uid": RUN_UID,
}


def assert_nothing_left(sandbox: EpisodeSandbox, group: str | None) -> None:
    """No process of the episode's uid, no mount or folder of its scratch, no cgroup."""
    assert processes_of(sandbox.config.uid) == []
    assert processes_of(sandbox.config.checker) == []
    assert not Path(sandbox._scratch).exists()
    assert sandbox._scratch not in Path("/proc/self/mountinfo").read_text()
    if group is not None and sandbox._groups is not None:
        assert all(not (parent / group).exists() for parent in sandbox._groups.parents.values())


@pytest.fixture
def layer(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    (source / "src").mkdir(parents=True)
    (source / "data.txt").write_text("original\n")
    (source / "src" / "main.py").write_text("print('hi')\n")
    return prepare_layer(source, tmp_path / "layer", uid=RUN_UID)


def test_files_and_processes_persist_across_commands(layer: Path) -> None:
    with EpisodeSandbox([layer], **LIMITS) as sandbox:
        assert sandbox.run("pwd").stdout == "/app\n"
        assert sandbox.run("echo more >> data.txt && cd src && echo x > new.txt").ok
        assert sandbox.run("cat data.txt src/new.txt").stdout == "original\nmore\nx\n"
        started = sandbox.run("sleep 300 & echo $! > /tmp/pid")
        assert started.ok
        alive = sandbox.run("kill -0 $(cat /tmp/pid) && echo alive")
        assert alive.stdout == "alive\n"
        assert sandbox.run("python3 src/main.py").stdout == "hi\n"


@pytest.mark.parametrize(
    "command",
    [
        "mkdir -p /tmp/out && mv data.txt /tmp/out/ && cat /tmp/out/data.txt",
        "mv src/main.py main.py && cat main.py",
        "mkdir dest && mv src dest/ && cat dest/src/main.py",
        "ln data.txt src/linked.txt && cat src/linked.txt",
        # rename(2) itself: mv falls back to copying on EXDEV, programs (pip's wheel builds) do not
        "python3 -c \"import os; os.mkdir('out'); os.rename('src/main.py', 'out/main.py')\" && cat out/main.py",
    ],
    ids=["file-to-another-mount", "file-up-a-folder", "folder-into-another", "hard-link-across", "rename-syscall"],
)
def test_files_move_and_link_across_folders(layer: Path, command: str) -> None:
    # Landlock refuses renames and links into another folder (EXDEV) unless its domain allows "refer" (ABI 2)
    with EpisodeSandbox([layer], **LIMITS) as sandbox:
        result = sandbox.run(command)
        assert result.ok, result.stderr
        assert result.stdout in ("original\n", "print('hi')\n")


def test_each_episode_starts_from_the_layer_and_the_layer_is_untouched(layer: Path) -> None:
    with EpisodeSandbox([layer], **LIMITS) as first:
        assert first.run("echo changed > data.txt && rm src/main.py && touch extra").ok
    with EpisodeSandbox([layer], **LIMITS) as second:
        assert second.run("cat data.txt; ls src; ls extra 2>&1 || true").stdout.startswith("original\nmain.py\n")
    assert (layer / "data.txt").read_text() == "original\n"
    assert sorted(p.name for p in layer.iterdir()) == ["data.txt", "src"]


def test_write_file_puts_root_owned_files_the_agent_can_read(layer: Path) -> None:
    with EpisodeSandbox([layer], **LIMITS) as sandbox:
        sandbox.write_file("/srv/check.sh", b"echo checked\n" * 20_000)  # several messages
        result = sandbox.run("bash /srv/check.sh | wc -l; stat -c %U /srv/check.sh; echo x >> /srv/check.sh")
        assert result.stdout.startswith("20000\nroot\n")
        assert "Permission denied" in result.stderr
        with pytest.raises(ToolError, match="absolute path"):
            sandbox.write_file("relative", b"")


@pytest.mark.parametrize(
    ("command", "status", "error"),
    [
        pytest.param("sleep 60", "timeout", "ran past", id="hang"),
        pytest.param("yes", "timeout", "ran past", id="endless-output"),  # read and dropped to its timeout
        # In the background: it may hit the limit only after its command returned, then the next one says so.
        pytest.param(":(){ :|:& };:", "killed-or-next", "hit the limit of 32", id="fork-bomb"),
        pytest.param("f(){ f | f; }; f", "killed", "hit the limit of 32", id="fork-bomb-foreground"),
        pytest.param("head -c 20M /dev/zero > big", "killed", "SIGXFSZ", id="file-too-big"),
        pytest.param(
            "for i in 1 2 3 4 5; do head -c 7M /dev/zero > f$i || exit 9; done", "exit", None, id="fill-the-disk"
        ),
        pytest.param("kill -9 1", "exit", None, id="kill-init"),
        pytest.param("kill -9 -1", "exit", None, id="kill-everything"),
        pytest.param(
            "python3 -c 'import os; os.kill(os.getppid(), 9)'; echo never", "killed", "SIGKILL", id="kill-the-shell"
        ),
        pytest.param("python3 -c 'import os; os.kill(os.getppid(), 9)'", "exit", None, id="kill-init-from-python"),
    ],
)
def test_hostile_command_ends_only_its_own_turn(layer: Path, command: str, status: str, error: str | None) -> None:
    with EpisodeSandbox([layer], **{**LIMITS, "command_timeout_s": 2.0}) as sandbox:
        group = sandbox._group_name
        assert sandbox.run("echo before > mark").ok
        result = sandbox.run(command)
        if status == "killed-or-next":  # a slow machine: the limit is hit (and said) during a later command
            for _ in range(20):
                if result.error is not None and "hit the limit" in result.error:
                    break
                result = sandbox.run("sleep 0.1")
            status = result.status
        after = sandbox.run("rm -f big f1 f2 f3 f4 f5; cat mark")
        assert result.status == status, result
        if error is not None:
            assert result.error is not None and error in result.error
        assert after.status == "ok" and after.stdout == "before\n", after
    assert_nothing_left(sandbox, group)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_command_writing_past_the_cap_runs_to_its_end_and_keeps_both_ends(layer: Path, stream: str) -> None:
    # A build or a solution printing its progress must not die of it (a terminal never kills for output).
    redirect = "" if stream == "stdout" else " >&2"
    command = f"{{ echo first; seq 1 40000; echo last; }}{redirect}; echo done > finished; exit 3"
    with EpisodeSandbox([layer], **LIMITS) as sandbox:
        result = sandbox.run(command)
        assert (result.status, result.exit_code) == ("exit", 3), result
        text = getattr(result, stream)
        assert text.startswith("first\n1\n2\n") and text.endswith("40000\nlast\n")
        assert OUTPUT_CUT.format(cap=4096) in text and len(text) == 4096 + len(OUTPUT_CUT.format(cap=4096))
        assert sandbox.run("cat finished").stdout == "done\n"
        exact = sandbox.run("head -c 4096 /dev/zero | tr '\\0' a")  # at the cap: all of it, nothing cut
        assert exact.ok and exact.stdout == "a" * 4096


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("ls /work /root /proc/1/root/ 2>&1; cat /etc/shadow", id="host-paths"),
        pytest.param("mount -t tmpfs none /tmp", id="mount"),
        pytest.param("unshare -r true || unshare -m true", id="new-namespaces"),
        pytest.param("chroot / true", id="chroot"),
        pytest.param("touch /usr/evil /etc/evil /bin/evil", id="system-dirs"),
        pytest.param(
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)\"", id="network"
        ),
    ],
)
def test_escapes_fail(command: str) -> None:
    with EpisodeSandbox([], **LIMITS) as sandbox:
        result = sandbox.run(command)
        assert result.status == "exit", result
        for name in ("/usr/evil", "/etc/evil"):
            assert not Path(name).exists()
        assert "work" not in sandbox.run("ls /").stdout.split()


def test_background_processes_and_everything_else_go_at_close() -> None:
    sandbox = EpisodeSandbox([], **{**LIMITS, "uid": 1_400_000_077})
    group = sandbox._group_name
    result = sandbox.run(
        "setsid sleep 1000 & nohup sleep 999 >/dev/null 2>&1 & (sleep 998 &); "
        "python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(900)' & echo started"
    )
    assert result.stdout == "started\n"
    assert len(processes_of(1_400_000_077)) >= 4
    sandbox.close()
    sandbox.close()
    assert_nothing_left(sandbox, group)
    assert sandbox.run("true").status == "closed"


def test_a_close_whose_init_never_sees_it_still_ends_every_process_before_returning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stopped init stands for one starved on a loaded host: it does not read the socket's end in the
    # grace. The close must still return only once the namespace is empty (a close that killed the
    # keeper returned while init and the agent's processes were still dying, and a leak check found them).
    monkeypatch.setattr(episode_module, "CLOSE_GRACE_S", 0.2)
    sandbox = EpisodeSandbox([], **LIMITS)
    group = sandbox._group_name
    assert sandbox.run("sleep 1000 & setsid sleep 999 & echo started").stdout == "started\n"
    keeper = sandbox._keeper
    (init,) = (int(p) for p in Path(f"/proc/{keeper}/task/{keeper}/children").read_text().split())
    os.kill(init, signal.SIGSTOP)
    sandbox.close()
    assert_nothing_left(sandbox, group)
    assert not Path(f"/proc/{init}").exists()  # reaped by its keeper before the pipe closed


def test_episode_budgets_refuse_further_commands() -> None:
    with EpisodeSandbox([], **{**LIMITS, "episode_timeout_s": 1.0}) as sandbox:
        assert sandbox.run("sleep 5").status == "timeout"
        refused = sandbox.run("echo hi")
        assert refused.status == "episode_limit" and "command time" in (refused.error or "")
        assert sandbox.run("echo setup", charge_episode=False).stdout == "setup\n"
    with EpisodeSandbox([], **{**LIMITS, "max_episode_output_bytes": 300}) as sandbox:
        assert sandbox.run("head -c 400 /dev/zero | tr '\\0' x").ok
        assert sandbox.run("echo hi").status == "episode_limit"


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="disk_mb"):
        EpisodeConfig(disk_mb=0)


HOSTILE = [
    "sleep 30",
    "yes",
    ":(){ :|:& };:",
    "head -c 20M /dev/zero > big",
    "kill -9 -1",
    "sleep 500 &",
    "setsid sleep 500 &",
    "cat /dev/urandom | head -c 100000",
    "exit 3",
    "echo ok",
]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3))
def test_any_sequence_of_hostile_commands_leaves_the_episode_usable_and_nothing_after_close(
    commands: list[str],
) -> None:
    sandbox = EpisodeSandbox([], **{**LIMITS, "command_timeout_s": 1.0, "uid": 1_400_000_078})
    group = sandbox._group_name
    try:
        for command in commands:
            result = sandbox.run(command)
            assert result.status in ("ok", "exit", "timeout", "output_limit", "killed"), result
            assert len(result.stdout.encode()) <= 4096 * 4  # the cap, in characters of decoded text
            # the hostile commands get 1 s; the liveness check gets room for a loaded machine (it timed out at 1.1 s)
            check = sandbox.run("echo alive", timeout_s=30.0)
            assert check.stdout == "alive\n", (command, check)
    finally:
        sandbox.close()
    assert_nothing_left(sandbox, group)


def test_a_dead_fork_server_ends_its_episodes_cleanly_and_the_next_episode_starts_a_new_one() -> None:
    from gem_tool_python import episode

    sandbox = EpisodeSandbox([], **{**LIMITS, "uid": 1_400_000_079})
    group = sandbox._group_name
    assert sandbox.run("sleep 100 & echo started").ok
    server = episode._zygotes[0].process
    server.kill()
    server.wait()
    result = sandbox.run("echo hi")
    assert result.status == "closed", result
    sandbox.close()
    assert_nothing_left(sandbox, group)
    with EpisodeSandbox([], **LIMITS) as again:
        assert again.run("echo hi").stdout == "hi\n"


@pytest.mark.parametrize("name", ["a,b", "a:b", "missing"], ids=["comma", "colon", "missing"])
def test_a_layer_the_overlay_cannot_take_is_refused_with_the_reason(tmp_path: Path, name: str) -> None:
    layer = tmp_path / name
    if name != "missing":
        layer.mkdir()
    with pytest.raises(ToolError, match="must be a folder whose path has no"):
        EpisodeSandbox([layer], **LIMITS)


def test_binds_are_readable_and_read_only(tmp_path: Path) -> None:
    (tmp_path / "tool.txt").write_text("shared\n")
    tmp_path.chmod(0o755)  # a bind keeps the host's permissions: the sandbox uid must be able to read it
    with EpisodeSandbox([], **LIMITS, binds=((str(tmp_path), "/opt/tool"),)) as sandbox:
        assert sandbox.run("cat /opt/tool/tool.txt").stdout == "shared\n"
        assert "Read-only file system" in sandbox.run("echo x > /opt/tool/tool.txt").stderr
        assert sandbox.run("echo $A$B", env={"A": "per-", "B": "command"}).stdout == "per-command\n"
    with pytest.raises(ToolError, match="needs a host folder"):
        EpisodeSandbox([], binds=((str(tmp_path), "relative"),))


def test_episodes_outlive_the_thread_that_started_the_fork_server() -> None:
    import threading

    from gem_tool_python import episode

    episode._stop_zygote()
    episode._zygotes.clear()
    made: list[EpisodeSandbox] = []
    starter = threading.Thread(target=lambda: made.append(EpisodeSandbox([], **LIMITS)))
    starter.start()
    starter.join()
    with made[0] as sandbox:
        assert sandbox.run("sleep 0.3; echo still here").stdout == "still here\n"
        with EpisodeSandbox([], **LIMITS) as second:
            assert second.run("echo second").ok


def test_killing_the_host_process_ends_its_episodes_processes(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    uid = 1_400_000_081
    program = (
        "from gem_tool_python.episode import EpisodeSandbox\n"
        f"s = EpisodeSandbox([], uid={uid})\n"
        "assert s.run('setsid sleep 1000 & sleep 999 &').ok\n"
        "groups = [str(p / s._group_name) for p in s._groups.parents.values()] if s._groups else []\n"
        "print('ready', s._scratch, *groups, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    host = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        ready, scratch, *groups = host.stdout.readline().split()
        assert ready == "ready" and len(processes_of(uid)) >= 2
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
    deadline = time.monotonic() + 10
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(uid) == []
    # What stays (docs/terminal.md): the empty scratch folder and the empty cgroups; tidy them here.
    assert scratch not in Path("/proc/self/mountinfo").read_text()
    Path(scratch).rmdir()
    parts = [str(part) for group in groups for part in Path(group).iterdir() if part.is_dir()]
    for group in [*parts, *groups]:  # its parts (init, agent, checker) first
        # The kernel frees a cgroup some time after its last process is reaped (EBUSY until then).
        deadline = time.monotonic() + 30
        while True:
            try:
                Path(group).rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def test_a_server_started_in_one_command_answers_on_loopback_in_the_next() -> None:
    with EpisodeSandbox([], **LIMITS) as sandbox, EpisodeSandbox([], **LIMITS) as other:
        for box in (sandbox, other):  # the same port in two episodes: each has its own network namespace
            assert box.run("python3 -m http.server 8765 --bind 127.0.0.1 > /tmp/server.log 2>&1 &").ok
        fetch = (
            'python3 -c "import time, urllib.request\nfor _ in range(50):\n    try:\n'
            "        print(urllib.request.urlopen('http://127.0.0.1:8765/').status); break\n"
            '    except OSError: time.sleep(0.1)"'
        )
        assert sandbox.run(fetch).stdout == "200\n"
        assert other.run(fetch).stdout == "200\n"


#: What may be under way in another thread when ``close()`` comes: commands of each kind, and a write.
UNDER_WAY = {
    "hang": "sleep 60",
    "busy": "while :; do :; done",
    "flood": "yes | head -c 3000; sleep 60",
    "background-children": "sleep 300 & setsid sleep 300 & sleep 60",
    "write": None,
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(UNDER_WAY)), delay_s=st.sampled_from([0.0, 0.05, 0.3]))
def test_close_from_another_thread_ends_whatever_is_under_way_with_a_typed_result(kind: str, delay_s: float) -> None:
    """``run`` answers ``closed`` (``write_file`` a ToolError), never another exception, and nothing is left."""
    import threading
    import time

    # A uid of its own: episodes of other tests or processes (the default uid) cannot show up as leaks.
    sandbox = EpisodeSandbox(**{**LIMITS, "command_timeout_s": 30.0, "uid": 1_400_000_271})
    group = sandbox._group_name
    outcome: list[object] = []

    def under_way() -> None:
        try:
            command = UNDER_WAY[kind]
            if command is None:
                for _ in range(200):
                    sandbox.write_file("/tests/big", b"x" * 200_000)
            else:
                outcome.append(sandbox.run(command))
        except ToolError as exc:
            outcome.append(exc)
        except BaseException as exc:  # what the test is about: nothing else may escape
            outcome.append(("unexpected", repr(exc)))

    worker = threading.Thread(target=under_way)
    worker.start()
    time.sleep(delay_s)
    sandbox.close()
    worker.join(30)
    assert not worker.is_alive()
    (result,) = outcome if outcome else (None,)
    if kind == "write":
        assert result is None or isinstance(result, ToolError), result
    else:
        assert getattr(result, "status", None) == "closed", result
    assert sandbox.run("true").status == "closed"
    sandbox.close()  # twice: a no-op
    assert_nothing_left(sandbox, group)


#: A spy the agent leaves running: it waits for the checker's shell and tries to reach into it.
_SPY = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
attack = sys.argv[1]
deadline = time.time() + 20
while time.time() < deadline:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            line = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"CHECKER" + b"-MARK" in line:
            if attack == "ptrace":
                ok = libc.ptrace(16, int(pid), 0, 0) == 0  # PTRACE_ATTACH
            elif attack == "seize":
                ok = libc.ptrace(0x4206, int(pid), 0, 0) == 0  # PTRACE_SEIZE
            else:
                try:
                    os.close(os.open(f"/proc/{pid}/{attack}", os.O_RDWR if attack == "mem" else os.O_RDONLY))
                    ok = True
                except OSError:
                    ok = False
            open("/tmp/spy.log", "w").write("reached" if ok else "denied")
            sys.exit(0)
    time.sleep(0.01)
"""


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    attack=st.sampled_from(["ptrace", "seize", "mem", "environ"]),
    launch=st.sampled_from(["{} &", "setsid {} &", "( ( {} & ) & )", "nohup {} >/dev/null 2>&1 &"]),
    turns_before=st.integers(0, 2),
)
def test_nothing_the_agent_left_running_can_reach_into_the_checker(attack: str, launch: str, turns_before: int) -> None:
    """However the agent starts a process, it cannot ptrace the checker or open its memory or environment."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        assert sandbox.run(f"cat > /tmp/spy.py <<'EOF'\n{_SPY}\nEOF").ok
        assert sandbox.run(launch.format(f"python3 /tmp/spy.py {attack}")).ok
        for _ in range(turns_before):
            assert sandbox.run("true").ok
        checked = sandbox.run(
            ": CHECKER-MARK; for i in $(seq 100); do [ -e /tmp/spy.log ] && break; sleep 0.05; done", checker=True
        )
        assert checked.ok, checked
        assert sandbox.run("cat /tmp/spy.log").stdout == "denied"


#: Any code point, with the awkward ones (lone surrogates, NUL, quotes, "=") drawn often.
_ANY_CHAR = st.sampled_from(["\ud800", "\udfff", "\x00", "=", "'", '"', " ", "\n", "\x1b", "\u2028"]) | st.characters(
    min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()
)


def _any_text(max_size: int) -> st.SearchStrategy[str]:
    return st.lists(_ANY_CHAR, max_size=max_size).map("".join)  # st.text() would leave surrogates out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    command=_any_text(40),
    env=st.dictionaries(_any_text(4), _any_text(6), max_size=2),
    cwd=st.none() | _any_text(8),
)
def test_any_text_is_a_result_never_an_exception(command: str, env: dict[str, str], cwd: str | None) -> None:
    """Lone surrogates, NUL, odd variable names or folders: ``run`` answers with a result and the episode goes on."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        result = sandbox.run(command, env=env, cwd=cwd)
        assert result.status in ("ok", "exit", "killed", "timeout", "output_limit"), result
        assert result.ok or result.error or result.stderr or result.exit_code, result
        assert sandbox.run("echo still").stdout == "still\n"


#: Ways to leave processes behind: every one is a member of the agent's cgroup, which is what is killed.
LEAVERS = {
    "background": "sleep 1000 &",
    "setsid": "setsid sleep 1000 &",
    "nohup": "nohup sleep 1000 >/dev/null 2>&1 &",
    "double-fork": "( (sleep 1000 &) & )",
    "loop": "( while true; do sleep 0.05; done ) >/dev/null 2>&1 &",
    "respawner": "( while true; do (sleep 1000 &); sleep 0.01; done ) >/dev/null 2>&1 &",
    "tmux": "tmux new -d 'sleep 1000'",
    "many": "for i in $(seq 20); do setsid sleep 1000 & done",
}


@pytest.mark.parametrize("leave", LEAVERS.values(), ids=list(LEAVERS))
def test_end_agent_kills_every_process_the_agent_started(leave: str) -> None:
    """Through the agent's cgroup: none survives (also none of the uid machine-wide); later commands work."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        assert sandbox.run(leave).ok
        if sandbox.agent_processes() == -1:
            pytest.skip("no cgroup here: end_agent kills by uid inside the namespace")
        assert sandbox.agent_processes() > 0
        assert sandbox.end_agent() == 0
        assert sandbox.agent_processes() == 0
        assert processes_of(sandbox.config.uid) == []  # reaped too: the part's pids.current is 0
        checker = sandbox.run("ps -eo uid= | sort -u", checker=True)
        assert checker.stdout.split() == ["0", str(sandbox.config.checker)], checker
        assert sandbox.run("echo again").stdout == "again\n"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.lists(st.sampled_from(sorted(LEAVERS)), min_size=1, max_size=4), rounds=st.integers(1, 2))
def test_any_schedule_of_leftovers_is_gone_after_end_agent(schedule: list[str], rounds: int) -> None:
    """Leftovers started in any order, across turns, ended and started again: each end_agent leaves none."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        for _ in range(rounds):
            for name in schedule:
                assert sandbox.run(LEAVERS[name]).status in ("ok", "killed")  # killed: over max_procs together
            assert sandbox.end_agent() == 0
            assert sandbox.agent_processes() in (0, -1)
            assert processes_of(sandbox.config.uid) == []
            assert sandbox.run("echo next").stdout == "next\n"


def test_the_agent_sees_no_trace_of_the_tests_and_cannot_read_them() -> None:
    """No TEST_DIR or other hint in its environment; /tests (the checker's uid's alone) cannot be listed or read."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        sandbox.write_file("/tests/expected.txt", b"the answer\n")
        env = sandbox.run("env").stdout
        assert "test" not in env.lower(), env
        for command in ("ls /tests", "cat /tests/expected.txt", "stat /tests/expected.txt"):
            result = sandbox.run(command)
            assert result.status == "exit" and "Permission denied" in result.stderr, result
        checker = sandbox.run("id -u; cat /tests/expected.txt", checker=True)
        assert checker.stdout == f"{sandbox.config.checker}\nthe answer\n", checker
        assert sandbox.config.checker != sandbox.config.uid


def test_hand_over_gives_the_checker_the_agent_s_files_and_a_root_to_make_folders_in() -> None:
    """Work dir, home and /tmp files change hands; links are not followed; set-uid bits go; / is sticky."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        sandbox.write_file("/tests/expected.txt", b"the answer\n")
        made = sandbox.run(
            "mkdir -p deep/er && echo data > deep/er/f && echo mine > ~/notes && echo t > /tmp/t && "
            "ln -s /tests/expected.txt link && cp /bin/true suid && chmod 4755 suid && chmod 700 deep"
        )
        assert made.ok, made
        before = sandbox.run("echo x > /tests/../db; echo x > deep/er/f", checker=True)
        assert "Permission denied" in before.stderr, before
        assert sandbox.end_agent() == 0
        assert sandbox.hand_over_to_checker() is None
        checker = sandbox.config.checker
        after = sandbox.run(
            "echo x > deep/er/f && echo y > /home/agent/notes && echo z > /tmp/t && "
            "mkdir /db && echo w > /db/in && stat -c '%n %u %a' . deep deep/er/f link suid /home/agent/notes /tmp/t / "
            "/tests /tests/expected.txt && { rm -rf /checker 2>&1 | head -1; }",
            checker=True,
        )
        lines = after.stdout.splitlines()
        assert lines[:10] == [
            f". {checker} 755",
            f"deep {checker} 700",
            f"deep/er/f {checker} 644",
            f"link {checker} 777",  # the link itself: lchown, never its target
            f"suid {checker} 755",  # the kernel drops set-uid when a file changes hands
            f"/home/agent/notes {checker} 644",
            f"/tmp/t {checker} 644",
            "/ 0 1777",
            f"/tests {checker} 700",
            "/tests/expected.txt 0 644",
        ], after
        assert "Permission denied" in after.stdout  # sticky: root's /checker cannot be removed


def test_as_agent_runs_a_program_as_the_agent_for_the_checker() -> None:
    """Its uid, stdin/stdout/stderr, exit status and folder pass; it cannot read /tests; what it leaves dies."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        sandbox.write_file("/tests/expected.txt", b"secret\n")
        sandbox.serve_agent()
        as_agent = "/checker/bin/as-agent"
        assert sandbox.run(f"{as_agent} true").status == "exit"  # only the checker's uid may connect
        result = sandbox.run(
            f"cd /tmp && echo in | {as_agent} sh -c 'id -u; pwd; cat; cat /tests/expected.txt; exit 3'; "
            f"echo status $?; {as_agent} sh -c 'setsid sleep 1000 & echo left'; sleep 0.2; "
            f"ps -eo uid= | grep -c {sandbox.config.uid} || true",
            checker=True,
        )
        assert result.stdout == f"{sandbox.config.uid}\n/tmp\nin\nstatus 3\nleft\n0\n", result
        assert "Permission denied" in result.stderr


def test_a_checker_run_has_its_own_uid_and_no_agent_process_can_signal_it() -> None:
    # The agent's loop forks a hundred times a second: on a loaded 2-core host the checker's command may
    # take seconds to be scheduled, which is not what this test is about (LIMITS' 5 s bound once ran out).
    with EpisodeSandbox(**{**LIMITS, "command_timeout_s": 60.0}) as sandbox:
        assert sandbox.run("(while true; do kill -STOP -1 2>/dev/null; sleep 0.01; done) >/dev/null 2>&1 &").ok
        result = sandbox.run("sleep 0.3; id -u", checker=True)
        assert result.stdout == f"{sandbox.config.checker}\n", result


#: A limit the agent hits: it ends that command (``killed``, a failure, ``No space left``), never the episode.
LIMIT_HITS = {
    "250k-empty-files-in-tmp": "python3 -c \"\nfor i in range(250000): open(f'/tmp/f{i}', 'w').close()\"",
    "250k-empty-files-in-the-work-dir": "mkdir d && cd d && python3 -c \"\nfor i in range(250000): open(str(i), 'w')\"",
    "files-larger-than-the-memory": "for i in $(seq 40); do head -c 8M /dev/zero > /tmp/big$i || break; done",
    "memory-of-processes": "python3 -c 'b = [bytearray(32 << 20) for _ in range(12)]'",
    "memory-of-many-processes": (
        "for i in $(seq 6); do python3 -c 'import time; b = bytes(40 << 20); time.sleep(5)' & done"
    ),
    "fork-bomb": ":(){ :|:& };:",
    "many-ptys": "for i in $(seq 80); do script -qc 'sleep 5' /dev/null & done; wait",
    "many-folders": "mkdir -p $(seq -f '/tmp/d%g' 1 40000) 2>/dev/null; echo done",
}


@pytest.mark.parametrize("hit", LIMIT_HITS.values(), ids=list(LIMIT_HITS))
def test_a_limit_ends_the_command_never_the_episode(hit: str) -> None:
    """Under episode_memory_mb=128 (disk_mb 512): the episode's init lives and later commands work."""
    limits = {**LIMITS, "episode_memory_mb": 128, "disk_mb": 512, "memory_mb": 1024, "command_timeout_s": 30.0}
    with EpisodeSandbox(**limits) as sandbox:
        sandbox.run(hit)
        cleanup = "rm -rf /tmp/* /app/d; echo alive"
        first = sandbox.run(cleanup)
        if first.status == "killed" and "hit the limit" in (first.error or ""):
            # a hit in the background (the fork bomb's `:|:&`) may land after its command returned: the next
            # command says so and all the episode's processes are killed; the episode lives on
            first = sandbox.run(cleanup)
        for after in (first, sandbox.run(cleanup)):
            assert (after.status, after.stdout) == ("ok", "alive\n"), after
        assert not sandbox.closed


def test_a_pseudo_terminal_works_in_the_episode() -> None:
    """/dev/ptmx and a devpts of the episode's own: script and tmux run; the host's ptys are not there."""
    with EpisodeSandbox(**LIMITS) as sandbox:
        result = sandbox.run("script -qc 'tty; echo inside' /dev/null")
        assert result.ok and result.stdout.splitlines()[:2] == ["/dev/pts/0", "inside"], result
        assert sandbox.run("tmux new -d -s work 'echo hi > /tmp/from-tmux; sleep 100'").ok
        listed = sandbox.run("sleep 0.3; tmux ls; cat /tmp/from-tmux; ls /dev/pts")
        assert listed.ok and "work:" in listed.stdout and "hi" in listed.stdout, listed
        assert sandbox.run("tmux send-keys -t work 'exit' Enter").ok


def test_the_episode_budget_refuses_cuts_and_charges() -> None:
    """The budget every episode backend shares: commands get at most the time left, then are refused."""
    from gem_tool_python.episode import EpisodeBudget

    budget = EpisodeBudget(EpisodeConfig(episode_timeout_s=10, max_episode_output_bytes=300))
    assert (budget.allowance(30, True), budget.allowance(30, False), budget.spent(False)) == (10, 30, None)
    budget.charge(7.5, 200)
    assert budget.allowance(30, True) == 2.5 and budget.refusal() is None
    budget.charge(0.5, 100)
    refused = budget.refusal()
    assert budget.spent(False) == "output" and refused is not None and "300 bytes" in str(refused.error)
    budget.charge(5, 0)
    assert (budget.remaining_s, budget.spent(False), budget.spent(True)) == (0.0, "time", "closed")
    assert "10 s of command time" in str(budget.refusal().error)  # type: ignore[union-attr]


def test_hand_over_copies_up_a_layer_larger_than_the_disk_left(tmp_path: Path) -> None:
    """Files of the task's layer change hands by a copy into the tmpfs, which grows for them first."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "big.bin").write_bytes(os.urandom(3 << 20))
    layer = prepare_layer(source, tmp_path / "layer", RUN_UID)
    with EpisodeSandbox([layer], **{**LIMITS, "disk_mb": 2}) as sandbox:
        assert sandbox.run("head -c 1500000 /dev/zero > filler").ok  # most of the agent's 2 MB
        assert sandbox.end_agent() == 0
        assert sandbox.hand_over_to_checker() is None
        result = sandbox.run("stat -c '%u %s' big.bin && echo more >> big.bin", checker=True)
        assert result.ok and result.stdout == f"{sandbox.config.checker} {3 << 20}\n", result
