"""Rollouts by black-box harnesses: run an agent program against the gateway, get its episode.

A trainer's rollout step plays each prompt's episode with a **harness**: trusted trainer-side
code that starts an agent program (an ``openai`` SDK loop, a framework, a CLI) with the
session's base URL, waits for it, checks its work (a gem env's checker, a verifier) and
returns the reward. The agent program itself only ever sees the chat API: it cannot set its
reward. :func:`capture` runs one harness with a per-session generate function (the trainer's
engine client) and returns the captured :class:`~gem_core.rl.types.Episode`, branch points
included; the trainer adapters (``gem_trl.GatewayRollout``, ``gem_verl``'s
``gem_gateway_agent`` loop) lay it out for their trainers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.rl.types import Episode
from gem_gateway.capture import Gateway, Generate
from gem_gateway.errors import BadRequest, GenerateTimedOut

__all__ = ["Harness", "HarnessTask", "Outcome", "capture"]


@dataclass(frozen=True)
class HarnessTask:
    """What a harness gets for one episode.

    Attributes:
        base_url: The OpenAI base URL of the episode's session (``http://host:port/s/<key>/v1``).
        key: The session key.
        env_id: The gem env (or task family) the episode plays, when the trainer names one.
        seed: Its reset seed.
        extra: Anything else the trainer passes per prompt (a task's files, a question).
    """

    base_url: str
    key: str
    env_id: str | None = None
    seed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """How a harness's episode ended (a plain float return means ``Outcome(reward=x)``).

    Attributes:
        reward: The episode's reward (on its last call).
        rewards: One reward per call instead (a gem env stepped once per call).
        truncated: The harness was cut (a turn budget, a timeout), not finished.
        info: Kept in the last turn's ``info``.
        actions: What the env got for each call, when not the reply's text (``Turn.action``).
    """

    reward: float | None = None
    rewards: Sequence[float] | None = None
    truncated: bool = False
    info: Mapping[str, Any] | None = None
    actions: Sequence[str] | None = None


#: ``harness(task) -> reward | Outcome``, blocking (it runs in a worker thread while the gateway serves).
Harness = Callable[[HarnessTask], "float | Outcome"]


def _outcome(result: Any, key: str) -> Outcome:
    if isinstance(result, Outcome):
        outcome = result
    elif isinstance(result, (int, float)) and not isinstance(result, bool):
        outcome = Outcome(reward=float(result))
    else:
        raise BadRequest(
            f"the harness of session {key!r} returned {type(result).__name__}; return the episode's reward (a "
            "number) or a gem_gateway.harness.Outcome"
        )
    if (outcome.reward is None) == (outcome.rewards is None):
        raise BadRequest(f"the harness of session {key!r} must give exactly one of Outcome.reward and Outcome.rewards")
    values = [outcome.reward] if outcome.reward is not None else list(outcome.rewards or ())
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise BadRequest(f"the harness of session {key!r} returned a reward that is not a finite number: {values}")
    return outcome


async def capture(
    gateway: Gateway,
    url: str,
    key: str,
    harness: Harness,
    *,
    generate: Generate | None = None,
    env_id: str | None = None,
    seed: int | None = None,
    start_state_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
) -> Episode:
    """Run ``harness`` for one episode through ``gateway`` (served at ``url``) and return the episode.

    Args:
        gateway: The gateway; it must be served from this event loop (``serve``) or another thread.
        url: Its root URL (``http://host:port``).
        key: A fresh session key (one episode).
        harness: Blocking trainer code: runs the agent program against ``task.base_url``, returns its reward.
        generate: The session's generate function (default: the gateway's).
        env_id: Passed to the harness and recorded on the episode.
        seed: Passed to the harness and recorded on the episode.
        start_state_id: The start state that GRPO/RLOO groups share (default ``f"{env_id}/seed={seed}"``).
        extra: Passed to the harness.
        timeout_s: Longest the harness may run. Past it the session is closed, so the agent
            program's next call is refused (HTTP 409) and its thread ends.

    Raises:
        GenerateTimedOut: the harness ran past ``timeout_s``.
        BadRequest: the harness returned no usable reward.
        TrajectoryError: the agent program made no call.
        Exception: what the harness raised (the session is dropped first).
    """
    state = start_state_id or (f"{env_id}/seed={seed}" if env_id is not None else None)
    gateway.open_session(key, start_state_id=state, env_id=env_id, generate=generate)
    task = HarnessTask(base_url=f"{url}/s/{key}/v1", key=key, env_id=env_id, seed=seed, extra=dict(extra or {}))
    try:
        result = await asyncio.wait_for(asyncio.to_thread(harness, task), timeout_s)
        outcome = _outcome(result, key)
    except asyncio.TimeoutError:
        gateway.drop(key)
        raise GenerateTimedOut(f"the harness of session {key!r} ran past timeout_s={timeout_s} s") from None
    except BaseException:
        gateway.drop(key)
        raise
    try:
        episode = gateway.finish(
            key,
            outcome.reward,
            rewards=outcome.rewards,
            truncated=outcome.truncated,
            info=outcome.info,
            actions=outcome.actions,
        )
    except BaseException:
        gateway.drop(key)  # no call, or rewards that do not fit the calls: the key is spent all the same
        raise
    episode.seed = seed
    return episode
