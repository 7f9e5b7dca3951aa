"""gem envs in OpenRLHF 0.11: an AgentExecutor for --train.agent_func_path and per-turn ReBN."""
