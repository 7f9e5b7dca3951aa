"""GEM's shared constants (values as in gem-llm 0.1)."""

from __future__ import annotations

__all__ = ["INVALID_ACTION", "TERMINAL_STATE", "LanguageGameReward"]

TERMINAL_STATE = "<\uff5cTERMINAL_STATE\uff5c>"  # fullwidth bars, as in GEM
INVALID_ACTION = "<\uff5cINVALID_ACTION\uff5c>"


class LanguageGameReward:
    """Reward levels of GEM's language games."""

    success_reward = 1.0
    internal_step_reward = 0.0
    fail_reward = 0.0
    invalid_action_reward = 0.0
    format_error_reward = -0.1
