"""GEM compatibility: the ``gem`` package of gem-llm, on top of gem_core.

``import gem; gem.make(...)``, ``gem.make_vec``, ``gem.register``, ``gem.Env`` and the wrapper
names of ``gem.wrappers.wrapper_factory`` behave as in GEM, for the subset documented in
docs/migrating-from-gem.md; envs come from gem_core's registry (GEM's ids are kept by the env
packages), so GEM code and gem_core code share one registry.
"""

from __future__ import annotations

from gem.core import Env, EnvWrapper, ObservationWrapper
from gem.envs.registration import ENV_REGISTRY, make, make_vec, print_envs, register

__version__ = "0.1.0"

__all__ = ["ENV_REGISTRY", "Env", "EnvWrapper", "ObservationWrapper", "make", "make_vec", "print_envs", "register"]
