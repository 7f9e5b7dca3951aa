"""The container backend of the terminal env: each task's own image, one container per episode (Docker or Podman)."""

from gem_terminal.container.images import IMAGE_MAP, BaseImage, build_task_image, ensure_base_image
from gem_terminal.container.runtime import Runtime, detect_runtime
from gem_terminal.container.session import ContainerEpisode

__all__ = [
    "IMAGE_MAP",
    "BaseImage",
    "ContainerEpisode",
    "Runtime",
    "build_task_image",
    "detect_runtime",
    "ensure_base_image",
]
