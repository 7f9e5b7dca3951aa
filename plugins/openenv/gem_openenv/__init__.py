"""gem <-> OpenEnv."""
