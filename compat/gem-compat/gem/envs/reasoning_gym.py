"""GEM's ``gem.envs.reasoning_gym``: ``ReasoningGymEnv`` is gem-reasoning-gym's (its constructor takes gem-reasoning-gym's options; ids keep GEM's names)."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["ReasoningGymEnv"]

ReasoningGymEnv: Any = require("gem_rg.env", "gem-reasoning-gym", "gem.envs.reasoning_gym.ReasoningGymEnv").ReasoningGymEnv
