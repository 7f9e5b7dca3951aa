"""GEM's ``gem.envs.multiagent`` is not provided on gem-core; importing it says why and what to use."""

from gem._require import NO_MULTIAGENT

raise ImportError(NO_MULTIAGENT)
