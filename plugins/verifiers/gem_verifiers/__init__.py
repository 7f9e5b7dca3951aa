"""gem-verifiers: verifiers (``verifiers.v1``) episodes in gem.

:func:`to_gem_episodes` turns a ``verifiers.v1.Episode`` (its traces' token graphs) into
``gem_core.rl`` episodes, its rewards and metrics kept in ``Episode.metadata["verifiers"]``;
:func:`run_episodes` runs episodes with the env's own ``run_episode`` and converts them.
See ``docs/verifiers.md``.
"""

from gem_verifiers.episodes import (
    VerifiersEpisodeFailed,
    VerifiersTraceError,
    message_text,
    run_episodes,
    to_gem_episodes,
)

__all__ = ["VerifiersEpisodeFailed", "VerifiersTraceError", "message_text", "run_episodes", "to_gem_episodes"]
