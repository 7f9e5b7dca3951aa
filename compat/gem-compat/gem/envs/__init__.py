"""GEM's ``gem.envs``: ids come from the installed gem_core env packages, not from this module."""

from gem.envs.registration import ENV_REGISTRY, make, make_vec, register

__all__ = ["ENV_REGISTRY", "make", "make_vec", "register"]
