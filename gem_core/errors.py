"""The one exception hierarchy of gem_core.

Every error raised on purpose by gem_core, its plugins and adapters derives from
:class:`GemCoreError`. Each class says when it is raised; messages name what was
wrong and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorpusError",
    "DatasetUnavailable",
    "DuplicateIdError",
    "EntryPointError",
    "EnvCheckError",
    "EnvNotFound",
    "GemCoreError",
    "GemCoreWarning",
    "InvalidIdError",
    "MCPConnectionError",
    "PluginLoadError",
    "PluginValidationError",
    "PluginWarning",
    "RegistrationError",
    "ResetNeeded",
    "SandboxIsolationWarning",
    "ToolCallParseError",
    "ToolError",
    "ToolNotFound",
    "ToolTimeout",
    "WrapperNotFound",
]


class GemCoreError(Exception):
    """Base class of every error gem_core raises on purpose."""


class GemCoreWarning(UserWarning):
    """Base class of every warning gem_core emits."""


class PluginWarning(GemCoreWarning):
    """A plugin was skipped (broken, duplicate) because skipping was asked for."""


class RegistrationError(GemCoreError):
    """A spec could not be registered (bad id, bad entry point, conflicting alias)."""


class InvalidIdError(RegistrationError, ValueError):
    """An id does not follow ``namespace:Name[-vN][-variant]``."""


class DuplicateIdError(RegistrationError):
    """Two owners registered the same id; the message names both."""


class EnvNotFound(GemCoreError, LookupError):
    """No env is registered under the requested id; the message suggests close ids."""


class ToolNotFound(GemCoreError, LookupError):
    """No tool is registered under the requested name."""


class WrapperNotFound(GemCoreError, LookupError):
    """No wrapper is registered under the requested name."""


class EntryPointError(GemCoreError, ImportError):
    """A ``"module:attr"`` entry point could not be imported or resolved."""


class ConfigError(GemCoreError, ValueError):
    """A user-facing configuration is invalid; the message names the field."""


class PluginLoadError(GemCoreError):
    """A plugin failed to import or its hook raised; names entry point, distribution, version."""


class PluginValidationError(GemCoreError):
    """A plugin returned something that is not a valid declaration."""


class ResetNeeded(GemCoreError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class EnvCheckError(GemCoreError, AssertionError):
    """``gem_core.testing.check_env`` found a contract violation."""


class ToolError(GemCoreError):
    """A tool could not be built or run (not raised for errors returned to the model)."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool call ran past its time limit."""


# --- tools ---


class SandboxIsolationWarning(GemCoreWarning):
    """The Python sandbox fell back to weaker isolation than Linux namespaces (said once per level)."""


class ToolCallParseError(ToolError, ValueError):
    """A tool call in a model's response is malformed (raised only by strict parsing helpers)."""


# --- search and MCP tools ---


class CorpusError(ToolError, ValueError):
    """A search corpus is missing or malformed; the message names the file and line."""


class MCPConnectionError(ToolError, ConnectionError):
    """An MCP server could not be started or reached, or its session was lost."""


# --- reasoning envs ---


class DatasetUnavailable(GemCoreError, OSError):
    """A dataset env could not load its data (hub unreachable, missing local file); says how to use a local copy."""
