"""The action, observation and state of a gem env on OpenEnv's wire (pydantic models; no OpenEnv code).

They have the fields OpenEnv 0.10's ``Action``/``Observation``/``State`` bases have (``metadata``;
``done``, ``reward``, ``metadata``; ``episode_id``, ``step_count``) and the same settings (actions and
observations forbid unknown fields, a state allows them), so ``/schema`` reads as any OpenEnv env's
and OpenEnv's typed clients can parse them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GemAction", "GemObservation", "GemState"]


class GemAction(BaseModel):
    """One turn of the agent: the model's reply, as text (gem envs parse it themselves)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    metadata: dict[str, Any] = Field(default_factory=dict, description="Additional metadata for the action")
    text: str = Field(description="The model's reply for this turn (gem envs take raw text).")


class GemObservation(BaseModel):
    """What a gem env answers; ``done`` is ``terminated or truncated``, ``reward`` is this turn's alone."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    done: bool = Field(default=False, description="Whether the episode has terminated")
    reward: bool | int | float | None = Field(default=None, description="Reward signal from the last action")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Additional metadata for the observation")
    text: str = Field(default="", description="The observation shown to the model.")
    terminated: bool = Field(default=False, description="The task ended (solved, failed); no future value.")
    truncated: bool = Field(default=False, description="Cut from outside the task (turn limit); not terminal.")
    info: dict[str, Any] = Field(default_factory=dict, description="The gem env's info dict (JSON-safe).")


class GemState(BaseModel):
    """The session's episode: which env, its seed, the turns taken and the return so far."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    episode_id: str | None = Field(default=None, description="Unique identifier for the current episode")
    step_count: int = Field(default=0, ge=0, description="Number of steps taken in the current episode")
    env_id: str = Field(default="", description="The gem id this server plays.")
    seed: int | None = Field(default=None, description="The seed of the current episode.")
    episode_return: float = Field(default=0.0, description="Sum of this episode's rewards.")
    done: bool = Field(default=False, description="The episode ended (terminated or truncated).")
