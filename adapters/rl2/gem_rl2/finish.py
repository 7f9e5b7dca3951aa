"""SGLang's finish reason, carried from RL2's rollout to the env module's ``step``.

RL2 0.0.2's ``Rollout.rollout`` hands the env module only the generated text
(``env.step(state_text, action_text, extra_info)``) and reads SGLang's
``meta_info.finish_reason`` (``{"type": "stop" | "length" | "abort", ...}``) after the step,
for its logs only. So a reply cut at ``max_new_tokens`` would have to be told from a
stopped one by its text, and text can end with the stop token's text without the stop
token (ordinary tokens spelling it). :func:`install_finish_reasons` wraps RL2's
``async_generate``: each response's finish reason and last sampled token id are kept in
a context variable of the rollout task that asked for it, and the env module's ``step``
(awaited next, in the same task) takes them, once. ``gem-rl2-train`` installs it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any, NamedTuple

from gem_core.errors import ConfigError, TrajectoryError

__all__ = ["Finish", "install_finish_reasons", "read_finish", "take_finish"]


class Finish(NamedTuple):
    """What SGLang said about one generation.

    Attributes:
        reason: ``meta_info.finish_reason["type"]`` (``"stop"``, ``"length"``, ``"abort"``),
            or whatever the server sent instead (``None``, a non-mapping), for the engine's
            generate contract to refuse.
        last_token_id: The last sampled id (``meta_info.output_token_logprobs[-1][1]``), if any.
    """

    reason: object
    last_token_id: int | None


_LAST: contextvars.ContextVar[Finish | None] = contextvars.ContextVar("gem_rl2_finish", default=None)
_installed = False


def read_finish(response: object) -> Finish:
    """The :class:`Finish` of one SGLang ``/generate`` response; odd shapes give a ``reason`` the contract refuses."""
    meta = response.get("meta_info") if isinstance(response, Mapping) else None
    finish = meta.get("finish_reason") if isinstance(meta, Mapping) else None
    reason = finish.get("type") if isinstance(finish, Mapping) else finish
    tokens = meta.get("output_token_logprobs") if isinstance(meta, Mapping) else None
    last = tokens[-1] if isinstance(tokens, list) and tokens else None
    token = last[1] if isinstance(last, (list, tuple)) and len(last) > 1 else None
    return Finish(reason, token if isinstance(token, int) and not isinstance(token, bool) else None)


def install_finish_reasons(rollout_module: Any) -> None:
    """Make ``rollout_module`` (``RL2.workers.rollout``) note each generation's :class:`Finish`; idempotent.

    ``async_generate`` is imported by name into that module, so that is the binding RL2's
    ``Rollout.rollout`` calls.
    """
    global _installed
    original = rollout_module.async_generate
    if not getattr(original, "gem_finish", False):

        async def async_generate(url: Any, states: Any, sampling_params: Any) -> Any:
            _LAST.set(None)  # a failed request leaves nothing behind for the next step to read
            response = await original(url, states, sampling_params)
            _LAST.set(read_finish(response))
            return response

        async_generate.gem_finish = True  # type: ignore[attr-defined]
        async_generate.__wrapped__ = original  # type: ignore[attr-defined]
        rollout_module.async_generate = async_generate
    _installed = True


def take_finish() -> Finish:
    """The :class:`Finish` of this rollout task's last generation; each is taken once.

    Raises:
        ConfigError: :func:`install_finish_reasons` was not called in this process (RL2 run
            without ``gem-rl2-train``).
        TrajectoryError: No generation since the last ``step`` of this task.
    """
    if not _installed:
        raise ConfigError(
            "RL2's rollout does not pass SGLang's finish reason to the env module, so a reply cut at max_new_tokens "
            "cannot be told from a finished one: launch with gem-rl2-train, or call "
            "gem_rl2.finish.install_finish_reasons(RL2.workers.rollout) before the rollout"
        )
    finish = _LAST.get()
    if finish is None:
        raise TrajectoryError(
            "the env module's step() came without a generation of its own (no SGLang response in this rollout task "
            "since the last step); RL2's rollout must call async_generate before each step"
        )
    _LAST.set(None)
    return finish
