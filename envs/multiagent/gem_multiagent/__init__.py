"""gem-multiagent: multi-agent text envs (two-player games, negotiation, a cooperative clue game, a shop)."""
