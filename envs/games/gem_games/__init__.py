"""gem-games: offline multi-turn text games for gem, registered as ``game:<Name>-v0-<variant>``.

Importing this package is cheap: the games themselves live in one module each and are imported
only when ``gem_core.make`` builds one. See ``docs/games.md`` for rules, actions and rewards.
"""

__version__ = "0.1.0"
