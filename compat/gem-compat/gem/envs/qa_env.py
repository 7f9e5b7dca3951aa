"""GEM's ``gem.envs.qa_env`` path, on gem-qa: the class takes gem-qa's options; ids keep GEM's names."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["QaEnv"]

QaEnv: Any = require("gem_qa.env", "gem-qa", "gem.envs.qa_env.QaEnv").QaEnv
