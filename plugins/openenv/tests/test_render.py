"""gem_openenv.render: every field of an observation reaches the model's text, none picked by type."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gem_openenv.render import render_observation, render_tools

_names = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(lambda n: n not in {"metadata", "done", "reward"})
_texts = st.text(alphabet="abcxyz019 ", max_size=12)
_scalars = st.one_of(st.booleans(), st.integers(-(10**6), 10**6), _texts, st.none())
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=3))


def _leaves(value: object) -> list[str]:
    """The texts a reader must find: each string and number inside ``value``."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value] if isinstance(value, str) else [json.dumps(value)] if value is not None else []


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_names, _values, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_every_field_with_a_value_is_shown_in_the_schemas_order(observation: dict, rng) -> None:
    order = list(observation)
    rng.shuffle(order)
    text = render_observation(observation, order=order)
    shown = [k for k in order if observation[k] is not None]
    if "tool_name" in shown or shown == ["tools"]:
        return  # OpenEnv's MCP observations: the tests below
    if len(shown) == 1 and isinstance(observation[shown[0]], str):
        assert text == observation[shown[0]]  # a lone text field reads as itself
        return
    lines = text.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == shown  # one line per field, in order, none left out
    for line, name in zip(lines, shown, strict=True):
        for leaf in _leaves(observation[name]):
            assert leaf in line, (leaf, line)


def test_multi_line_text_gets_lines_of_its_own() -> None:
    assert render_observation({"prompt": "a\nb", "turn": 2}) == "prompt:\na\nb\nturn: 2"


def test_metadata_fills_an_empty_observation_and_its_error_is_always_shown() -> None:
    assert render_observation({}, metadata={"status": "ready"}) == "status: ready"
    assert render_observation({"board": "x.."}, metadata={"error": "illegal", "evaluation": 1}) == "x..\nerror: illegal"
    assert render_observation({"board": "x.."}, metadata={"evaluation": 1}) == "x.."


def test_tool_results_read_as_openenvs_client_returns_them() -> None:
    fastmcp_result = {"content": [{"type": "text", "text": "Hi"}], "data": "Hi", "is_error": False}
    assert render_observation({"tool_name": "echo", "result": fastmcp_result, "error": None}) == "Hi"
    assert render_observation({"tool_name": "f", "result": {"a": 1}}) == '{"a": 1}'
    error = {"error_type": "timeout", "message": "too slow"}
    assert render_observation({"tool_name": "f", "result": None, "error": error}) == "Tool f failed (timeout): too slow"
    tools = [{"name": "f", "description": "Does\n f.", "inputSchema": {"properties": {"x": {"type": "integer"}}}}]
    assert render_tools(tools) == "- f(x: integer (optional)): Does f."
    assert render_observation({"tools": tools}) == "Tools:\n- f(x: integer (optional)): Does f."
