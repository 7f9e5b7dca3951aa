"""The ``python`` tool: runs the model's code in the sandbox and shows it what the code printed."""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar

from gem_core.tools.base import Tool, ToolResult
from gem_tool_python.sandbox import SandboxConfig, SandboxPool

__all__ = ["PythonTool"]

_FENCE = re.compile(r"^\s*```(?:python|py)?[ \t]*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


def strip_fences(code: str) -> str:
    """Remove a Markdown code fence around the whole program (models often add one inside the tag)."""
    match = _FENCE.match(code)
    return match.group("body") if match else code


class PythonTool(Tool):
    """Run Python code in an isolated sandbox (see :class:`~gem_tool_python.SandboxConfig`).

    Args:
        **config: Fields of :class:`SandboxConfig` (limits, pool size, isolation level).
            Built through ``gem_core.make_tool("python", ...)`` they are validated first and
            a bad value raises :class:`~gem_core.errors.ConfigError` naming the field.
    """

    config_model: ClassVar[type[SandboxConfig]] = SandboxConfig
    name: ClassVar[str] = "python"
    description: ClassVar[str] = (
        "Runs a Python 3 program in a fresh sandbox and returns what it prints. Nothing persists "
        "between calls, so print every value you need to see. There is no network access."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The complete Python program to run."}},
        "required": ["code"],
    }
    tag_argument: ClassVar[str | None] = "code"

    def __init__(self, **config: Any) -> None:
        self.config = SandboxConfig.model_validate(config)
        self.pool = SandboxPool(self.config)

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult(error=f"argument 'code' must be a string with the program, got {type(code).__name__}")
        if not code.strip():
            return ToolResult(error="the program is empty: put Python code between the tags")
        result = await self.pool.arun(strip_fences(code))
        output = result.stdout + result.stderr
        if result.ok and not output:
            output = "(the program printed nothing; use print() to see values)"
        return ToolResult(
            output=output,
            error=result.error,
            elapsed_s=result.elapsed_s,
            metadata={"status": result.status, "isolation": result.isolation, "exit_code": result.exit_code},
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self.pool.close)

    def close(self) -> None:
        """Stop the worker pool (sync counterpart of :meth:`aclose`)."""
        self.pool.close()
