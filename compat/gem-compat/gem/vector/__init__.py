"""GEM's ``gem.vector``: its vector env classes by their paths, with GEM's constructor."""

from gem.vector.async_vector_env import AsyncVectorEnv
from gem.vector.sync_vector_env import SyncVectorEnv
from gem.vector.vector_env import AutoresetMode, VectorEnv

__all__ = ["AsyncVectorEnv", "AutoresetMode", "SyncVectorEnv", "VectorEnv"]
