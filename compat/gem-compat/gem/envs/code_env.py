"""GEM's ``gem.envs.code_env`` path, on gem-code; ids keep GEM's names.

The class takes gem-code's options and GEM's arguments (translated, with a DeprecationWarning).
"""

from __future__ import annotations

from typing import Any

from gem._require import require
from gem.envs._gem_era import gem_era_class

__all__ = ["CodeEnv"]

_Base: Any = gem_era_class(require("gem_code.env", "gem-code", "gem.envs.code_env.CodeEnv").CodeEnv, __name__)


class CodeEnv(_Base):  # type: ignore[misc]
    __doc__ = _Base.__doc__

    @property
    def tests(self) -> Any:
        """GEM's ``env.tests``: the current problem's tests as the dataset holds them (None between episodes)."""
        row = self.row
        return None if row is None else row[self.config.answer_column]
