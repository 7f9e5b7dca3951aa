"""gem-terminal: multi-turn shell tasks (``terminal:*``) in an episode-scoped sandbox."""

__version__ = "0.1.0"
