"""GEM's ``gem.envs.reasoning_gym`` path, on gem-reasoning-gym (its options; ids keep GEM's names)."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["ReasoningGymEnv"]

ReasoningGymEnv: Any = require(
    "gem_rg.env", "gem-reasoning-gym", "gem.envs.reasoning_gym.ReasoningGymEnv"
).ReasoningGymEnv
