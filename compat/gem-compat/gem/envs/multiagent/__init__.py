"""GEM's ``gem.envs.multiagent`` is not provided on gem-core; importing it says why and what to use.

See docs/migrating-from-gem.md (section "Multi-agent").
"""

raise ImportError(
    "gem.envs.multiagent (MultiAgentEnv, AgentSelector) is not provided by gem-compat: GEM registered no "
    "multi-agent ids and its MultiAgentEnv.reset(seed=...) fails in GEM 0.1 itself. On gem-core, give each agent "
    "its own env and episode (gem_core.episode.EpisodeEngine) and exchange messages in your own loop; see "
    "docs/migrating-from-gem.md#multi-agent."
)
