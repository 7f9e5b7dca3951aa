"""A typed OpenEnv client for $env_id: ``GemEnvClient(base_url=...).sync()`` (needs the ``openenv`` extra)."""

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from gem_openenv.models import GemAction, GemObservation, GemState


class GemEnvClient(EnvClient[GemAction, GemObservation, GemState]):
    """Reset with ``seed=``; step with ``GemAction(text=...)``; observations are ``GemObservation``."""

    def _step_payload(self, action: GemAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GemObservation]:
        reward, done = payload.get("reward"), payload.get("done", False)
        observation = GemObservation(**payload.get("observation", {}), reward=reward, done=done)
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> GemState:
        return GemState(**payload)
