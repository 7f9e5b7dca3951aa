"""GEM's ``PythonCodeTool`` with GEM's arguments, on gem-tool-python's sandboxed python tool."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["PythonCodeTool"]

_PythonTool: Any = require("gem_tool_python", "gem-tool-python", "gem.tools.python_code_tool").PythonTool


class PythonCodeTool(_PythonTool):  # type: ignore[misc]
    """``PythonCodeTool(timeout=5, sandbox_type="none", keep_error_last_line=False)``.

    ``timeout`` is honoured (``timeout_s``). Code always runs in gem-tool-python's sandbox
    whatever ``sandbox_type`` says, and errors come back whole (``keep_error_last_line`` is
    accepted and has no effect). Other sandbox options pass through as keywords.
    """

    def __init__(
        self, timeout: float = 5, sandbox_type: str = "none", keep_error_last_line: bool = False, **config: Any
    ) -> None:
        del sandbox_type, keep_error_last_line  # see the docstring
        super().__init__(timeout_s=timeout, **config)
