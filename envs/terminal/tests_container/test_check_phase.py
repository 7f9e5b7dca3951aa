"""The check phase on a real runtime: what gem or the runtime fails at raises CheckPhaseError, never a reward.

Faults are injected by a shim in front of the runtime's client (a real ``docker``/``podman`` does the rest):
at a chosen call of the check phase it exits non-zero, hangs past the call's bound, or is killed. What the
agent causes (it kills its own shell, breaks what the checker's container needs, writes past its disk
allowance) stays the task's reward.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.errors import CheckPhaseError
from gem_terminal.container import backend as container_backend
from gem_terminal.container import session
from gem_terminal.container.backend import ContainerConfig
from gem_terminal.container.runtime import Runtime
from gem_terminal.env import TerminalEnv

#: A Harbor task whose check is cheap (no pytest): the reward is whether /app/out.txt says "done".
TASK_TOML = """version = "1.0"
[verifier]
timeout_sec = 60.0
[agent]
timeout_sec = 120.0
[environment]
cpus = 1
memory_mb = 256
"""
TEST_SH = """#!/bin/bash
reward=0
[ "$(cat /app/out.txt 2>/dev/null)" = done ] && reward=1
echo $reward > /logs/verifier/reward.txt
"""
SHIM = r"""#!/bin/bash
# Injects a fault at the runtime client's calls that match $GEM_SHIM_DIR/rule: "REGEX<TAB>NTH<TAB>MODE"
# (the NTH matching call, 0: every one; MODE exit:CODE, hang or kill). Other calls run the real client.
rule=$GEM_SHIM_DIR/rule
if [ -f "$rule" ]; then
  IFS=$'\t' read -r regex nth mode < "$rule"
  args="${*:$((GEM_SHIM_SKIP + 1))}"
  if [[ $args =~ $regex ]]; then
    count=$(( $(cat "$GEM_SHIM_DIR/count" 2>/dev/null || echo 0) + 1 ))
    echo "$count" > "$GEM_SHIM_DIR/count"
    if [ "$nth" = 0 ] || [ "$nth" = "$count" ]; then
      echo "$args" >> "$GEM_SHIM_DIR/hits"
      case $mode in
        exit:*) echo "shim: injected failure" >&2; exit "${mode#exit:}" ;;
        hang) exec sleep 3600 ;;
        kill) kill -9 $$ ;;
      esac
    fi
  fi
fi
exec "$@"
"""

#: The check phase's runtime calls (the agent's container: stop, diff, commit, rm; the checker's: run, the
#: listing of its programs, its session) and the probe's exec beside the agent. A fault of the checker's
#: container that only its agent-made image meets (not the task's image) is the agent's doing by design.
CALLS = {
    "probe": ("^exec --user 0 ", "exec"),
    "stop": ("^stop ", "stop"),
    "diff": ("^diff ", "diff"),
    "commit": ("^commit ", "commit"),
    "rm": ("^rm -f gem-ep-[0-9a-f]+$", "rm"),
    "run": ("^run ", "run"),
    "list": ("^exec gem-ep-[0-9a-f]+-[a-z]+ sh", "exec"),
    "session": ("^exec -i --user 0 ", "session"),
}


class Faults:
    """The shim's rule: which call fails, how; armed only for the check (the episode starts normally)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def arm(self, call: str, nth: int, mode: str) -> None:
        (self.folder / "count").unlink(missing_ok=True)
        (self.folder / "hits").unlink(missing_ok=True)
        (self.folder / "rule").write_text(f"{CALLS[call][0]}\t{nth}\t{mode}\n")

    def disarm(self) -> None:
        (self.folder / "rule").unlink(missing_ok=True)

    @property
    def hits(self) -> list[str]:
        path = self.folder / "hits"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    task = root / "check-phase"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "environment" / "Dockerfile").write_text(
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n"
    )
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text("Write done to /app/out.txt.\n")
    (task / "solution" / "solve.sh").write_text("echo done > /app/out.txt\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    # A probe: its exec beside the agent's processes is a call of the check phase too.
    (task / "tests" / "gem-probe.sh").write_text("echo probed\n")
    return root


@pytest.fixture(scope="module")
def faults(runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    folder = tmp_path_factory.mktemp("shim")
    shim = folder / "client"
    shim.write_text(SHIM)
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    shimmed = Runtime(
        runtime.kind,
        (str(shim), *runtime.argv),
        {**runtime.env, "GEM_SHIM_DIR": str(folder), "GEM_SHIM_SKIP": str(len(runtime.argv))},
    )
    saved = dict(container_backend._runtimes)
    container_backend._runtimes[runtime.kind] = shimmed
    try:
        yield Faults(folder)
    finally:
        container_backend._runtimes.clear()
        container_backend._runtimes.update(saved)


@pytest.fixture(scope="module")
def env(faults: Faults, runtime: Runtime, container_config: ContainerConfig, task_dir: Path) -> Iterator[TerminalEnv]:
    env = TerminalEnv(tasks_dir=str(task_dir), backend=runtime.kind, container=container_config.model_dump())
    yield env
    env.close()


def _solve(command: str = "") -> str:
    call = {"name": "bash", "arguments": {"command": "echo done > /app/out.txt" + command}}
    return f"<tool_call>{json.dumps(call)}</tool_call><done></done>"


def _check_with(env: TerminalEnv, faults: Faults, call: str, nth: int, mode: str) -> float | CheckPhaseError:
    """Play the reference with the fault armed for the check; the reward, or the error raised."""
    env.reset(options={"task": "check-phase"})
    episode = env._sandbox
    faults.arm(call, nth, mode)
    verb = CALLS[call][1]
    saved = session.CALL_BOUNDS_S[verb]
    if mode == "hang":  # given up at the call's bound: a short one here (the fault hangs for an hour)
        session.CALL_BOUNDS_S[verb] = 2.0
    try:
        return env.step(_solve())[1]
    except CheckPhaseError as exc:
        return exc
    finally:
        session.CALL_BOUNDS_S[verb] = saved
        faults.disarm()
        episode._remove()  # what a failed `rm` left


@pytest.mark.parametrize(
    ("call", "mode"),
    [
        ("probe", "kill"),
        ("stop", "exit:1"),
        ("diff", "hang"),
        ("commit", "kill"),
        ("rm", "exit:125"),
        ("run", "exit:125"),
        ("list", "exit:1"),
        ("session", "hang"),
    ],
    ids=lambda value: value.replace(":", "-"),
)
def test_a_failing_runtime_call_of_the_check_raises_check_phase_error(
    env: TerminalEnv, faults: Faults, call: str, mode: str
) -> None:
    outcome = _check_with(env, faults, call, 0, mode)
    assert isinstance(outcome, CheckPhaseError), f"scored {outcome} though `{call}` failed ({mode})"
    assert faults.hits, "the fault never fired"
    assert outcome.call.endswith(CALLS[call][1]) or call == "probe", (outcome.phase, outcome.call)
    assert "not the agent's" in str(outcome) and outcome.phase in str(outcome)
    assert env._sandbox is None  # the episode is over: the next step asks for a reset


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    call=st.sampled_from([c for c in CALLS if c != "probe"]),
    nth=st.integers(0, 2),
    mode=st.sampled_from(["exit:1", "exit:125", "kill", "hang"]),
)
def test_any_fault_of_the_check_is_an_error_or_the_true_reward(
    env: TerminalEnv, faults: Faults, call: str, nth: int, mode: str
) -> None:
    # The reference solution's true reward is 1: a fault may be recovered from (the checker's container is
    # tried again once it starts from the task's image), or end in the error; never in a lower reward.
    outcome = _check_with(env, faults, call, nth, mode)
    assert isinstance(outcome, CheckPhaseError) or outcome == 1.0, (call, nth, mode, outcome, faults.hits)
    if nth == 0 and faults.hits:  # a fault that persists is never recovered from
        assert isinstance(outcome, CheckPhaseError), (call, mode, outcome)


def test_an_agent_that_kills_its_own_container_is_still_checked(env: TerminalEnv) -> None:
    # pid 1 of the agent's container exits at TERM: the session ends, the container stops, its files stay.
    env.reset(options={"task": "check-phase"})
    _, reward, terminated, _, info = env.step(_solve("; kill 1"))
    assert terminated and reward == 1.0, info["checker_output"]


def test_an_agent_that_breaks_the_checker_s_container_scores_0(env: TerminalEnv) -> None:
    # The driver of the checker's session needs a /tmp folder; a file there keeps it from starting. The
    # task's image starts it, so it is the agent's doing: 0, not an error that would drop the sample.
    env.reset(options={"task": "check-phase"})
    _, reward, _, _, info = env.step(_solve("; rm -rf /tmp && touch /tmp"))
    assert reward == 0.0
    assert "does not start from the agent's files" in info["checker_output"]


def test_a_failure_while_the_agent_is_past_its_disk_allowance_scores_0(
    faults: Faults, runtime: Runtime, container_config: ContainerConfig, task_dir: Path
) -> None:
    env = TerminalEnv(
        tasks_dir=str(task_dir), backend=runtime.kind, container=container_config.model_dump(), sandbox={"disk_mb": 2}
    )
    try:
        env.reset(options={"task": "check-phase"})
        episode = env._sandbox
        faults.arm("commit", 0, "exit:1")
        try:
            _, reward, _, _, info = env.step(_solve("; head -c 8M /dev/zero > /app/big"))
        finally:
            faults.disarm()
            episode._remove()
        assert reward == 0.0 and "more than its disk allowance of 2 MiB" in info["checker_output"]
    finally:
        env.close()


def test_the_task_s_memory_and_cpus_apply_to_its_containers(env: TerminalEnv, runtime: Runtime) -> None:
    # (What an explicit episode_memory_mb does against the task's value: envs/terminal/tests/test_env.py.)
    def host_config(env: TerminalEnv) -> tuple[int, int, int]:
        done = runtime.call(
            "inspect",
            "--format",
            "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.NanoCpus}}",
            env._sandbox.name,
        )
        memory, swap, cpus = done.stdout.decode().split()
        return int(memory), int(swap), int(cpus)

    env.reset(options={"task": "check-phase"})
    assert host_config(env) == (256 << 20, 256 << 20, 10**9)  # memory_mb = 256, no swap, cpus = 1
    # Past the task's memory the command ends, the episode goes on, and the check is made.
    result = env._sandbox.run("python3 -c \"x = bytearray(400 << 20); print('allocated')\"")
    assert not result.ok and "allocated" not in result.stdout
    _, reward, _, _, info = env.step(_solve())
    assert reward == 1.0, info["checker_output"]


def test_the_check_phase_bounds_are_named_for_every_call() -> None:
    used = {verb for _, verb in CALLS.values()}
    assert used <= set(session.CALL_BOUNDS_S) and all(v > 0 for v in session.CALL_BOUNDS_S.values())
    assert os.environ.get("GEM_SHIM_DIR") is None  # the shim's variables are the shimmed runtime's alone
