"""GEM's ``gem.envs.code_env`` path, on gem-code: the class takes gem-code's options; ids keep GEM's names."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["CodeEnv"]

CodeEnv: Any = require("gem_code.env", "gem-code", "gem.envs.code_env.CodeEnv").CodeEnv
