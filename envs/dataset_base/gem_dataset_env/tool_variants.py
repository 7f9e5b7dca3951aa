"""Tool-using variants of the dataset envs: the env wrapped in gem_core's ``ToolEnvWrapper``.

Registered as their own ids (``math:GSM8K-python``, ``qa:HotpotQA-search``...) through
:func:`tool_env`, so ``gem_core.make`` takes the env's options and the wrapper's together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_core.core import Env
from gem_core.registry import load_entry_point

__all__ = ["tool_env"]


def tool_env(
    *,
    env: str,
    tools: Sequence[str],
    tool_defaults: dict[str, Any] | None = None,
    tool_wrapper: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> Env:
    """Build the env ``env`` (``"module:Class"``) from ``env_kwargs`` and give it ``tools``.

    Args:
        env: Entry point of the inner env.
        tools: Registered tool names (``"python"``, ``"search"``).
        tool_defaults: The variant's wrapper settings (set by the registered spec).
        tool_wrapper: Your overrides of :class:`gem_core.tools.wrapper.ToolWrapperConfig` fields,
            e.g. ``{"max_tool_calls": 2}``; merged over ``tool_defaults``.
        **env_kwargs: Options of the inner env (``path=``, ``split=``...).

    Raises:
        gem_core.errors.ToolNotFound: the tool's plugin is not installed.
        gem_core.errors.ConfigError: a bad env or wrapper option (the message names it).
    """
    from gem_core.tools.wrapper import ToolEnvWrapper

    inner = load_entry_point(env)(**env_kwargs)
    try:
        return ToolEnvWrapper(inner, list(tools), **{**(tool_defaults or {}), **(tool_wrapper or {})})
    except BaseException:
        inner.close()
        raise
