"""``gem serve``'s environment under faults, in-process through gem's own app (Starlette's test
client): an env that raises or hangs in step, step after done, reset twice, max sessions exact, and any
malformed HTTP replay (``seed``/``history``) is a 4xx, never a silently different episode."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import gem_core
from gem_core.core import Env
from gem_core.errors import ConfigError
from gem_openenv.server import IDLE_CLOSE_CODE, build_app

BUILT = itertools.count()


class Faulty(Env):
    """Echoes the reply (reward 1 a turn, done after 3); ``raise`` raises, ``hang`` blocks until released."""

    release = threading.Event()

    def __init__(self) -> None:
        self.serial = next(BUILT)
        self.turns = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.turns = 0
        return f"env {self.serial} ready", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "raise":
            raise ValueError("boom")
        if action == "hang":
            self.release.wait(30)
        self.turns += 1
        return f"env {self.serial} turn {self.turns}: {action}", 1.0, self.turns >= 3, False, {}


gem_core.register("test:Faulty-v0", Faulty, override=True)


@pytest.fixture(scope="module")
def client() -> Any:
    with TestClient(build_app("test:Faulty-v0", max_sessions=2, step_timeout_s=0.5)) as test_client:
        yield test_client
    Faulty.release.set()


def send(socket: Any, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    socket.send_json({"type": kind, "data": data or {}})
    answer: dict[str, Any] = socket.receive_json()
    return answer


@pytest.mark.parametrize("fault", ["raise", "hang"])
def test_a_step_that_raises_or_hangs_loses_the_episode_and_reset_builds_a_new_env(client: Any, fault: str) -> None:
    with client.websocket_connect("/ws") as socket:
        first = send(socket, "reset", {"seed": 1})["data"]["observation"]["text"]
        failed = send(socket, "step", {"text": fault})
        assert failed["type"] == "error" and failed["data"]["code"] == "EXECUTION_ERROR"
        assert "test:Faulty-v0" in failed["data"]["message"] and "reset" in failed["data"]["message"]
        assert ("boom" if fault == "raise" else "ran past 0.5s") in failed["data"]["message"]
        refused = send(socket, "step", {"text": "go on"})  # never a step on an env in an unknown state
        assert refused["data"]["code"] == "EXECUTION_ERROR" and "lost" in refused["data"]["message"]
        again = send(socket, "reset", {"seed": 1})["data"]["observation"]["text"]
        assert again != first  # a new env, not the one a hung step may still run in
        assert send(socket, "step", {"text": "x"})["data"]["observation"]["text"].endswith("turn 1: x")


def test_step_after_done_and_reset_twice(client: Any) -> None:
    with client.websocket_connect("/ws") as socket:
        send(socket, "reset")
        send(socket, "reset")  # twice: the second episode starts from turn 0
        answers = [send(socket, "step", {"text": str(n)}) for n in range(4)]
        assert [a["data"]["done"] for a in answers[:3]] == [False, False, True]
        assert answers[3]["data"]["code"] == "EXECUTION_ERROR" and "episode is over" in answers[3]["data"]["message"]
        assert send(socket, "reset")["type"] == "observation"


def test_max_sessions_is_exact(client: Any) -> None:
    with client.websocket_connect("/ws") as one, client.websocket_connect("/ws") as two:
        assert send(one, "reset")["type"] == send(two, "reset")["type"] == "observation"
        with client.websocket_connect("/ws") as three:
            assert send(three, "reset")["data"]["code"] == "CAPACITY_REACHED"
    with client.websocket_connect("/ws") as again:  # both closed: a slot is free again
        assert send(again, "reset")["type"] == "observation"


@pytest.fixture(scope="module")
def game() -> Any:
    with TestClient(build_app("game:GuessTheNumber-v0-easy", max_sessions=2)) as test_client:
        yield test_client


def in_process(seed: int, history: list[str], action: str) -> tuple[str, float, bool, bool] | None:
    """The step after ``history``, or ``None`` when the episode ends within ``history``."""
    env = gem_core.make("game:GuessTheNumber-v0-easy")
    try:
        env.reset(seed=seed)
        for earlier in history:
            _, _, terminated, truncated, _ = env.step(earlier)
            if terminated or truncated:
                return None
        obs, reward, terminated, truncated, _ = env.step(action)
        return obs, reward, terminated, truncated
    finally:
        env.close()


guesses = st.integers(0, 12).map(lambda n: f"\\boxed{{{n}}}") | st.text(max_size=6)
seeds = st.integers(0, 2**31 - 1)
bad_seeds = (
    st.text(max_size=3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
)
bad_histories = st.text(min_size=1, max_size=4) | st.lists(st.integers() | st.none(), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=seeds | bad_seeds,
    history=st.lists(guesses, max_size=6) | bad_histories | st.none(),
    action=guesses,
    extra=st.dictionaries(st.sampled_from(["histroy", "sead", "options"]), st.integers(), max_size=1),
)
def test_any_replay_is_the_in_process_episode_or_a_4xx(
    game: Any, seed: Any, history: Any, action: str, extra: Any
) -> None:
    body = {"action": {"text": action}, "seed": seed, **({} if history is None else {"history": history}), **extra}
    answer = game.post("/step", json=body)
    well_formed = isinstance(seed, int) and not isinstance(seed, bool) and not extra
    well_formed = well_formed and (
        history is None or (isinstance(history, list) and all(isinstance(h, str) for h in history))
    )
    expected = in_process(seed, history or [], action) if well_formed else None
    if expected is None:  # malformed, or the history runs past the episode's end
        assert 400 <= answer.status_code < 500, answer.text
        assert answer.json()["detail"]
    else:
        assert answer.status_code == 200, answer.text
        got = answer.json()
        obs = got["observation"]
        assert (obs["text"], got["reward"], obs["terminated"], obs["truncated"]) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=seeds | bad_seeds | st.integers(-5, -1) | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
def test_any_websocket_reset_seed_is_the_in_process_episode_or_an_error(game: Any, seed: Any) -> None:
    with game.websocket_connect("/ws") as socket:
        answer = send(socket, "reset", {"seed": seed})
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        env = gem_core.make("game:GuessTheNumber-v0-easy")
        assert answer["data"]["observation"]["text"] == env.reset(seed=seed)[0]
        env.close()
    else:
        assert answer["type"] == "error" and answer["data"]["code"] == "EXECUTION_ERROR"
        assert "seed" in answer["data"]["message"]


class Hangs(Env):
    """Hangs in every step until ``release`` is set (a step no time limit can stop: Python cannot kill a thread)."""

    release = threading.Event()
    #: How many envs were closed after a step ran in them.
    closed_after_step = 0

    def __init__(self) -> None:
        self.stepped = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "ready", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.stepped = True
        self.release.wait(60)
        return "late", 0.0, False, False, {}

    def close(self) -> None:
        if self.stepped:
            type(self).closed_after_step += 1


gem_core.register("test:Hangs-v0", Hangs, override=True)


def hung_threads() -> int:
    return sum(thread.name == "gem-serve-step-test:Hangs-v0" for thread in threading.enumerate())


def test_fifteen_hung_steps_leave_a_bounded_number_of_threads_and_health_says_degraded() -> None:
    """Each hung step keeps its thread; at --max-hung-steps of them steps are refused and /health answers 503."""
    Hangs.release.clear()
    app = build_app("test:Hangs-v0", max_sessions=2, step_timeout_s=0.2, max_hung_steps=3)
    try:
        with TestClient(app) as test_client:
            assert test_client.get("/health").json()["status"] == "healthy"
            messages = []
            for _ in range(15):
                with test_client.websocket_connect("/ws") as socket:
                    reset = send(socket, "reset")  # a reset starts a thread too: refused once degraded
                    answer = reset if reset["type"] == "error" else send(socket, "step", {"text": "x"})
                    messages.append(answer["data"]["message"])
            assert [("step ran past 0.2s" in m) for m in messages] == [True] * 3 + [False] * 12
            assert all("reset refused: 3 resets/steps ran past their time limit" in m for m in messages[3:])
            assert hung_threads() == 3  # 15 before the cap: one thread per hung step
            health = test_client.get("/health")
            assert health.status_code == 503 and health.json()["status"] == "degraded"
            assert "--max-hung-steps" in health.json()["detail"]
            replay = test_client.post("/step", json={"action": {"text": "x"}, "seed": 1})  # HTTP is refused too
            assert replay.status_code == 504 and "refused" in replay.json()["detail"]
            closed_before = Hangs.closed_after_step
            Hangs.release.set()  # the hung steps end by themselves: their threads close their abandoned envs
            for thread in [t for t in threading.enumerate() if t.name == "gem-serve-step-test:Hangs-v0"]:
                thread.join(30)
            assert hung_threads() == 0 and Hangs.closed_after_step - closed_before == 3
            assert test_client.get("/health").json()["status"] == "healthy"
            with test_client.websocket_connect("/ws") as socket:  # steps are taken again
                send(socket, "reset")
                assert send(socket, "step", {"text": "x"})["data"]["observation"]["text"] == "late"
    finally:
        Hangs.release.set()


def test_idle_sessions_are_closed_and_free_their_slots() -> None:
    """Two sessions that send nothing no longer hold a 2-session server: each is closed after the idle timeout."""
    # Each socket's reset follows its own connect at once: the idle clock runs from the server's last
    # receive, so on a loaded machine a reset sent after a second connect could already meet the close.
    app = build_app("test:Faulty-v0", max_sessions=2, idle_timeout_s=1.0)
    with TestClient(app) as test_client, test_client.websocket_connect("/ws") as one:
        send(one, "reset")
        with test_client.websocket_connect("/ws") as two:
            send(two, "reset")
            for socket in (one, two):  # the next thing either gets is the server's close, not a frame
                closing = socket.receive()
                assert closing["type"] == "websocket.close" and closing["code"] == IDLE_CLOSE_CODE
                assert "idle for 1s" in closing["reason"]
            with test_client.websocket_connect("/ws") as three:  # a slot is free
                assert send(three, "reset")["type"] == "observation"


def test_a_step_longer_than_the_idle_timeout_is_not_idleness() -> None:
    """Idle is the server waiting on the client; a step still running (here 0.5 s against 0.2 s) is not idle."""
    Faulty.release.clear()
    timer = threading.Timer(0.5, Faulty.release.set)
    app = build_app("test:Faulty-v0", max_sessions=1, idle_timeout_s=0.2)
    with TestClient(app) as test_client, test_client.websocket_connect("/ws") as socket:
        send(socket, "reset")
        timer.start()
        assert send(socket, "step", {"text": "hang"})["data"]["observation"]["text"].endswith("turn 1: hang")
    timer.join()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"idle_timeout_s": -1}, "idle_timeout_s"),
        ({"idle_timeout_s": float("nan")}, "idle_timeout_s"),
        ({"idle_timeout_s": True}, "idle_timeout_s"),
        ({"max_hung_steps": 0}, "max_hung_steps"),
        ({"max_hung_steps": 2.5}, "max_hung_steps"),
    ],
    ids=["negative-idle", "nan-idle", "bool-idle", "zero-hung", "float-hung"],
)
def test_bounds_are_checked(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        build_app("test:Faulty-v0", **kwargs)


class HangsInReset(Env):
    """Hangs in ``reset`` until ``release`` is set; counts the envs built."""

    release = threading.Event()
    built = 0

    def __init__(self) -> None:
        type(self).built += 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.release.wait(30)
        return "ready", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "ok", 0.0, False, False, {}


gem_core.register("test:HangsInReset-v0", HangsInReset, override=True)


@pytest.mark.parametrize("path", ["websocket", "http"])
def test_a_reset_that_hangs_is_bounded_by_the_step_timeout(path: str) -> None:
    """``gem serve --step-timeout`` bounds reset as it bounds step: the episode is lost, the next reset builds anew."""
    HangsInReset.release.clear()
    app = build_app("test:HangsInReset-v0", max_sessions=2, step_timeout_s=0.3)
    try:
        with TestClient(app) as test_client:
            if path == "http":
                answer = test_client.post("/reset", json={"seed": 1})
                assert answer.status_code == 504 and "reset ran past 0.3s" in answer.json()["detail"]
                return
            with test_client.websocket_connect("/ws") as socket:
                failed = send(socket, "reset", {"seed": 1})
                assert failed["type"] == "error" and failed["data"]["code"] == "EXECUTION_ERROR"
                assert "test:HangsInReset-v0: reset ran past 0.3s" in failed["data"]["message"]
                assert "lost" in send(socket, "step", {"text": "x"})["data"]["message"]
                built = HangsInReset.built
                HangsInReset.release.set()
                assert send(socket, "reset", {"seed": 1})["data"]["observation"]["text"] == "ready"
                assert HangsInReset.built == built + 1  # a new env, not the one the hung reset ran in
    finally:
        HangsInReset.release.set()


@pytest.mark.parametrize(
    "raw",
    ['{"type": "reset", "data": {"seed": ' + "1" * 5000 + "}}", "[" * 100_000, '{"type": "reset", "data": [1]}', "[1]"],
    ids=["int-past-4300-digits", "too-deep", "data-not-object", "not-an-object"],
)
def test_a_malformed_message_is_an_error_frame_and_the_session_lives_on(client: Any, raw: str) -> None:
    with client.websocket_connect("/ws") as socket:
        socket.send_text(raw)
        answer = socket.receive_json()
        assert answer["type"] == "error" and answer["data"]["code"] in ("INVALID_JSON", "VALIDATION_ERROR")
        assert send(socket, "reset")["type"] == "observation"
    if raw.startswith('{"type": "reset", "data": ['):
        return  # over HTTP an object is a fine /reset body (its fields are reset options)
    for path in ("/reset", "/step", "/mcp"):  # over HTTP: a 4xx or a JSON-RPC error, never a 500
        answer = client.post(path, content=raw, headers={"content-type": "application/json"})
        assert answer.status_code in ((200,) if path == "/mcp" else (422,)), answer.text
        if path == "/mcp":
            assert answer.json()["error"]["code"] in (-32700, -32600)
