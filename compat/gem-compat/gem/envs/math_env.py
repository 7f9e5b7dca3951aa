"""GEM's ``gem.envs.math_env`` path, on gem-math: the class takes gem-math's options; ids keep GEM's names."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["MathEnv"]

MathEnv: Any = require("gem_math.env", "gem-math", "gem.envs.math_env.MathEnv").MathEnv
