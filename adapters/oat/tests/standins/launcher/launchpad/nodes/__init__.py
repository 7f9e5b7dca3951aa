"""Stand-in for ``launchpad.nodes``."""
