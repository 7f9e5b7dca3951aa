"""The module to give RL2 as ``rollout.env_path``: gem envs behind RL2's ``reset``/``step``.

RL2 (rl-square 0.0.2) loads this file by path and calls the two coroutines below for
every dataset row without a ``prompt``; each row's ``extra_info`` names the env
(``env_id``, ``seed``, ``env_kwargs``, ...; see ``gem-rl2-dataset``). ``gem-rl2-train``
sets ``rollout.env_path`` to this file when it is not given. The episodes are played by
:class:`gem_rl2.episodes.RL2Episodes`, configured from ``GEM_RL2_SETTINGS``.
"""

from __future__ import annotations

from typing import Any

# Absolute import: RL2 executes this file as a module of its own ("custom_module"),
# so the episode table lives in gem_rl2.episodes, shared with everything else.
from gem_rl2.episodes import default_episodes
from gem_rl2.finish import take_finish


async def reset(extra_info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Start the row's episode: the first prompt as chat-template text, and ``extra_info`` with its episode id."""
    return await default_episodes().reset(extra_info)


async def step(state: str, action: str, extra_info: dict[str, Any]) -> dict[str, Any]:
    """One turn: RL2's ``{"next_state", "reward", "score", "done", "extra_info"}``.

    ``next_state`` extends ``state + action``, so RL2 continues the episode's one token sequence.
    Whether the reply stopped or was cut is SGLang's finish reason, which
    :func:`gem_rl2.finish.install_finish_reasons` (``gem-rl2-train``) carries here.
    """
    finish = take_finish()
    return await default_episodes().step(state, action, extra_info, finish.reason, finish.last_token_id)
