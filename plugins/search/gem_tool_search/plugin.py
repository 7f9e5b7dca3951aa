"""gem_core plugin of gem-tool-search: declares the ``search`` tool (imports nothing heavy)."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import ToolSpec


@hookimpl
def register_tools() -> list[ToolSpec]:
    return [
        ToolSpec(
            name="search",
            entry_point="gem_tool_search.tool:SearchTool",
            description="Retrieve passages: local BM25 over a JSONL corpus, or a Search-R1 retrieval server.",
            tags=("retrieval", "qa"),
        )
    ]
