"""Vector envs: many text envs stepped as one batch, with Gymnasium's autoreset modes.

* :class:`SyncVectorEnv`: a loop in the caller's thread.
* :class:`AsyncVectorEnv`: an event loop running async envs natively, sync envs in
  threads and CPU-heavy envs in worker processes.
* :func:`make_vec`: either one, from registered ids.
"""

from __future__ import annotations

from gem_core.vector.async_vector import AsyncVectorEnv
from gem_core.vector.base import (
    AutoresetMode,
    VectorEnv,
    VectorResetReturn,
    VectorStepReturn,
    episode_seed,
    episode_seeds,
)
from gem_core.vector.make import build_env, make_vec
from gem_core.vector.process import ProcessEnv, RemoteEnvError
from gem_core.vector.sync import SyncVectorEnv

__all__ = [
    "AsyncVectorEnv",
    "AutoresetMode",
    "ProcessEnv",
    "RemoteEnvError",
    "SyncVectorEnv",
    "VectorEnv",
    "VectorResetReturn",
    "VectorStepReturn",
    "build_env",
    "episode_seed",
    "episode_seeds",
    "make_vec",
]
