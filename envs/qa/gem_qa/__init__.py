"""gem-qa: question-answering envs (``qa:*``, ``eval:HotpotQA``...) scored by exact match or F1."""

__version__ = "0.1.0"
