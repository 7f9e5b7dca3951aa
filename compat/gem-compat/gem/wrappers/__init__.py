"""GEM's ``gem.wrappers``: the wrapper names of GEM's factory, built from gem_core's wrappers."""

from gem.wrappers.episode_tracking_wrapper import EpisodeTrackingWrapper
from gem.wrappers.format_wrapper import EncapsulateWrapper
from gem.wrappers.observation_wrapper import ObservationWrapper
from gem.wrappers.wrapper_factory import TOKENIZER_REQUIRED, WRAPPER_FACTORY, get_wrapper_fns

__all__ = [
    "TOKENIZER_REQUIRED",
    "WRAPPER_FACTORY",
    "EncapsulateWrapper",
    "EpisodeTrackingWrapper",
    "ObservationWrapper",
    "get_wrapper_fns",
]
