"""gem-code: programming-problem envs (``code:*``) whose solutions run against stdin/stdout tests in the sandbox."""

__version__ = "0.1.0"
