"""A hostile SGLang server through RL2's own rollout: a typed error naming the episode, then the next rollout is whole.

RL2 (message mode) hands the server's ``text`` to the env module's ``step``, which gives
it to the engine: a ``text`` that is not a ``str`` (``null``, a number, a list, an
object) ends RL2's rollout with ``GenerateContractError`` naming the episode, its env
is closed and nothing of it stays live, and the next rollout equals a fault-free one.
A ``meta_info.finish_reason`` the engine does not take (``null``, ``{"type": "error"}``, an
unknown type, a bare string) is the same typed error: RL2 passes no finish reason to the
env, so :mod:`gem_rl2.finish` carries SGLang's to it, and a failed request is never read
as a reply. What the module never sees is RL2's to read (docs/rl2.md): a reply without
``text`` or ``meta_info`` fails in RL2's own rollout with its ``KeyError``.
The server is the stand-in of ``standins`` (SGLang needs a GPU).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from gem_rl2.episodes import default_episodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rl2_harness import run_rollout
from standins import StandInSGLang

from gem_core.conformance import CASES, scripted_generation
from gem_core.episode import Generation
from gem_core.errors import GenerateContractError

pytestmark = pytest.mark.usefixtures("rl2_process_group", "event_loop_set")

CASE = dataclasses.replace(CASES[0], reply=lambda turn, text: "My guess is 0")  # never right: several turns
HOSTILE_TEXTS: dict[str, Any] = {"null": None, "number": 7, "list": ["My guess is 3"], "object": {"text": "3"}}
HOSTILE_FINISHES: dict[str, Any] = {
    "null": None,
    "error": {"type": "error", "message": "engine failed"},
    "unknown": {"type": "exploded"},
    "no-type": {"matched": 2},
    "bare-string": "finished",
}


class HostileSGLang(StandInSGLang):
    """The stand-in server, answering its ``bad_call``-th request with a non-str ``text`` while armed."""

    def __init__(self, tokenizer: Any, text: Any, bad_call: int, finish: Any = "keep") -> None:
        def policy(input_ids: list[int], max_new_tokens: int | None) -> Generation:
            return scripted_generation(CASE, tokenizer, input_ids, max_new_tokens)

        super().__init__(tokenizer, policy)
        self.text = text
        self.finish = finish
        self.bad_call = bad_call
        self.armed = True

    async def _generate(self, request: web.Request) -> web.Response:
        response = await super()._generate(request)
        if not self.armed or len(self.requests) - 1 != self.bad_call:
            return response
        body = json.loads(response.body)  # type: ignore[arg-type]
        if self.finish != "keep":
            return web.json_response({**body, "meta_info": {**body["meta_info"], "finish_reason": self.finish}})
        return web.json_response({**body, "text": self.text})


def rollout(tmp: Path, tokenizer: Any, url: str, seed: int) -> Any:
    result = run_rollout(
        tmp, tokenizer, url, env_id=CASE.env_id, seeds=[seed], max_turns=4, max_new_tokens=CASE.limits.max_turn_tokens
    )
    return {key: value.tolist() for key, value in result.tensor_dict.items()}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fault=st.sampled_from(sorted(HOSTILE_TEXTS)), bad_call=st.integers(0, 2), seed=st.integers(0, 3))
def test_a_non_str_reply_is_a_typed_error_and_the_next_rollout_is_whole(
    tmp_path_factory: pytest.TempPathFactory, fault: str, bad_call: int, seed: int
) -> None:
    tokenizer = CASE.tokenizer()
    with HostileSGLang(tokenizer, HOSTILE_TEXTS[fault], bad_call) as server:
        with pytest.raises(GenerateContractError) as info:
            rollout(tmp_path_factory.mktemp("hostile"), tokenizer, server.url, seed)
        assert info.value.episodes == [f"{CASE.env_id} seed={seed} turn={bad_call}"]
        assert "a generate must return" in str(info.value)
        assert default_episodes().running == 0  # the failed episode's env is closed, nothing left live

        server.armed = False
        after = rollout(tmp_path_factory.mktemp("after"), tokenizer, server.url, seed)
    with HostileSGLang(tokenizer, None, -1) as fresh:
        assert after == rollout(tmp_path_factory.mktemp("fresh"), tokenizer, fresh.url, seed)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fault=st.sampled_from(sorted(HOSTILE_FINISHES)), bad_call=st.integers(0, 2), seed=st.integers(0, 3))
def test_a_finish_reason_the_engine_does_not_take_is_a_typed_error_never_a_reply(
    tmp_path_factory: pytest.TempPathFactory, fault: str, bad_call: int, seed: int
) -> None:
    tokenizer = CASE.tokenizer()
    with HostileSGLang(tokenizer, None, bad_call, finish=HOSTILE_FINISHES[fault]) as server:
        with pytest.raises(GenerateContractError, match="finish_reason") as info:
            rollout(tmp_path_factory.mktemp("hostile"), tokenizer, server.url, seed)
        assert info.value.episodes == [f"{CASE.env_id} seed={seed} turn={bad_call}"]
        assert default_episodes().running == 0


def test_the_env_module_refuses_to_guess_without_sglangs_finish_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_rl2 import env, finish

    from gem_core.errors import ConfigError, TrajectoryError

    monkeypatch.setattr(finish, "_installed", False)
    with pytest.raises(ConfigError, match="gem-rl2-train"):
        asyncio.run(env.step("s", "a", {}))
    monkeypatch.setattr(finish, "_installed", True)
    with pytest.raises(TrajectoryError, match="without a generation of its own"):
        asyncio.run(env.step("s", "a", {}))


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        pytest.param({"meta_info": {"finish_reason": {"type": "stop", "matched": 2}}}, ("stop", None), id="stop"),
        pytest.param(
            {
                "meta_info": {
                    "finish_reason": {"type": "length", "length": 4},
                    "output_token_logprobs": [[-1.0, 7, None]],
                }
            },
            ("length", 7),
            id="length-with-ids",
        ),
        pytest.param({"meta_info": {}}, (None, None), id="no-finish"),
        pytest.param({"text": "x"}, (None, None), id="no-meta"),
        pytest.param(
            {"meta_info": {"finish_reason": "stop", "output_token_logprobs": [[0, True, None]]}},
            ("stop", None),
            id="bool-id",
        ),
    ],
)
def test_read_finish_takes_sglangs_fields_and_passes_odd_ones_on(response: Any, expected: Any) -> None:
    from gem_rl2.finish import read_finish

    assert tuple(read_finish(response)) == expected
