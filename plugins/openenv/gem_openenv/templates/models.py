"""The action, observation and state models (gem-openenv's, every field declared)."""

from gem_openenv.models import GemAction, GemObservation, GemState

__all__ = ["GemAction", "GemObservation", "GemState"]
