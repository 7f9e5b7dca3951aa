"""Stand-in for ``vllm.lora``."""
