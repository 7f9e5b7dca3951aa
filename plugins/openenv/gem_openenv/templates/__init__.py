"""The gem env $env_id as an OpenEnv environment."""

from typing import Any

from .models import GemAction, GemObservation, GemState

__all__ = ["GemAction", "GemEnvClient", "GemObservation", "GemState"]


def __getattr__(name: str) -> Any:
    # The typed client needs OpenEnv (the openenv extra); the server and the models do not.
    if name == "GemEnvClient":
        from .client import GemEnvClient

        return GemEnvClient
    raise AttributeError(name)
