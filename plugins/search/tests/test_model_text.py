"""Any model text through the search tool: never an exception; one bad query never spoils a batch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gem_tool_search import SearchTool
from hypothesis import HealthCheck, given, settings

from gem_core.testing import GenericTestEnv
from gem_core.tools import ToolEnvWrapper
from gem_core.tools.fuzz import model_text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=model_text(["search"]))
def test_step_never_raises_on_any_text(small_corpus: Path, text: str) -> None:
    tool = SearchTool(corpus=str(small_corpus))
    env = ToolEnvWrapper(GenericTestEnv(), [tool], max_tool_calls=100)
    env.reset(seed=0)
    obs, *_, info = env.step(text)
    if info["tool_calls"]:  # a tool step's observation (the inner env's own echo is its business)
        obs.encode("utf-8")
    tool.close()
    env.close()


def test_a_surrogate_query_does_not_fail_the_queries_batched_with_it(retrieval_server: Any) -> None:
    # Over HTTP the batch is one JSON request: a query that cannot be encoded would fail all of them.
    tool = SearchTool(backend="http", url=retrieval_server.url, batch_wait_s=0.2)

    async def both() -> list[bool]:
        results = await asyncio.gather(
            tool.execute({"query": "capital \ud800 France"}),
            tool.execute({"query": "capital of France", "top_k": "9" * 5_000}),
            tool.execute({"query": "capital of France"}),
        )
        return [r.ok for r in results]

    try:
        assert asyncio.run(both()) == [True, False, True]
    finally:
        tool.close()
