"""Vector envs: many text envs stepped as one batch, with Gymnasium's autoreset modes.

:func:`make_vec` builds one from registered ids; its ``backend`` says where the envs run:

* ``"sync"``: :class:`SyncVectorEnv`, a loop in the caller's thread.
* ``"async"``: :class:`AsyncVectorEnv`, async envs on an event loop, sync envs in
  threads, CPU-heavy envs in worker processes.
* ``"process"``: :class:`ProcessVectorEnv`, every env in worker processes.
* ``"ray"``: :class:`~gem_core.vector.ray.RayVectorEnv`, every env in Ray actors
  (``gem-core[ray]``; imported from :mod:`gem_core.vector.ray`).

All backends share the per-env logic of :class:`~gem_core.vector.member.Member`, so the same
seeds replay the same episodes on every backend.
"""

from __future__ import annotations

from gem_core.seed_streams import episode_seed, episode_seeds
from gem_core.vector.async_vector import AsyncVectorEnv
from gem_core.vector.base import AutoresetMode, VectorEnv, VectorResetReturn, VectorStepReturn
from gem_core.vector.make import BACKENDS, build_env, make_vec
from gem_core.vector.member import RemoteEnvError
from gem_core.vector.process import ProcessEnv, ProcessVectorEnv
from gem_core.vector.sync import SyncVectorEnv

__all__ = [
    "BACKENDS",
    "AsyncVectorEnv",
    "AutoresetMode",
    "ProcessEnv",
    "ProcessVectorEnv",
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
