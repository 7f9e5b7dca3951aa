"""GEM's ``EpisodeTrackingWrapper``, as gem_core's episode statistics."""

from __future__ import annotations

from typing import Any

from gem_core.wrappers import episode_statistics

__all__ = ["EpisodeTrackingWrapper"]


def EpisodeTrackingWrapper(env: Any) -> Any:  # GEM's class name
    """Episode return, length, tool calls and success in the final step's ``info["episode"]``.

    GEM's wrapper put running ``step_counter``/``cumulative_rewards`` (and ``prev_ep_*``) in every
    info; gem_core reports the finished episode once, in ``info["episode"]``.
    """
    return episode_statistics(env)
