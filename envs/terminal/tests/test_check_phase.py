"""The check phase in the episode sandbox: what gem fails at is CheckPhaseError, what the agent causes a reward.

The sandbox's faults are its own: it ends (closed by gem, or its init killed) at a chosen step of the
check. Harbor's ``[environment]`` memory and storage apply to the sandbox; the episode engine and vector
envs keep such an error apart from a 0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.errors import CheckPhaseError, ConfigError, ResetNeeded
from gem_terminal.env import TASKS_DIR, TerminalEnv, reference_action
from gem_terminal.loader import TerminalTask, load_task
from gem_tool_python.episode import episodes_available

USABLE, WHY = episodes_available()
pytestmark = pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}")
#: A shipped task with a probe (run beside the agent's processes), a reward file and as-agent.
TASK = "process-http-server"
#: A shipped task with a short check.
QUICK = "text-sort-uniq"
FIXTURES = Path(__file__).parent / "fixtures"


def _reference(name: str = TASK) -> str:
    task = load_task(TASKS_DIR / name)
    assert isinstance(task, TerminalTask)
    return reference_action(task)


@pytest.fixture(scope="module")
def env() -> Iterator[TerminalEnv]:
    made = TerminalEnv(task=TASK)
    yield made
    made.close()


def _end(env: TerminalEnv, how: str) -> None:
    """End the episode's sandbox from gem's side: closed, or its init killed (the kernel ends the rest)."""
    sandbox = env._sandbox
    if how == "close":
        sandbox.close()
    else:
        os.kill(sandbox._keeper, signal.SIGKILL)


def test_a_sandbox_closed_by_gem_before_the_check_raises(env: TerminalEnv) -> None:
    env.reset()
    env.step(_reference())
    env._sandbox.close()
    with pytest.raises(CheckPhaseError, match="not the agent's") as raised:
        env.step("<done></done>")
    assert raised.value.phase == "start"
    with pytest.raises(ResetNeeded):  # the episode is over
        env.step("<done></done>")


#: The sandbox's operations in the check: (method, which calls count).
OPERATIONS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "run": lambda kwargs: bool(kwargs.get("checker")),  # the probe, the checker, reading the reward files
    "end_agent": lambda kwargs: True,
    "write_file": lambda kwargs: True,  # the checker's gitconfig, as-agent, the tests, the reward files
    "serve_agent": lambda kwargs: True,
}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operation=st.sampled_from(list(OPERATIONS)), nth=st.integers(1, 4), how=st.sampled_from(["close", "kill"]))
def test_a_sandbox_that_ends_at_any_step_of_the_check_raises_never_scores(
    env: TerminalEnv, operation: str, nth: int, how: str
) -> None:
    env.reset()
    env.step(_reference())
    sandbox = env._sandbox
    original = getattr(sandbox, operation)
    calls: list[int] = []

    def ending(*args: Any, **kwargs: Any) -> Any:
        if OPERATIONS[operation](kwargs):
            calls.append(1)
            if len(calls) == nth:
                _end(env, how)
        return original(*args, **kwargs)

    setattr(sandbox, operation, ending)
    try:
        _, reward, *_ = env.step("<done></done>")
    except CheckPhaseError as exc:
        assert len(calls) >= nth and "not the agent's" in str(exc)
        return
    assert len(calls) < nth, f"scored {reward} though the sandbox ended at {operation} #{nth} ({how})"
    assert reward == 1.0  # the fault never came: the reference's own reward


def test_an_agent_that_fills_its_disk_scores_0_not_an_error() -> None:
    made = TerminalEnv(task=TASK, sandbox={"disk_mb": 16})
    try:
        made.reset()
        reply = _reference() + "<bash>cat /dev/zero > /tmp/fill; true</bash><done></done>"
        _, reward, _, _, info = made.step(reply)
        assert reward == 0.0 and "filled its disk" in info["checker_output"], info["checker_output"]
    finally:
        made.close()


def test_an_agent_that_kills_what_it_can_is_still_checked(env: TerminalEnv) -> None:
    env.reset()
    # init is another uid's: `kill -9 1` is refused, `kill -9 -1` ends the agent's own processes.
    _, reward, _, _, info = env.step(_reference() + "<bash>kill -9 1; kill -9 -1</bash><done></done>")
    assert reward in (0.0, 1.0) and "[reward]" in info["checker_output"]


def _harbor_task(folder: Path, **environment: object) -> Path:
    task = folder / "harbor-reward-txt"
    shutil.copytree(FIXTURES / "harbor-reward-txt", task)
    toml = (task / "task.toml").read_text()
    head, _, _ = toml.partition("[environment]")
    lines = "".join(f"{key} = {value!r}\n" for key, value in environment.items())
    (task / "task.toml").write_text(head + "[environment]\n" + lines)
    return task


@pytest.mark.parametrize(
    ("task_memory", "user", "expected"),
    [(200, None, 200), (None, None, 1024), (200, 128, 128), (200, 512, 200), (None, 512, 512)],
    ids=["task", "default", "user-caps-task", "task-under-cap", "user-without-task"],
)
def test_memory_is_the_task_s_capped_by_an_explicit_episode_memory(
    tmp_path: Path, task_memory: int | None, user: int | None, expected: int
) -> None:
    fields = {"memory_mb": task_memory} if task_memory else {}
    task = _harbor_task(tmp_path, **fields, storage_mb=64)
    made = TerminalEnv(tasks_dir=str(task), sandbox={"episode_memory_mb": user} if user else {})
    assert made.limits(made.tasks[0])[:2] == (expected, 64)


def test_the_task_s_memory_applies_to_the_sandbox_and_ends_only_the_command(tmp_path: Path) -> None:
    made = TerminalEnv(tasks_dir=str(_harbor_task(tmp_path, memory_mb=160, cpus=1)))
    try:
        made.reset()
        assert made._sandbox.config.episode_memory_mb == 160
        result = made._sandbox.run("python3 -c \"x = bytearray(300 << 20); print('allocated')\"")
        assert not result.ok and "allocated" not in result.stdout
        assert made._sandbox.run("echo alive").stdout == "alive\n"
    finally:
        made.close()


def test_a_task_asking_more_memory_than_the_host_has_is_refused_at_load(tmp_path: Path) -> None:
    task = _harbor_task(tmp_path, memory_mb=1 << 30)
    with pytest.raises(ConfigError, match=r"more than this host's \d+ MiB"):
        TerminalEnv(tasks_dir=str(task))
    made = TerminalEnv(tasks_dir=str(task), sandbox={"episode_memory_mb": 512})  # an explicit cap runs it
    assert made.limits(made.tasks[0])[0] == 512


def test_the_engine_ends_only_that_episode_with_an_error_never_a_0() -> None:
    from gem_core.episode import EpisodeEngine, Generation, TurnRequest, failed_by_env

    engine = EpisodeEngine(max_turns=3, on_env_error="end")
    envs = [TerminalEnv(task=QUICK), TerminalEnv(task=QUICK)]
    replies = [iter([_reference(QUICK), "<done></done>"]) for _ in envs]

    def generate_for(index: int) -> Callable[[TurnRequest], Any]:
        async def generate(request: TurnRequest) -> Generation:
            text = next(replies[index])
            if index == 0 and text == "<done></done>":
                envs[0]._sandbox.close()  # gem's side fails this episode's check
            return Generation(text=text)

        return generate

    async def both() -> list[Any]:
        return list(await asyncio.gather(*(engine.play(e, generate_for(i), seed=0) for i, e in enumerate(envs))))

    try:
        failed, played = asyncio.run(both())
    finally:
        for e in envs:
            e.close()
    assert failed.end_reason == "error" and failed_by_env(failed.episode())  # kept out of training
    assert failed.metadata["error_type"] == "CheckPhaseError"
    assert len(failed.turns) == 1  # the turn whose check raised is dropped: no reward is recorded for it
    assert played.end_reason == "env" and played.turns[-1].reward == 1.0


def test_a_vector_env_keeps_the_others_and_flags_the_error() -> None:
    vec = gem_core.make_vec([f"terminal:Tasks-v0-{QUICK}"] * 2, backend="sync", on_error="reset")
    try:
        vec.reset(seed=0)
        vec.step([_reference(QUICK)] * 2)
        vec.envs[0].unwrapped._sandbox.close()  # type: ignore[attr-defined]
        _, rewards, _, _, infos = vec.step(["<done></done>"] * 2)
        assert rewards[1] == 1.0
        assert infos[0]["env_error"]["type"] == "CheckPhaseError" and "env_error" not in infos[1]
    finally:
        vec.close()


#: A checker written for a container (no as-agent): its tests overwrite a file of the work dir and make /db.
WRITER = FIXTURES / "tb-checker-writes"
#: A folder chain whose paths pass PATH_MAX (4,096 bytes): made with relative steps, as an agent may.
DEEP_TREE = "<bash>d=$(printf 'x%.0s' $(seq 200)); for i in $(seq 25); do mkdir $d && cd $d; done</bash>"


@pytest.mark.parametrize(
    ("extra", "expected", "says"),
    [
        ("", 1.0, "[exit code] 0"),
        (None, 0.0, "No such file"),  # the no-op: no /app/count.py
        (DEEP_TREE, 0.0, "could not be handed to the checker"),
    ],
    ids=["reference", "no-op", "agent-tree-past-path-max"],
)
def test_a_checker_written_for_a_container_writes_in_the_work_dir_and_at_the_top(
    extra: str | None, expected: float, says: str
) -> None:
    task = load_task(WRITER)
    assert isinstance(task, TerminalTask) and not task.checker_uses_as_agent
    made = TerminalEnv(tasks_dir=str(WRITER))
    try:
        made.reset()
        reply = "" if extra is None else reference_action(task) + extra
        _, reward, terminated, _, info = made.step(reply + "<done></done>")
        assert terminated and reward == expected and says in info["checker_output"], info["checker_output"]
    finally:
        made.close()
