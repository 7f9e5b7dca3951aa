"""The terminal env: call syntaxes, state across turns, rewards, limits, gem check/list/eval, vector envs, engine."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.cli import main
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.testing_servers import scripted_chat_server
from gem_core.tools.fuzz import model_text
from gem_terminal.env import TASKS_DIR, TerminalEnv, foreign_reward_files, reference_action
from gem_terminal.loader import load_tasks
from gem_tool_python.episode import episodes_available, processes_of

USABLE, WHY = episodes_available()
# The env fixture plays as one fixed uid and checks no process of it is left: under pytest-xdist
# (tox -e packages) this file's tests share one worker, or one test would see another's processes.
pytestmark = [
    pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}"),
    pytest.mark.xdist_group("terminal-env-fixed-uid"),
]
TASKS = {t.name: t for t in load_tasks(TASKS_DIR)[0]}


def gem(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


def _left_after_close(uid: int, wait_s: float = 5.0) -> list[str]:
    """The processes of ``uid`` still there ``wait_s`` after a close, each described for the failure message.

    A process the kernel is still tearing down (already killed, its exit not yet complete) may show for a
    moment on a loaded machine; one still there after the wait is a leak, named with its state and pid
    namespace so the cause can be found.
    """
    deadline = time.monotonic() + wait_s
    while (left := processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    described = []
    for pid in left:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        fields = {k: v.strip() for k, _, v in (line.partition(":") for line in status.splitlines())}
        described.append(
            f"{pid} {fields.get('Name')} {fields.get('State')} ppid={fields.get('PPid')} "
            f"nspid={fields.get('NSpid')} {command[:80]!r}"
        )
    return described


@pytest.fixture
def env() -> Iterator[TerminalEnv]:
    made = TerminalEnv(task="files-create-tree", max_turns=8, command_timeout_s=3.0, sandbox={"uid": 1_400_000_091})
    yield made
    made.close()
    assert _left_after_close(1_400_000_091) == []


def test_state_persists_across_turns_and_both_syntaxes_run(env: TerminalEnv) -> None:
    env.reset(seed=0)
    obs, *_ = env.step("<bash>mkdir -p project/src && cd project && echo one > a.txt</bash>")
    assert "[exit code] 0" in obs
    call = {"name": "bash", "arguments": {"command": "cat project/a.txt; sleep 100 & echo $! > /tmp/pid"}}
    obs, *_ = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert obs.startswith("$ cat project/a.txt") and "one" in obs
    obs, *_ = env.step("<bash>kill -0 $(cat /tmp/pid) && echo alive</bash><bash>exit 3</bash>")
    assert "alive" in obs and "[exit code] 3" in obs


def test_no_call_is_a_format_error_and_malformed_calls_are_explained(env: TerminalEnv) -> None:
    env.reset(seed=0)
    obs, _reward, terminated, truncated, info = env.step("I would list the files.")
    assert info["format_error"] and "No command found" in obs and not (terminated or truncated)
    obs, *_, info = env.step('<tool_call>{"name": "bash", "arguments": </tool_call>')
    assert "[invalid call]" in obs and not info["format_error"]


def test_the_turn_limit_truncates_and_still_runs_the_checker(env: TerminalEnv) -> None:
    env.reset(seed=0)
    task = TASKS["files-create-tree"]
    for _ in range(7):
        assert env.step("<bash>true</bash>")[2:4] == (False, False)
    _obs, reward, terminated, truncated, info = env.step(reference_action(task))
    assert (reward, terminated, truncated, info["success"]) == (1.0, False, True, True)
    with pytest.raises(ResetNeeded):
        env.step("<bash>true</bash>")


def test_shaping_rewards_turns_whose_commands_all_succeed() -> None:
    env = TerminalEnv(task="text-sort-uniq", shaping=0.1)
    try:
        env.reset(seed=0)
        assert env.step("<bash>true</bash><bash>ls</bash>")[1] == pytest.approx(0.1)
        assert env.step("<bash>true</bash><bash>false</bash>")[1] == 0.0
        assert env.step("no command")[1] == 0.0
    finally:
        env.close()


def test_a_spent_episode_budget_ends_the_episode_with_the_checker() -> None:
    env = TerminalEnv(task="text-sort-uniq", episode_timeout_s=1.0, command_timeout_s=5.0)
    try:
        env.reset(seed=0)
        obs, _reward, _terminated, truncated, info = env.step("<bash>sleep 3</bash>")
        assert "[timeout]" in obs and truncated and info["success"] is False
    finally:
        env.close()


#: Each budget, the env settings that make it small, and a command that spends it (or not, for turns).
BUDGETS = {
    "turns": ({"max_turns": 2}, "true"),
    "time": ({"episode_timeout_s": 0.5, "command_timeout_s": 5.0}, "sleep 1"),
    "output": ({"sandbox": {"max_episode_output_bytes": 300, "max_output_bytes": 256}}, "head -c 200 /dev/zero"),
}


@settings(max_examples=9, deadline=None)
@given(budget=st.sampled_from(sorted(BUDGETS)), per_reply=st.integers(1, 3))
def test_every_budget_ends_the_episode_the_turn_it_is_spent_and_says_which(budget: str, per_reply: int) -> None:
    """Turns, command time or output: once spent the episode ends (checker run), ``info["ended_by"]`` names it."""
    settings_, command = BUDGETS[budget]
    env = TerminalEnv(task="text-sort-uniq", **settings_)
    try:
        env.reset(seed=0)
        turns = 0
        while turns < 8:
            turns += 1
            obs, _reward, terminated, truncated, info = env.step(f"<bash>{command}</bash>" * per_reply)
            if terminated or truncated:
                break
            assert "[episode_limit]" not in obs  # a refused command means the episode should have ended
        assert truncated and not terminated and info["ended_by"] == budget and info["success"] is False, info
        assert turns <= 2
    finally:
        env.close()


def test_hostile_commands_end_only_their_turn(env: TerminalEnv) -> None:
    env.reset(seed=0)
    for command in (":(){ :|:& };:", "yes", "sleep 60", "kill -9 -1", "cat /dev/zero > /tmp/fill"):
        obs, _reward, terminated, truncated, _ = env.step(f"<bash>{command}</bash>")
        assert not (terminated or truncated)
        assert "[exit code]" in obs
    obs, *_ = env.step("<bash>rm -f /tmp/fill; echo fine</bash>")
    assert "fine" in obs


def test_config_errors_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        TerminalEnv(max_turns=0)
    with pytest.raises(ConfigError, match="not a folder"):
        TerminalEnv(tasks_dir=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no runnable task"):
        TerminalEnv(tasks_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="is not there"):
        TerminalEnv(task="no-such-task")
    with pytest.raises(ConfigError, match="disk_mb"):
        TerminalEnv(sandbox={"disk_mb": 0})


@pytest.mark.parametrize("env_id", ["terminal:Tasks-v0", "terminal:Tasks-v0-git-resolve-conflict"])
def test_gem_check_passes(env_id: str) -> None:
    code, out = gem("check", env_id)
    assert code == 0, out


def test_gem_list_shows_every_task_id() -> None:
    code, out = gem("list")
    assert code == 0
    assert "terminal:Tasks-v0 " in out or "terminal:Tasks-v0\n" in out or "terminal:Tasks-v0" in out
    for name in TASKS:
        assert f"terminal:Tasks-v0-{name}" in out


@pytest.mark.parametrize("backend", ["sync", "async", "process"])
def test_vector_envs_run_reference_episodes(backend: str) -> None:
    names = ["text-sort-uniq", "git-init-commit", "files-symlink"]
    vec = gem_core.make_vec([f"terminal:Tasks-v0-{n}" for n in names], backend=backend, autoreset_mode="disabled")
    try:
        vec.reset(seed=0)
        vec.step([reference_action(TASKS[n]) for n in names])
        _, rewards, terminated, _, _ = vec.step(["<done></done>", "<done></done>", "no command"])
        assert list(rewards) == [1.0, 1.0, 0.0] and list(terminated) == [True, True, False]
    finally:
        vec.close()


def test_the_episode_engine_plays_a_task_in_token_mode() -> None:
    from gem_core.episode import EpisodeEngine, Generation, TurnRequest
    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer()
    engine = EpisodeEngine(tokenizer, max_turns=4)
    task = TASKS["python-fix-syntax"]
    replies = iter([reference_action(task), "<bash>python3 calc.py 1 1</bash>", "<done></done>"])

    async def generate(request: TurnRequest) -> Generation:
        ids = [*list(tokenizer.encode(next(replies), add_special_tokens=False)), tokenizer.eos_token_id]
        return Generation(token_ids=ids)

    env = gem_core.make(f"terminal:Tasks-v0-{task.name}")
    try:
        session = asyncio.run(engine.play(env, generate, env_id=task.name, seed=0))
    finally:
        env.close()
    assert [t.reward for t in session.turns] == [0.0, 0.0, 1.0]
    assert "2" in session.turns[1].next_observation and session.end_reason == "env"


def _reference_then_done(body: dict[str, Any]) -> str:
    """Plays each task's reference solution, then says done."""
    messages = body["messages"]
    first = next(m["content"] for m in messages if m["role"] == "user")
    task = next(t for t in TASKS.values() if t.instruction in first)
    said = sum(m["role"] == "assistant" for m in messages)
    return reference_action(task) if said == 0 else "<done></done>"


@pytest.fixture
def scripted_server() -> Iterator[str]:
    with scripted_chat_server(_reference_then_done) as chat:
        yield chat.url


def test_gem_eval_scores_reference_play_one(scripted_server: str, tmp_path: Path) -> None:
    pytest.importorskip("httpx", reason="gem eval needs gem-core[eval]")
    ids = ["terminal:Tasks-v0-text-csv-sum", "terminal:Tasks-v0-make-build-c"]
    trace = tmp_path / "trace.jsonl"
    code, out = gem(
        "eval", "scripted", *ids, "--base-url", scripted_server, "-n", "2", "--max-turns", "4",
        "--trace", str(trace), "--no-progress",
    )  # fmt: skip
    assert code == 0, out
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(records) == 4 and all(r["error"] is None for r in records), records
    assert [(r["episode_return"], r["success"], r["num_turns"]) for r in records] == [(1.0, True, 2)] * 4
    assert "success (95% CI)" in out


def test_the_model_sees_neither_the_checker_nor_the_solution_nor_the_host() -> None:
    env = TerminalEnv(task="text-csv-sum")
    try:
        env.reset(seed=0)
        obs, *_ = env.step(
            "<bash>ls -A /; echo ---; ls -A /app; echo ---; ls -A /opt /opt/gem; echo ---; "
            "ls -A /tests /checker/home 2>&1; env</bash>"
        )
        output = obs.split("\n", 1)[1].rsplit("[exit code]", 1)[0]  # past the echoed command
        top, app, opt, checker = output.split("---")
        system = {"bin", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "usr"}
        assert set(top.split()) <= system | {"app", "checker", "dev", "home", "opt", "proc", "tests", "tmp"}
        assert opt.split() == ["/opt:", "gem", "/opt/gem:", "pytest"]
        assert app.split() == ["sales.csv"]
        assert checker.count("Permission denied") == 2, checker  # the checker's folders: not even listable
        assert "TEST_DIR" not in checker and "/tests" not in checker.split("Permission denied")[-1]
    finally:
        env.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=model_text(["bash", "done"], ("command", "summary")))
def test_any_reply_gives_a_well_formed_step(env: TerminalEnv, reply: str) -> None:
    if env.task is None:
        env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert isinstance(obs, str) and len(obs) <= env.config.max_observation_chars + 64
    assert reward in (0.0, 1.0) and isinstance(info["format_error"], bool)
    if terminated or truncated:
        assert isinstance(info["success"], bool)
        env.reset(seed=0)


_FOLDER = "/logs/verifier|directory|0|755|2"
REWARD_FILE_CASES = [
    "roots",
    "folder-777",
    "folder-group-writable",
    "folder-a-link",
    "file-of-nobody",
    "hard-link",
    "file-a-link",
    "fifo",
]
_FILE = "/logs/verifier/reward.txt|regular file|0|644|1"


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([_FOLDER, _FILE, "/logs/verifier/reward.json|regular empty file|0|644|1"], None),
        (["/logs/verifier|directory|0|777|2", _FILE], "not a folder only root may write"),
        (["/logs/verifier|directory|0|775|2", _FILE], "not a folder only root may write"),
        (["/logs/verifier|symbolic link|0|777|1", _FILE], "not a folder only root may write"),
        ([_FOLDER, "/logs/verifier/reward.txt|regular file|65534|644|1"], "not a file only root wrote"),
        ([_FOLDER, "/logs/verifier/reward.txt|regular file|0|666|2"], "not a file only root wrote"),
        ([_FOLDER, "/logs/verifier/reward.txt|symbolic link|0|777|1"], "not a file only root wrote"),
        ([_FOLDER, "/logs/verifier/reward.txt|fifo|0|644|1"], "not a file only root wrote"),
    ],
    ids=REWARD_FILE_CASES,
)
def test_a_reward_file_root_did_not_write_alone_does_not_count(lines: list[str], why: str | None) -> None:
    """In a container: the reward folder and files as ``stat`` lists them; anything another uid could have written."""
    found = foreign_reward_files(lines)
    assert (found is None) if why is None else (found is not None and why in found)
