"""The gem env $env_id as an OpenEnv environment."""

from .client import GemEnvClient
from .models import GemAction, GemObservation, GemState

__all__ = ["GemAction", "GemEnvClient", "GemObservation", "GemState"]
