"""gem environments in RL2 (rl-square 0.0.2): an env module for ``rollout.env_path`` and per-turn ReBN."""
