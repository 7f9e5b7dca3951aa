"""The OpenAI-compatible client against a real HTTP server on loopback: transient errors retried, failures isolated."""

from __future__ import annotations

import asyncio
import contextlib
import json
import operator
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("httpx", reason="the eval extra installs httpx")

import gem_core
from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.episode import EpisodeLimits
from gem_core.eval.backends import EvalBackendError, OpenAIBackend, Sampling
from gem_core.eval.run import EvalSettings, evaluate


class ScriptedServer:
    """A real HTTP server on loopback answering /v1/chat/completions from a script of (status, body) pairs."""

    def __init__(self, script: list[tuple[int, dict[str, Any] | None, dict[str, str]]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                owner.requests.append(json.loads(self.rfile.read(length)))
                status, body, headers = owner.script.pop(0) if owner.script else (200, None, {})
                payload = json.dumps(body or _completion("My guess is 8")).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(text: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4},
    }


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ScriptedServer]:
    s = ScriptedServer(getattr(request, "param", []))
    yield s
    s.close()


def run(backend: OpenAIBackend, **kwargs: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        try:
            return await evaluate(backend, EvalSettings(**kwargs))
        finally:
            await backend.aclose()

    return asyncio.run(go())


def backend_for(server: ScriptedServer, **kwargs: Any) -> OpenAIBackend:
    return OpenAIBackend("m", server.url, api_key="k", backoff_s=0.01, **kwargs)


@pytest.mark.parametrize(
    "server",
    [[(503, {"error": "busy"}, {}), (429, {"error": "slow down"}, {"retry-after": "0"}), (200, None, {})]],
    indirect=True,
)
def test_transient_errors_are_retried(server: ScriptedServer) -> None:
    backend = backend_for(server)
    records = run(backend, env_ids=["core:NumberGuess-v0"], num_episodes=1, limits=EpisodeLimits(max_turns=1))
    assert records[0]["error"] is None and records[0]["num_turns"] == 1
    assert backend.retries == 2
    body = server.requests[-1]
    assert body["model"] == "m" and body["messages"][0]["role"] == "user" and isinstance(body["seed"], int)


@pytest.mark.parametrize("server", [[(400, {"error": "bad request"}, {})]], indirect=True)
def test_other_errors_fail_the_episode_at_once_and_the_run_goes_on(server: ScriptedServer) -> None:
    backend = backend_for(server)
    records = run(
        backend, env_ids=["core:NumberGuess-v0"], num_episodes=2, concurrency=1, limits=EpisodeLimits(max_turns=1)
    )
    errors = [r["error"] for r in records]
    assert sum(e is not None for e in errors) == 1 and backend.retries == 0
    failed = next(r for r in records if r["error"])
    assert "HTTP 400" in failed["error"] and "not retried" in failed["error"] and failed["success"] is False


@pytest.mark.parametrize("server", [[(503, {"error": "down"}, {})] * 10], indirect=True)
def test_retries_give_up(server: ScriptedServer) -> None:
    backend = backend_for(server, max_retries=2)
    with pytest.raises(EvalBackendError, match="gave up after 3 attempts"):
        asyncio.run(backend._post("/chat/completions", {"model": "m"}))
    asyncio.run(backend.aclose())


@pytest.mark.parametrize("server", [[(200, _completion("My guess is 123456", "length"), {})]], indirect=True)
def test_a_cut_reply_reaches_the_env_as_an_invalid_action(server: ScriptedServer) -> None:
    records = run(
        backend_for(server), env_ids=["core:NumberGuess-v0"], num_episodes=1, limits=EpisodeLimits(max_turns=2)
    )
    first = records[0]["turns"][0]
    assert first["stop_reason"] == "length" and first["reward"] == -0.1  # the env's format penalty
    assert records[0]["messages"][1]["content"] == "My guess is 123456"  # what the model said stays in the trace


class ExplodingEnv(Env):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        return "go", {}

    def step(self, action: str) -> StepReturn:
        if self.np_random.random() < 2:  # always: the env is broken
            raise RuntimeError("env exploded")
        return "", 0.0, True, False, {}


def test_a_failing_env_marks_its_episodes_only(server: ScriptedServer) -> None:
    with contextlib.suppress(gem_core.errors.RegistrationError):  # registered by an earlier run in this process
        gem_core.register("evaltest:Exploding-v0", entry_point=ExplodingEnv)
    records = run(
        backend_for(server),
        env_ids=["evaltest:Exploding-v0", "core:NumberGuess-v0"],
        num_episodes=2,
        limits=EpisodeLimits(max_turns=1),
    )
    assert [r["error"] is not None for r in records] == [True, True, False, False]
    assert "env exploded" in records[0]["error"] and records[0]["end_reason"] == "error"


def test_unknown_env_ids_fail_before_any_episode(server: ScriptedServer) -> None:
    with pytest.raises(gem_core.errors.EnvNotFound):
        run(backend_for(server), env_ids=["core:NoSuch-v0"], num_episodes=1)
    assert server.requests == []


def test_sampling_is_sent_and_seeds_are_stable(server: ScriptedServer) -> None:
    backend = backend_for(server, sampling=Sampling(temperature=0.7, top_p=0.9, seed=5, extra={"top_k": 20}))
    run(backend, env_ids=["core:NumberGuess-v0"], num_episodes=1, limits=EpisodeLimits(max_turns=1, max_turn_tokens=9))
    body = server.requests[0]
    assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == (0.7, 0.9, 20, 9)
    assert body["seed"] == backend._request_seed("core:NumberGuess-v0/seed=0", 0)


COMPLETIONS_SHAPED = {"choices": [{"index": 0, "finish_reason": "stop", "text": "My guess is 8"}], "usage": {}}


@pytest.mark.parametrize(
    ("body", "missing", "quoted"),
    [
        (COMPLETIONS_SHAPED, "choices[0].message.content", '"text": "My guess is 8"'),
        ({"choices": [{"message": {"content": None}, "finish_reason": "stop"}]}, "message.content", "null"),
        ({"choices": [{"message": {"content": 7}, "finish_reason": "stop"}]}, "message.content", '"content": 7'),
        ({"choices": []}, "without choices", "[]"),
        ({"object": "error", "message": "model not loaded"}, "without choices", "model not loaded"),
        ([{"text": "8"}], "without choices", "'text': '8'"),
    ],
    ids=["completions-shaped", "content-null", "content-int", "no-choices", "error-object", "json-list"],
)
def test_a_response_without_the_reply_is_an_episode_error_quoting_the_body(
    server: ScriptedServer, body: Any, missing: str, quoted: str
) -> None:
    server.script = [(200, body, {})]
    settings = {"env_ids": ["core:NumberGuess-v0"], "num_episodes": 2, "concurrency": 1}
    records = run(backend_for(server), limits=EpisodeLimits(max_turns=1), **settings)
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1, "exactly the episode that got the bad body fails; never a silent empty reply"
    assert missing in failed[0]["error"] and quoted in failed[0]["error"]  # the server's body, in the trace
    assert failed[0]["end_reason"] == "error" and failed[0]["success"] is False
    assert "EvalBackendError" in failed[0]["error"]


def test_a_null_content_cut_at_the_limit_is_an_empty_cut_reply(server: ScriptedServer) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "length"}]}
    server.script = [(200, body, {})]
    (record,) = run(
        backend_for(server), env_ids=["core:NumberGuess-v0"], num_episodes=1, limits=EpisodeLimits(max_turns=1)
    )
    assert record["error"] is None and record["turns"][0]["stop_reason"] == "length"


# ---------------------------------------------------------------------- a request given up: no late reply is read


PROMPT = operator.itemgetter(0)


class SlowFirstServer:
    """A real HTTP server on loopback echoing each chat request's prompt; a prompt's first attempt may come late."""

    def __init__(self, late_s: float) -> None:
        self.attempts: dict[str, int] = {}
        self.slow: set[str] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                prompt = body["messages"][-1]["content"]
                owner.attempts[prompt] = owner.attempts.get(prompt, 0) + 1
                if prompt in owner.slow and owner.attempts[prompt] == 1:
                    time.sleep(late_s)  # the reply comes after the client gave up and retried
                payload = json.dumps(_completion(f"echo {prompt} #{owner.attempts[prompt]}")).encode()
                with contextlib.suppress(OSError):  # the client may have closed this connection
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.generate])
@example(plan=[("a", True), ("b", False), ("c", True)])
@given(plan=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.booleans()), min_size=1, max_size=5, unique_by=PROMPT))
def test_a_timed_out_request_never_lends_its_late_reply_to_another(plan: list[tuple[str, bool]]) -> None:
    from gem_core.episode import TurnRequest

    server = SlowFirstServer(late_s=2.0)
    server.slow = {prompt for prompt, slow in plan if slow}
    backend = OpenAIBackend("m", server.url, api_key="k", backoff_s=0.01, timeout_s=0.5, max_retries=3)

    def request(prompt: str) -> TurnRequest:
        return TurnRequest(0, 0, None, [{"role": "user", "content": prompt}], 8)

    async def main() -> list[str | None]:
        try:  # all at once: retries and answered requests share the pool the timeouts retire
            generations = await asyncio.gather(*(backend.generate(request(p), p) for p, _ in plan))
            return [g.text for g in generations]
        finally:
            await backend.aclose()

    try:
        texts = asyncio.run(main())
    finally:
        server.close()
    # each reply is its own prompt's, and a slow prompt's is its retry's, never the late first attempt's
    assert texts == [f"echo {p} #{2 if slow else 1}" for p, slow in plan]
    assert (backend.channels > 1) == any(slow for _, slow in plan)  # a timeout retires its pool
    assert not backend._retired  # every retired pool was closed once its requests ended
