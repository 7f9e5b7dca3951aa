"""What the model reads of OpenEnv envs served by OpenEnv's own ``create_app``: an MCP env (OpenEnv's
``MCPEnvironment``, as its echo_env) and a structured observation (shaped as its chess_env's)."""

from __future__ import annotations

import json

import pytest

import gem_core
from gem_core.testing import check_env


def remote(url: str, **kwargs: object) -> gem_core.Env:
    return gem_core.make("openenv:Remote-v0", base_url=url, **kwargs)


def test_an_mcp_env_shows_its_tools_at_reset_and_on_request(shared_server) -> None:
    server = shared_server(native="tools", sessions=4)
    with remote(server.url) as env:
        obs, _ = env.reset(seed=0)
        listed = env.step('{"type": "list_tools"}')
    assert obs.startswith("status: ready\nmessage: tools ready\n\nTools:\n")
    assert "- reverse(text: string): Reverse the text." in obs
    assert "- count(text: string, letter: string (optional)): Count a letter in the text." in obs
    assert '{"type": "list_tools"}' in obs  # the way to list them again
    assert listed[0].startswith("Tools:\n- ") and "reverse(text: string)" in listed[0]
    assert not listed[4].get("format_error")


@pytest.mark.parametrize(
    ("reply", "seen"),
    [
        ('{"tool_name": "reverse", "arguments": {"text": "abc"}}', "cba"),
        ('{"type": "call_tool", "tool_name": "reverse", "arguments": {"text": "abc"}}', "cba"),
        ('<tool_call>{"name": "reverse", "arguments": {"text": "xy"}}</tool_call>', "yx"),
        ('```json\n{"name": "count", "arguments": {"text": "banana"}}\n```', '{"count": 3, "letter": "a"}'),
        ('{"tool_name": "nope", "arguments": {}}', "Tool nope failed (tool_not_found): Unknown tool: 'nope'"),
    ],
    ids=["call", "typed-call", "tool-call-tags", "fenced-name", "unknown-tool"],
)
def test_an_mcp_env_shows_the_tool_result(shared_server, reply: str, seen: str) -> None:
    server = shared_server(native="tools", sessions=4)
    with remote(server.url) as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(reply)
    assert obs == seen and (reward, terminated, truncated) == (0.0, False, False)
    assert not info.get("format_error")


def test_a_tool_called_with_bad_arguments_says_why(shared_server) -> None:
    server = shared_server(native="tools", sessions=4)
    with remote(server.url) as env:
        env.reset(seed=0)
        obs, *_ = env.step('{"tool_name": "reverse", "arguments": {}}')
    assert obs.startswith("Tool reverse failed (invalid_args):") and "text" in obs


@pytest.mark.parametrize(
    "reply",
    ["hello", '{"type": "list_tools", "extra": 1}', '{"arguments": {}}', "[1]"],
    ids=["prose", "list-tools-with-fields", "no-tool-name", "not-an-object"],
)
def test_a_reply_that_is_no_mcp_action_names_both_forms(shared_server, reply: str) -> None:
    server = shared_server(native="tools", sessions=4)
    with remote(server.url) as env:
        env.reset(seed=0)
        obs, _, _, _, info = env.step(reply)
    assert info == {"format_error": True}
    assert '{"tool_name": NAME, "arguments": {...}}' in obs and '{"type": "list_tools"}' in obs


def test_gem_check_passes_on_an_mcp_env(shared_server) -> None:
    server = shared_server(native="tools", sessions=4)
    check_env(remote(server.url), env_factory=lambda: remote(server.url))


def test_a_structured_observation_shows_every_field(shared_server) -> None:
    server = shared_server(native="board", sessions=4)
    with remote(server.url) as env:
        obs, info = env.reset(seed=0)
        middle = env.step("b1")
        env.step("a1")
        last = env.step("c1")
    assert obs == 'position: ...\nlegal_moves: a1, b1, c1\nin_danger: false\nsheet: {"claimed": 0}'
    assert middle[0] == 'position: .x.\nlegal_moves: a1, c1\nin_danger: false\nsheet: {"claimed": 1}'
    assert last[0] == 'position: xxx\nlegal_moves: (none)\nin_danger: false\nresult: 1-0\nsheet: {"claimed": 3}'
    assert last[1:4] == (1.0, True, False)
    assert info["openenv_observation"]["legal_moves"] == ["a1", "b1", "c1"]  # the raw fields stay in info
    assert info["openenv_metadata"] == {"evaluation": 0.5}


def test_observation_field_shows_one_field_as_asked(shared_server) -> None:
    server = shared_server(native="board", sessions=4)
    with remote(server.url, observation_field="legal_moves") as env:
        obs, _ = env.reset(seed=0)
    assert json.loads(obs) == ["a1", "b1", "c1"]
