"""GEM's ``gem.envs.qa_env`` path, on gem-qa: the class takes gem-qa's options; ids keep GEM's names.

GEM's arguments are accepted too (translated, with a DeprecationWarning).
"""

from __future__ import annotations

from typing import Any

from gem._require import require
from gem.envs._gem_era import gem_era_class

__all__ = ["QaEnv"]

QaEnv: Any = gem_era_class(require("gem_qa.env", "gem-qa", "gem.envs.qa_env.QaEnv").QaEnv, "gem.envs.qa_env")
