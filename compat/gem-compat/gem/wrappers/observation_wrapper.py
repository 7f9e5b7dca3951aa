"""GEM's ``ObservationWrapper``: the episode so far as the observation, via gem_core's chat history."""

from __future__ import annotations

from typing import Any

from gem_core.wrappers import chat_history

__all__ = ["ObservationWrapper"]


def ObservationWrapper(  # GEM's class name; returns gem_core's ChatHistory
    env: Any,
    include_action: bool = True,
    include_chat_template: bool = True,
    apply_chat_template_on_reset: bool = False,
    max_history_length: int | None = None,
    tokenizer: Any = None,
) -> Any:
    """Wrap ``env`` so each observation is the history, as GEM's ``ObservationWrapper`` does.

    GEM's flags pick a gem_core chat mode: no actions -> ``observation``; actions without a
    template -> ``observation_action``; ``apply_chat_template_on_reset`` -> ``chat_first_turn``;
    a template -> ``chat``. ``max_history_length`` becomes ``max_history``. Returns gem_core's
    ``ChatHistory`` (or its async twin), which also puts the messages in ``info["messages"]``.
    """
    if apply_chat_template_on_reset:
        mode = "chat_first_turn"
    elif include_chat_template:
        mode = "chat"
    else:
        mode = "observation_action" if include_action else "observation"
    return chat_history(env, mode=mode, max_history=max_history_length, tokenizer=tokenizer)
