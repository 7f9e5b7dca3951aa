"""GEM's ``gem.envs.multiagent`` (its older path): the same classes as :mod:`gem.multiagent`."""

from gem.multiagent.multi_agent_env import AgentSelector, MultiAgentEnv

__all__ = ["AgentSelector", "MultiAgentEnv"]
