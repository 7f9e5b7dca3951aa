"""GEM's ``SyncVectorEnv(env_ids, env_fns, autoreset_mode)`` on gem-core's sync vector env."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gem_core.vector import AutoresetMode
from gem_core.vector import SyncVectorEnv as _CoreSync

__all__ = ["SyncVectorEnv"]


class SyncVectorEnv(_CoreSync):
    """GEM's argument order (ids first); ``autoreset_mode`` defaults to ``SAME_STEP`` as GEM's code does."""

    def __init__(
        self,
        env_ids: Sequence[str],
        env_fns: Sequence[Callable[[], Any]],
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        **options: Any,
    ) -> None:
        super().__init__(list(env_fns), autoreset_mode=AutoresetMode(autoreset_mode), **options)
        self.env_ids = list(env_ids)
