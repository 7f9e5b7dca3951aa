"""GEM's ``WRAPPER_FACTORY`` names and ``get_wrapper_fns``, built from gem_core's wrappers and tools.

The tool names need the tool plugins (``gem-tool-python`` for ``python_tool*``,
``gem-tool-search`` for ``search_tool*``); each env gets its own tool instance (GEM shared
one instance between every env using a preset).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gem.wrappers.episode_tracking_wrapper import EpisodeTrackingWrapper
from gem.wrappers.format_wrapper import EncapsulateWrapper
from gem.wrappers.observation_wrapper import ObservationWrapper

__all__ = ["TOKENIZER_REQUIRED", "WRAPPER_FACTORY", "get_wrapper_fns"]


def _tools(tool: str, call_reward: float, success_reward: float, max_tool_calls: int = 5) -> Callable[..., Any]:
    def wrap(env: Any) -> Any:
        from gem_core.tools import ToolEnvWrapper

        return ToolEnvWrapper(
            env, [tool], call_reward=call_reward, success_reward=success_reward, max_tool_calls=max_tool_calls
        )

    return wrap


#: GEM's preset names. Order still matters as in GEM: tools, then an observation wrapper, then tracking.
WRAPPER_FACTORY: dict[str, Callable[..., Any]] = {
    "python_tool": _tools("python", 0.05, 0.25),
    "python_tool_no_int_reward": _tools("python", 0.0, 0.0),
    "python_tool_no_int_reward_last_line_error": _tools("python", 0.0, 0.0),
    "search_tool": _tools("search", 0.3, 0.0),
    "search_tool_no_int_reward": _tools("search", 0.0, 0.0),
    "concat": functools.partial(ObservationWrapper, include_action=False, include_chat_template=False),
    "concat_chat": functools.partial(ObservationWrapper, include_action=True, include_chat_template=True),
    "concat_with_action": functools.partial(ObservationWrapper, include_action=True, include_chat_template=False),
    "concat_chat_on_reset": functools.partial(
        ObservationWrapper, include_action=True, include_chat_template=False, apply_chat_template_on_reset=True
    ),
    "episode_tracking": EpisodeTrackingWrapper,
    "answer_boxed": functools.partial(EncapsulateWrapper, prefix="\\boxed{", suffix="}"),
    "answer_tags": functools.partial(EncapsulateWrapper, prefix="<answer>", suffix="</answer>"),
}

#: Names that take the tokenizer given to :func:`get_wrapper_fns`.
TOKENIZER_REQUIRED = ["concat_chat", "concat_chat_on_reset"]


def get_wrapper_fns(wrappers: str, tokenizer: Any = None) -> list[Callable[..., Any]]:
    """The wrapper callables for a comma-separated list of names, e.g. ``"python_tool,concat_chat"``.

    Raises:
        gem_core.errors.WrapperNotFound: an unknown name (the message lists the known ones).
    """
    from gem_core.errors import WrapperNotFound

    fns = []
    for name in filter(None, (w.strip() for w in (wrappers or "").split(","))):
        if name not in WRAPPER_FACTORY:
            raise WrapperNotFound(f"unknown GEM wrapper {name!r}; known: {', '.join(WRAPPER_FACTORY)}")
        fn = WRAPPER_FACTORY[name]
        if name in TOKENIZER_REQUIRED and tokenizer is not None:
            fn = functools.partial(fn, tokenizer=tokenizer)
        fns.append(fn)
    return fns
