"""gem tool ``python``: model-written Python run in an isolated sandbox with a warm worker pool."""

from gem_tool_python.sandbox import SandboxConfig, SandboxPool, SandboxResult, detect_isolation
from gem_tool_python.tool import PythonTool

__all__ = ["PythonTool", "SandboxConfig", "SandboxPool", "SandboxResult", "detect_isolation"]
