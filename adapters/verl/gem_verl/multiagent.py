"""A verl agent loop for multi-agent gem envs: one game per row, one sample per trained seat.

``gem_multiagent_agent`` (registered by :mod:`gem_verl.plugin`) plays the row's game with the
core's :func:`~gem_core.multiagent.engine.play_multiagent`: verl's LLM server in every seat not
given to a fixed opponent (self-play: the same model in all seats), each seat with its own token
context and its own sticky server session; each trained seat's trajectory becomes a
:class:`~gem_verl.agent_loop.GemAgentLoopOutput` (sequence layout) carrying its seat in
``extra_fields["gem"]["seat"]``, which the role estimators (:mod:`gem_verl.roles`) read.

The row's ``extra_info["gem"]`` is :class:`MultiAgentRequest`: ``env_id``, ``seed``, ``options``,
``env_kwargs``, ``system_prompt`` as for ``gem_env_agent``, plus ``opponents`` (seat ->
``"module:attr"`` of a :class:`~gem_core.multiagent.seat.SeatPolicy`) and ``seats`` (the seats
to train; default every seat no opponent plays). The game runs in a worker thread (the engine's
multi-agent driver is synchronous); each generate goes to verl's server on the loop's event loop
and is bounded by :data:`GENERATE_TIMEOUT_S`. Layout: ``sequence`` only (one sample per seat).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from pydantic import Field
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

import gem_core
from gem_core.episode import EpisodeSession, Generation, TurnRequest
from gem_core.errors import ConfigError, GenerateTimeout, UnknownAgent
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multiagent.engine import Scripted, play_multiagent
from gem_core.registry import load_entry_point
from gem_verl.agent_loop import EpisodeRequest, GemEnvAgentLoop, _config_get
from gem_verl.roles import ROLE_ESTIMATORS

__all__ = [
    "GENERATE_TIMEOUT_S",
    "MULTIAGENT_AGENT_NAME",
    "GemMultiAgentLoop",
    "MultiAgentRequest",
    "make_multiagent_rows",
]

_logger = logging.getLogger(__name__)

#: The name rows select in their ``agent_name`` column.
MULTIAGENT_AGENT_NAME = "gem_multiagent_agent"

#: Most seconds one seat's generate may take before the game fails with ``GenerateTimeout``.
GENERATE_TIMEOUT_S = 600.0


class MultiAgentRequest(EpisodeRequest):
    """A row's game: :class:`~gem_verl.agent_loop.EpisodeRequest` plus the seats.

    Attributes:
        opponents: Seats a fixed policy plays: seat -> ``"module:attr"`` (JSON string in Parquet).
        seats: Seats to train (one sample each); ``None``: every seat no opponent plays.
    """

    opponents: dict[str, str] = Field(default_factory=dict)
    seats: list[str] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MultiAgentRequest:
        """Parse the row (``opponents`` and ``seats`` may be JSON strings, as Parquet stores them)."""
        extra_info = row.get("extra_info") or {}
        raw = extra_info.get("gem") if isinstance(extra_info, Mapping) else None
        if isinstance(raw, Mapping):
            data = dict(raw)
            for key in ("opponents", "seats"):
                if isinstance(data.get(key), str):
                    try:
                        data[key] = json.loads(data[key]) if data[key] else None
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"extra_info['gem']['{key}'] is not valid JSON: {exc}") from None
            if data.get("opponents") is None:
                data.pop("opponents", None)
            row = {**row, "extra_info": {**extra_info, "gem": data}}
        request = super().from_row(row)
        assert isinstance(request, MultiAgentRequest)
        return request


def make_multiagent_rows(
    env_id: str,
    seeds: list[int],
    *,
    opponents: Mapping[str, str] | None = None,
    seats: list[str] | None = None,
    start_index: int = 0,
) -> list[dict[str, Any]]:
    """Dataset rows of :func:`gem_verl.dataset.make_rows` for ``gem_multiagent_agent``: one game per row.

    ``opponents`` and ``seats`` are stored as JSON strings (one Parquet type for every row).
    """
    from gem_verl.dataset import make_rows

    rows = make_rows(env_id, seeds, start_index=start_index)
    for row in rows:
        row["agent_name"] = MULTIAGENT_AGENT_NAME
        row["extra_info"]["gem"]["opponents"] = json.dumps(dict(opponents or {}))
        row["extra_info"]["gem"]["seats"] = json.dumps(seats) if seats is not None else ""
    return rows


class GemMultiAgentLoop(GemEnvAgentLoop):
    """Plays one multi-agent game against verl's LLM server; returns one sample per trained seat.

    Raises:
        ConfigError: At construction: ``algorithm.adv_estimator`` is not a role estimator (verl's
            group estimators keep only a session's last sample, ``rebn`` pools the seats), or
            ``algorithm.filter_groups`` is on (it would compare the seats of one game as one group).
        UnknownAgent: The row names a seat (to train, or for an opponent) the env does not have.
        ConfigError: The env is not multi-agent, a trained seat is an opponent's, ``gem.wrappers`` is set
            (gem's wrappers are single-agent), or an opponent reference does not load.
        GenerateTimeout: A seat's generate took longer than the bound.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        algorithm = self.config.get("algorithm", None)
        raw = _config_get(algorithm, "adv_estimator", "rebn")
        estimator = str(getattr(raw, "value", raw))
        if estimator not in ROLE_ESTIMATORS:
            raise ConfigError(
                f"gem_multiagent_agent with algorithm.adv_estimator={estimator}: its samples are seats of one game "
                f"(verl's group estimators keep only a session's last sample; rebn pools the seats). Set "
                f"algorithm.adv_estimator to one of {list(ROLE_ESTIMATORS)}"
            )
        if _config_get(_config_get(algorithm, "filter_groups", None), "enable", False):
            raise ConfigError(
                "gem_multiagent_agent with algorithm.filter_groups.enable=true: DAPO's filter would compare the "
                "seats of one game as one group. Turn it off"
            )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # type: ignore[override]  # verl v1 takes a list
        """Play the row's game; return the trained seats' samples in the env's seat order."""
        request = MultiAgentRequest.from_row(kwargs)
        if self.gem_config.wrappers:
            raise ConfigError("gem_multiagent_agent takes no gem.wrappers (gem's wrappers are single-agent)")
        if self.gem_config.layout != "sequence":
            raise ConfigError("gem_multiagent_agent lays out one sample per seat: set gem.layout=sequence")
        env: Any = None
        try:
            env = gem_core.make(request.env_id, **{**self.gem_config.env_kwargs, **request.env_kwargs})
            if not isinstance(env, MultiAgentEnv):
                raise ConfigError(f"{request.env_id} is a single-agent env; use gem_env_agent for it")
            agents = tuple(env.possible_agents)
            opponents = self._opponents(request, agents)
            trained = request.seats if request.seats is not None else [a for a in agents if a not in opponents]
            for seat in trained:
                if seat not in agents:
                    raise UnknownAgent(f"{request.env_id} has no seat {seat!r}; its seats are {list(agents)}")
                if seat in opponents:
                    raise ConfigError(f"seat {seat!r} is played by the fixed opponent {request.opponents[seat]!r}")
            seen: dict[str, list[Any]] = {a: [] for a in agents}
            loop = asyncio.get_running_loop()
            timeout = GENERATE_TIMEOUT_S

            def seat_generate(seat: str) -> Any:
                request_id = uuid4().hex  # one sticky server session per seat

                def generate(turn: TurnRequest) -> Generation:
                    future = asyncio.run_coroutine_threadsafe(
                        self._generate(request_id, turn, sampling_params, seen[seat]), loop
                    )
                    try:
                        return future.result(timeout=timeout)
                    except concurrent.futures.TimeoutError:
                        future.cancel()
                        raise GenerateTimeout(
                            f"seat {seat!r} of {request.env_id} seed={request.seed}: no answer from the server "
                            f"in {timeout} s"
                        ) from None

                return generate

            policies: dict[str, Any] = {a: seat_generate(a) for a in agents}
            policies.update({a: Scripted(p) for a, p in opponents.items()})
            result = await asyncio.to_thread(
                play_multiagent,
                self.engine,
                env,
                policies,
                seed=request.seed,
                options=request.options,
                env_id=request.env_id,
                system_prompts=request.system_prompt,
            )
            outputs: list[AgentLoopOutput] = []
            for seat in agents:
                if seat in trained:
                    outputs += self._seat_outputs(result.sessions[seat], seen[seat], seat, kwargs.get("global_steps"))
            return outputs
        except Exception:
            _logger.error("gem multi-agent game failed: %s seed=%s", request.env_id, request.seed, exc_info=True)
            raise
        finally:
            if env is not None:
                env.close()

    @staticmethod
    def _opponents(request: MultiAgentRequest, agents: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for seat, ref in request.opponents.items():
            if seat not in agents:
                raise UnknownAgent(f"opponent for {seat!r}: {request.env_id} has no such seat ({list(agents)})")
            policy = load_entry_point(ref)
            if not callable(policy):
                raise ConfigError(f"opponent {ref!r} for seat {seat!r} is not a callable (env, agent, news) -> str")
            out[seat] = policy
        return out

    def _seat_outputs(
        self, session: EpisodeSession, outputs_of_server: list[Any], seat: str, global_steps: Any
    ) -> list[AgentLoopOutput]:
        """The seat's sample (a masked one when the game ended before the seat acted), with its seat."""
        if session.turns:
            outputs = self._outputs(session, outputs_of_server, global_steps)
        else:
            outputs = [self._failed_output(session, outputs_of_server, global_steps)]
        for output in outputs:
            output.extra_fields["gem"]["seat"] = seat
        return outputs
