"""Tool base class and the typed call/result records."""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Tool", "ToolCall", "ToolResult"]


class ToolCall(BaseModel):
    """One tool call parsed out of a model's response.

    Attributes:
        name: The tool's name.
        arguments: Keyword arguments, already decoded from JSON or tag content.
        raw: The exact text of the call in the response.
        syntax: ``"tag"`` for ``<python>...</python>``-style calls, ``"json"`` for
            ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.
        span: ``(start, end)`` character offsets of ``raw`` in the response.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw: str = ""
    syntax: Literal["tag", "json"] = "tag"
    span: tuple[int, int] = (0, 0)


class ToolResult(BaseModel):
    """What a tool call produced. ``error`` is returned to the model, not raised.

    Attributes:
        output: Text shown to the model.
        error: A message for the model when the call failed (bad arguments, timeout, crash).
        elapsed_s: Wall-clock seconds the call took.
        metadata: Tool-specific facts (exit code, documents retrieved...).
    """

    output: str = ""
    error: str | None = None
    elapsed_s: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.error is None

    def render(self) -> str:
        """The text to show the model."""
        if self.error is None:
            return self.output
        return f"{self.output}\n[error] {self.error}".strip()


class Tool(abc.ABC):
    """A tool an agent can call.

    Subclasses set :attr:`name`, :attr:`description` and :attr:`parameters` (a JSON
    schema object), and implement :meth:`execute`. Execution is async; errors that the
    model should see are returned in :class:`ToolResult.error`, never raised.

    Attributes:
        name: Identifier used in calls (``<name>...</name>`` or ``{"name": name}``).
        description: One paragraph telling the model what the tool does.
        parameters: JSON schema of the arguments (OpenAI function ``parameters``).
        tag_argument: For the tag syntax, the argument that receives the tag's content.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    tag_argument: ClassVar[str | None] = None

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @abc.abstractmethod
    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        """Run one call. Must not raise for bad arguments; return an error result instead."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources (worker pools, sessions); idempotent."""

    def instructions(self) -> str:
        """How to call this tool, added to the first observation by the tool wrapper."""
        if self.tag_argument:
            return f"- {self.name}: {self.description} Call it as <{self.name}>...</{self.name}>."
        return f"- {self.name}: {self.description}"
