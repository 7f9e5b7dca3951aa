"""GEM's ``gem.utils``: the constants, parsing helpers and debug printer GEM-style code imports."""
