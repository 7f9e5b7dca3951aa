"""The file to pass as OpenRLHF's ``--train.agent_func_path`` (``gem-openrlhf-train`` does it for you).

OpenRLHF loads this file by path inside every vLLM actor and builds ``AgentExecutor()``.
Print its path with ``python -m gem_openrlhf.agent_func``.
"""

from __future__ import annotations

from gem_openrlhf.executor import GemAgentExecutor

__all__ = ["AgentExecutor"]


class AgentExecutor(GemAgentExecutor):
    """The name OpenRLHF looks for; see :class:`gem_openrlhf.executor.GemAgentExecutor`."""


if __name__ == "__main__":
    print(__file__)
