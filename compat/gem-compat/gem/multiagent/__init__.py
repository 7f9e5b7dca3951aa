"""GEM's ``gem.multiagent``: ``MultiAgentEnv`` and ``AgentSelector`` on gem-core (see docs/migrating-from-gem.md)."""

from gem.multiagent.multi_agent_env import AgentSelector, MultiAgentEnv

__all__ = ["AgentSelector", "MultiAgentEnv"]
