"""gem-math: single-turn math envs (``math:*``, ``eval:MATH500``...) graded by math-verify."""

__version__ = "0.1.0"
