"""GEM's ``gem.envs.math_env`` path, on gem-math: the class takes gem-math's options; ids keep GEM's names.

GEM's arguments are accepted too (translated, with a DeprecationWarning).
"""

from __future__ import annotations

from typing import Any

from gem._require import require
from gem.envs._gem_era import gem_era_class

__all__ = ["MathEnv"]

MathEnv: Any = gem_era_class(
    require("gem_math.env", "gem-math", "gem.envs.math_env.MathEnv").MathEnv, "gem.envs.math_env"
)
