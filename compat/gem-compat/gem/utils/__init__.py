"""GEM's ``gem.utils``: the constants GEM-style env code imports."""
