"""``gem eval``: evaluate a model on envs through the episode engine, with traces, resume, a summary and a plot.

Needs the ``eval`` extra (``pip install 'gem-core[eval]'``: httpx, rich, matplotlib);
the ``hf`` backend also needs torch and transformers, the ``vllm`` backend vLLM.
See ``docs/eval.md``. Names are imported lazily, so ``gem --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EnvSummary": "gem_core.eval.run",
    "EvalSettings": "gem_core.eval.run",
    "evaluate": "gem_core.eval.run",
    "summarize": "gem_core.eval.run",
    "TRACE_SCHEMA": "gem_core.eval.traces",
    "TraceWriter": "gem_core.eval.traces",
    "read_trace": "gem_core.eval.traces",
}

__all__ = ["TRACE_SCHEMA", "EnvSummary", "EvalSettings", "TraceWriter", "evaluate", "read_trace", "summarize"]

if TYPE_CHECKING:
    from gem_core.eval.run import EnvSummary, EvalSettings, evaluate, summarize
    from gem_core.eval.traces import TRACE_SCHEMA, TraceWriter, read_trace


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_core.eval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
