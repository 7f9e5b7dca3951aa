"""Two OpenEnv envs written with OpenEnv's own SDK (no gem code), served by its own ``create_app``.

``python native_server.py KIND PORT MAX_SESSIONS``; KIND is ``target`` (a JSON action with two
fields), ``echo`` (a one-field text action), ``tools`` (an MCP env: OpenEnv's ``MCPEnvironment`` with FastMCP
tools, served with OpenEnv's ``CallToolAction``/``CallToolObservation`` as its echo_env is) or ``board`` (a
structured observation shaped as OpenEnv's chess_env's: a position, the legal moves, a flag, the result at the
end, and a nested score sheet); they stand for any env published for OpenEnv. ``mirror``
is a hostile server that breaks the protocol on request (see :func:`mirror_app`), ``script`` one that answers
each message with the frames a script says: extra, duplicated, missing or malformed (see :func:`script_app`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
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
    """Reach the target from 0 in at most 6 moves; -0.1 a move, +1 on the target; seeds in [0, 2**32)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.value = self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TargetObservation:
        if seed is not None and not 0 <= seed < 2**32:  # as numpy-seeded OpenEnv envs refuse (maze)
            raise ValueError("Seed must be between 0 and 2**32 - 1")
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
        # OpenEnv has no success flag; this env reports one in the observation's metadata when the episode ends.
        metadata = {"success": hit} if done else {}
        return TargetObservation(
            message=message, value=self.value, target=self.target, reward=reward, done=done, metadata=metadata
        )

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


class ToolsEnvironment(MCPEnvironment):
    """Two FastMCP tools (``reverse``, ``count``); reset says it is ready in its metadata, as OpenEnv's echo_env."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        from fastmcp import FastMCP

        server = FastMCP("tools")

        @server.tool
        def reverse(text: str) -> str:
            """Reverse the text."""
            return text[::-1]

        @server.tool
        def count(text: str, letter: str = "a") -> dict:
            """Count a letter in the text."""
            return {"letter": letter, "count": text.count(letter)}

        super().__init__(server)
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(done=False, reward=0.0, metadata={"status": "ready", "message": "tools ready"})

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


class PlaceAction(Action):
    square: str


class BoardObservation(Observation):
    position: str = ""
    legal_moves: list[str] = Field(default_factory=list)
    in_danger: bool = False
    result: str | None = None
    sheet: dict[str, int] = Field(default_factory=dict)


class BoardEnvironment(Environment[PlaceAction, BoardObservation, State]):
    """Claim squares a1..c1: each claimed square leaves the legal moves; the third ends it ("1-0"), +1 then."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.free = ["a1", "b1", "c1"]

    def _observe(self, reward: float, done: bool) -> BoardObservation:
        position = "".join("." if square in self.free else "x" for square in ("a1", "b1", "c1"))
        return BoardObservation(
            position=position,
            legal_moves=list(self.free),
            in_danger=len(self.free) == 1,
            result="1-0" if done else None,
            sheet={"claimed": 3 - len(self.free)},
            reward=reward,
            done=done,
            metadata={"evaluation": 0.5},
        )

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> BoardObservation:
        self._state, self.free = State(episode_id=episode_id), ["a1", "b1", "c1"]
        return self._observe(0.0, False)

    def step(self, action: PlaceAction, timeout_s: float | None = None, **kwargs: Any) -> BoardObservation:
        self._state = State(episode_id=self._state.episode_id, step_count=self._state.step_count + 1)
        if action.square not in self.free:
            return self._observe(-0.1, False)
        self.free.remove(action.square)
        return self._observe(1.0 if not self.free else 0.0, not self.free)

    @property
    def state(self) -> State:
        return self._state


def mirror_app() -> Any:
    """A hostile server (not OpenEnv's factory): it answers a step with the action's ``message`` verbatim as the
    frame (any text: malformed JSON, wrong types, error frames), or, for ``sleep``, a frame 3 s late."""
    app = FastAPI()
    schema = {
        "action": {"properties": {"message": {"type": "string"}}, "required": ["message"], "type": "object"},
        "observation": {"properties": {"reply": {"type": "string"}}, "type": "object"},
    }

    def observation(reply: str) -> str:
        return json.dumps({"type": "observation", "data": {"observation": {"reply": reply}, "reward": 0.0}})

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/schema")
    def get_schema() -> dict[str, Any]:
        return schema

    @app.websocket("/ws")
    async def session(socket: WebSocket) -> None:
        await socket.accept()
        try:
            while True:
                message = json.loads(await socket.receive_text())
                if message["type"] == "reset":
                    await socket.send_text(observation("ready"))
                elif message["type"] == "step" and message["data"]["message"] == "sleep":
                    await asyncio.sleep(3)
                    await socket.send_text(observation("stale"))
                elif message["type"] == "step":
                    await socket.send_text(message["data"]["message"])
                elif message["type"] == "state":
                    await socket.send_text(json.dumps({"type": "state", "data": {"step_count": 0}}))
                else:
                    break
        except WebSocketDisconnect:
            pass

    return app


def script_app() -> Any:
    """A server that answers each message with the frames a script says (OpenEnv's frames, others, or none).

    A ``reset`` message carries ``script``: for the reset itself and each reset or step after it on the socket,
    the list of frames (texts) to answer it with, in order; and ``state_script``, the same for ``state``
    messages. Past a script's end (and without one) a reset or step gets a proper observation and a ``state`` a
    proper state. A ``close`` ends the session.
    """
    app = FastAPI()
    schema = {
        "action": {"properties": {"message": {"type": "string"}}, "required": ["message"], "type": "object"},
        "observation": {"properties": {"reply": {"type": "string"}}, "type": "object"},
    }

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/schema")
    def get_schema() -> dict[str, Any]:
        return schema

    @app.websocket("/ws")
    async def session(socket: WebSocket) -> None:
        await socket.accept()
        scripts: dict[str, list[list[str]]] = {"script": [], "state_script": []}
        try:
            while True:
                message = json.loads(await socket.receive_text())
                kind = message.get("type")
                if kind == "close":
                    break
                if kind == "reset":
                    scripts = {key: list((message.get("data") or {}).get(key) or []) for key in scripts}
                script = scripts["state_script" if kind == "state" else "script"]
                if script:
                    frames = script.pop(0)
                elif kind == "state":
                    frames = [json.dumps({"type": "state", "data": {"step_count": 0}})]
                else:
                    reply = {"observation": {"reply": "default"}, "reward": 0.0, "done": False}
                    frames = [json.dumps({"type": "observation", "data": reply})]
                for frame in frames:
                    await socket.send_text(frame)
        except WebSocketDisconnect:
            pass

    return app


if __name__ == "__main__":
    kind, port, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if kind == "mirror":
        app = mirror_app()
    elif kind == "script":
        app = script_app()
    elif kind == "tools":
        app = create_app(ToolsEnvironment, CallToolAction, CallToolObservation, max_concurrent_envs=sessions)
    elif kind == "board":
        app = create_app(BoardEnvironment, PlaceAction, BoardObservation, max_concurrent_envs=sessions)
    elif kind == "target":
        app = create_app(TargetEnvironment, MoveAction, TargetObservation, max_concurrent_envs=sessions)
    else:
        app = create_app(ShoutEnvironment, ShoutAction, ShoutObservation, max_concurrent_envs=sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
