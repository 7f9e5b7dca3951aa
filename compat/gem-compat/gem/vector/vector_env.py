"""GEM's ``gem.vector.vector_env``: gem-core's ``VectorEnv`` and ``AutoresetMode``."""

from gem_core.vector import AutoresetMode, VectorEnv

__all__ = ["AutoresetMode", "VectorEnv"]
