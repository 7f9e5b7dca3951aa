"""A server that dies is reported to the model, then restarted; a call given up leaves its session unused."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import warnings
from pathlib import Path

import pytest
from gem_tool_mcp import MCPToolset
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st


def test_crashed_server_is_restarted_on_next_call(test_server_script: Path) -> None:
    with MCPToolset.stdio(
        sys.executable, [str(test_server_script), "stdio"], name="crashy", server_stderr="discard"
    ) as ts:
        tools = {t.name: t for t in ts.tools()}
        first_pid = json.loads(asyncio.run(tools["stats"].execute({})).output)["pid"]
        crashed = asyncio.run(tools["crash"].execute({}))
        assert not crashed.ok and "connection lost" in (crashed.error or "")
        again = asyncio.run(tools["stats"].execute({}))
        assert again.ok, again.error
        assert json.loads(again.output)["pid"] != first_pid
        assert ts.connections == 2


# ---------------------------------------------------------------------- abandoned calls: no late reply is ever read

CALL_KINDS = ["echo", "timeout", "cancel"]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_call_given_up_never_lends_its_late_reply_to_a_later_call(
    transport: str, http_url: str, test_server_script: Path
) -> None:
    """Any mix of answered calls, calls past their timeout and calls their caller cancelled, on the real server."""

    @settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.generate])
    @example(plan=[("timeout", "a"), ("echo", "b"), ("cancel", "c"), ("echo", "d")])
    @given(plan=st.lists(st.tuples(st.sampled_from(CALL_KINDS), st.text("abcxyz", min_size=1, max_size=8)), max_size=5))
    def check(plan: list[tuple[str, str]]) -> None:
        if transport == "http":
            toolset = MCPToolset.http(http_url, name="late-http")
        else:
            toolset = MCPToolset.stdio(sys.executable, [str(test_server_script), "stdio"], server_stderr="discard")
        with toolset:
            toolset.tools()
            # Sessions counted before the latest call given up since the last answered one: the next answered
            # call must run on a later session. Counted per call, not in total, because a call given up while
            # its new session is still connecting (a loaded machine) opens no session of its own.
            before_abandoned: int | None = None
            for i, (kind, text) in enumerate(plan):
                if kind == "echo":
                    result = asyncio.run(toolset.call("echo", {"text": text}))
                    assert result.ok and result.output == text, (i, result)  # its own reply, never "slept ..."
                    if before_abandoned is not None:
                        assert toolset.connections > before_abandoned, (i, "answered on an abandoned session")
                    before_abandoned = None
                    continue
                before_abandoned = toolset.connections
                # the server answers 0.6 s later, while the next call is under way
                sleep = toolset.call("sleep", {"seconds": 0.6}, timeout_s=0.2 if kind == "timeout" else 30.0)
                if kind == "timeout":
                    assert asyncio.run(sleep).error == "sleep timed out after 0.2 s"
                else:
                    with pytest.raises(asyncio.TimeoutError):
                        asyncio.run(asyncio.wait_for(sleep, 0.2))
            # at most one new session per call given up (none is opened while nothing else is asked)
            assert toolset.connections <= 1 + sum(kind != "echo" for kind, _ in plan[:-1])

    check()


@pytest.mark.parametrize("given_up", ["timeout", "cancel"])
def test_close_right_after_calls_given_up_reaps_every_server(given_up: str, test_server_script: Path) -> None:
    """close() waits for sessions still shutting down: each server is reaped, none left to the GC.

    The first call is given up while the server works on it; the second is given up while the
    first one's session is still shutting down (the server is busy); close() comes right after.
    """

    def give_up(toolset: MCPToolset) -> None:
        call = toolset.call("sleep", {"seconds": 0.6}, timeout_s=0.2 if given_up == "timeout" else 30.0)
        if given_up == "timeout":
            assert "timed out" in (asyncio.run(call).error or "")
        else:
            with pytest.raises(asyncio.TimeoutError):
                asyncio.run(asyncio.wait_for(call, 0.2))

    for _ in range(4):
        toolset = MCPToolset.stdio(sys.executable, [str(test_server_script), "stdio"], server_stderr="discard")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with toolset:
                toolset.tools()
                give_up(toolset)
                give_up(toolset)
            del toolset
            gc.collect()
        leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert not leaks, leaks
