"""Module-level shortcuts over the process-wide registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gem_core.plugins import get_registry

if TYPE_CHECKING:  # keep numpy out of listing paths
    from gem_core.core import AsyncEnv, Env
    from gem_core.registry import EnvSpec, WrapperRef

__all__ = ["list_envs", "make", "make_tool", "register", "spec"]


def make(env_id: str, *, wrappers: Sequence[WrapperRef] | None = None, **kwargs: Any) -> Env | AsyncEnv:
    """Build a registered env.

    Args:
        env_id: Id or alias, e.g. ``"game:Sudoku-v0-easy"``.
        wrappers: Wrappers to add outside the spec's own: registered names,
            ``(name, kwargs)`` pairs or callables ``env -> env``.
        **kwargs: Constructor arguments that override the spec's defaults.

    Returns:
        The env, with ``env.spec`` set.

    Raises:
        gem_core.errors.EnvNotFound: unknown id; the message suggests close ids.
        gem_core.errors.ConfigError: bad kwargs; the message names the field.

    Example:
        >>> import gem_core
        >>> env = gem_core.make("core:NumberGuess-v0")
        >>> obs, info = env.reset(seed=0)
    """
    env: Env | AsyncEnv = get_registry().make(env_id, wrappers=wrappers, **kwargs)
    return env


def make_tool(name: str, **kwargs: Any) -> Any:
    """Build a registered tool (see :class:`gem_core.tools.Tool`)."""
    return get_registry().make_tool(name, **kwargs)


def register(env_id: str, entry_point: str | Callable[..., Any], *, override: bool = False, **fields: Any) -> EnvSpec:
    """Register an env id at runtime in the process-wide registry.

    Plugins should use the ``register_envs`` hook instead, so ``gem list`` sees them
    without importing user code.
    """
    return get_registry().register(env_id, entry_point, override=override, **fields)


def spec(env_id: str) -> EnvSpec:
    """The spec registered under an id or alias."""
    return get_registry().spec(env_id)


def list_envs(*, namespace: str | None = None, tag: str | None = None) -> list[str]:
    """Registered env ids, sorted; nothing is imported to list them."""
    return get_registry().env_ids(namespace=namespace, tag=tag)
