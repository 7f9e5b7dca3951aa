"""GEM's ``AsyncVectorEnv(env_ids, env_fns, autoreset_mode)`` on gem-core's async vector env, with ``.envs``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gem_core.vector import AsyncVectorEnv as _CoreAsync
from gem_core.vector import AutoresetMode

__all__ = ["AsyncVectorEnv", "sub_envs"]


def sub_envs(vector_env: _CoreAsync) -> list[Any]:
    """The sub-envs of a gem-core async vector env, in index order (GEM's ``envs`` attribute).

    A sync env that gem-core runs in a thread is returned as it is; a native async env too.
    """
    members = {i: m for group in vector_env._groups for i, m in group.members.items()}
    return [members[i].env for i in range(vector_env.num_envs)]


class AsyncVectorEnv(_CoreAsync):
    """GEM's argument order (ids first); ``autoreset_mode`` defaults to ``SAME_STEP``; ``.envs`` as in GEM."""

    def __init__(
        self,
        env_ids: Sequence[str] | None,
        env_fns: Sequence[Callable[[], Any]],
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        **options: Any,
    ) -> None:
        super().__init__(list(env_fns), autoreset_mode=AutoresetMode(autoreset_mode), **options)
        self.env_ids = list(env_ids or [])

    @property
    def envs(self) -> list[Any]:
        """The sub-envs, in index order."""
        return sub_envs(self)
