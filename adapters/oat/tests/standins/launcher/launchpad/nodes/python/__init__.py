"""Stand-in for ``launchpad.nodes.python``."""

local_multi_processing = None
