"""Two OpenEnv envs written with OpenEnv's own SDK (no gem code), served by its own ``create_app``.

``python native_server.py KIND PORT MAX_SESSIONS``; KIND is ``target`` (a JSON action with two
fields) or ``echo`` (a one-field text action). They stand for any env published for OpenEnv.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class MoveAction(Action):
    op: Literal["add", "sub"] = Field(description="add or subtract")
    amount: int = Field(ge=0, le=9, description="how much")


class TargetObservation(Observation):
    message: str = ""
    value: int = 0
    target: int = 0


class TargetEnvironment(Environment[MoveAction, TargetObservation, State]):
    """Reach the target from 0 in at most 6 moves; -0.1 a move, +1 on the target."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.value = self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TargetObservation:
        self.value, self.target = 0, (seed or 0) % 7 + 2
        self._state = State(episode_id=episode_id, step_count=0)
        return TargetObservation(message=f"reach {self.target} from 0", target=self.target, reward=0.0)

    def step(self, action: MoveAction, timeout_s: float | None = None, **kwargs: Any) -> TargetObservation:
        self.value += action.amount if action.op == "add" else -action.amount
        self._state = State(episode_id=self._state.episode_id, step_count=self._state.step_count + 1)
        hit = self.value == self.target
        done = hit or self._state.step_count >= 6
        message = "reached" if hit else f"value {self.value}, target {self.target}"
        reward = 1.0 if hit else -0.1
        return TargetObservation(message=message, value=self.value, target=self.target, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state


class ShoutAction(Action):
    message: str


class ShoutObservation(Observation):
    reply: str = ""


class ShoutEnvironment(Environment[ShoutAction, ShoutObservation, State]):
    """Says the message back in capitals; done after three turns, reward = length of the message / 10."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ShoutObservation:
        self._state = State(episode_id=episode_id)
        return ShoutObservation(reply="say something", reward=0.0)

    def step(self, action: ShoutAction, timeout_s: float | None = None, **kwargs: Any) -> ShoutObservation:
        self._state = State(episode_id=self._state.episode_id, step_count=self._state.step_count + 1)
        done = self._state.step_count >= 3
        return ShoutObservation(reply=action.message.upper(), reward=len(action.message) / 10, done=done)

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    kind, port, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if kind == "target":
        app = create_app(TargetEnvironment, MoveAction, TargetObservation, max_concurrent_envs=sessions)
    else:
        app = create_app(ShoutEnvironment, ShoutAction, ShoutObservation, max_concurrent_envs=sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
