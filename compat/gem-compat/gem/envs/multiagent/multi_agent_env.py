"""GEM's ``gem.envs.multiagent.multi_agent_env`` module path."""

from gem.multiagent.multi_agent_env import AgentSelector, MultiAgentEnv

__all__ = ["AgentSelector", "MultiAgentEnv"]
