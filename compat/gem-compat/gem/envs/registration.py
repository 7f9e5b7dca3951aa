"""GEM's ``gem.envs.registration``: ``register``, ``make``, ``make_vec`` over gem_core's registry."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gem_core
from gem.envs._gem_era import DATASET_KEYS, translate_dataset_kwargs
from gem.vector.async_vector_env import AsyncVectorEnv
from gem.vector.sync_vector_env import SyncVectorEnv
from gem_core.errors import DuplicateIdError, InvalidIdError
from gem_core.registry import ENV_ID_RE, EnvSpec, caller_stacklevel
from gem_core.vector import AutoresetMode, VectorEnv
from gem_core.vector.make import build_env

__all__ = ["ENV_REGISTRY", "GemIdError", "make", "make_vec", "native_id", "print_envs", "register"]

#: Namespace given to GEM ids that have none (ROLL registers bare names such as ``"sokoban"``).
BARE_NAMESPACE = "gem"


class GemIdError(DuplicateIdError, ValueError):
    """``register`` of an id that is taken: a ``ValueError``, as GEM raises, in gem_core's hierarchy."""


def native_id(env_id: str) -> str:
    """The gem_core id for a GEM id: unchanged, or ``gem:<id>`` for an id without a namespace.

    Raises:
        InvalidIdError: the id cannot be expressed as a gem_core id (the message says why).
    """
    if ENV_ID_RE.match(env_id):
        return env_id
    if ":" not in env_id and ENV_ID_RE.match(f"{BARE_NAMESPACE}:{env_id}"):
        return f"{BARE_NAMESPACE}:{env_id}"
    raise InvalidIdError(
        f"GEM id {env_id!r} has no gem_core equivalent: ids are 'namespace:Name[-vN][-variant]' with a "
        f"lower-case namespace, or a bare name (letters, digits, '_', '.') that becomes '{BARE_NAMESPACE}:<name>'"
    )


def register(id: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> None:  # noqa: A002 - GEM's name
    """Register ``id`` with constructor ``kwargs``, as GEM does.

    GEM's dataset-env arguments (``dataset_name``, ``question_key``...) are translated to gem's
    here, with a DeprecationWarning.

    GEM has no namespace owners, so this adds to any namespace (gem_core's ``override``),
    but a taken id still raises, as in GEM.

    Raises:
        GemIdError: the id is registered already (also a ``ValueError``).
    """
    target = native_id(id)
    registry = gem_core.get_registry()
    if target in registry.envs or target in registry.aliases:
        raise GemIdError(f"Environment {id} already registered (by {registry.spec(target).owner}).")
    if DATASET_KEYS & kwargs.keys():  # GEM's dataset-env arguments: gem-core checks options before the constructor
        kwargs = translate_dataset_kwargs(id, kwargs)
    registry.register(target, entry_point, kwargs=kwargs, override=True)


_GEM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gem package

#: Constructor kwargs GEM's envs took that gem-core's do not, and what replaces each.
GEM_ERA_KWARGS: dict[str, str] = {
    "seed": "seed episodes with env.reset(seed=...)",
    "verbose": "gem-core envs do not print; drop it",
}


def _drop_gem_era_kwargs(spec: EnvSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without the GEM-era ones the env's config does not take, each with a DeprecationWarning."""
    config = getattr(spec.load(), "config_model", None)
    fields = getattr(config, "model_fields", None)
    if fields is None:  # no config model: the constructor decides
        return kwargs
    kept = dict(kwargs)
    for key in [k for k in kwargs if k in GEM_ERA_KWARGS and k not in fields]:
        del kept[key]
        warnings.warn(
            f"{spec.id}: the GEM-era constructor argument {key}= is ignored on gem-core; {GEM_ERA_KWARGS[key]}.",
            DeprecationWarning,
            stacklevel=caller_stacklevel(also_skip=[_GEM_DIR]),
        )
    return kept


def make(env_id: str, **kwargs: Any) -> Any:
    """Build a registered env, setting ``env.env_id`` and ``env.entry_point`` as GEM does.

    GEM-era constructor kwargs the env no longer takes (:data:`GEM_ERA_KWARGS`) are dropped
    with a ``DeprecationWarning`` naming the replacement.
    """
    target = native_id(env_id)
    spec = gem_core.get_registry().spec(target)
    kwargs = _drop_gem_era_kwargs(spec, kwargs)
    if "path" in getattr(getattr(spec.load(), "config_model", None), "model_fields", {}):  # a dataset env
        kwargs = translate_dataset_kwargs(env_id, kwargs)
    env = gem_core.make(target, **kwargs)
    spec = env.spec
    env.env_id = env_id  # type: ignore[union-attr]
    env.entry_point = spec.entry_point if spec is not None else None  # type: ignore[union-attr]
    return env


def make_vec(
    env_ids: str | Sequence[str],
    num_envs: int | None = None,
    wrappers: Sequence[Callable[[Any], Any]] | None = None,
    vec_kwargs: Sequence[Mapping[str, Any]] | None = None,
    async_mode: bool = False,
    seed: int | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """A vector env as GEM builds it; the result is gem_core's :class:`~gem_core.vector.VectorEnv`.

    Args:
        env_ids: One id (repeated ``num_envs`` times) or one id per env.
        num_envs: Number of envs; defaults to ``len(vec_kwargs)``, the number of ids, or 1.
        wrappers: Callables ``env -> env`` applied in order (e.g. from ``get_wrapper_fns``).
        vec_kwargs: Per-env constructor kwargs (GEM's ``vec_kwargs``).
        async_mode: Step the envs concurrently (gem_core's async vector env) instead of in turn.
        seed: Accepted for GEM's signature and not passed to constructors (GEM's games ignored
            it); seed episodes with ``reset(seed=...)``.
        **kwargs: Constructor kwargs for every env, over ``vec_kwargs``.

    Returns:
        A vector env in GEM's autoreset mode (``SAME_STEP``): the step that ends an episode
        returns the next episode's first observation, with ``final_obs``/``final_info`` in info.
    """
    del seed  # see the docstring: GEM never seeded envs through it
    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    n = num_envs or (len(vec_kwargs) if vec_kwargs else len(ids)) or 1
    registry = gem_core.get_registry()
    specs: list[EnvSpec] = [registry.spec(native_id(ids[i % len(ids)])) for i in range(n)]
    fns = [
        functools.partial(
            build_env,
            spec,
            _drop_gem_era_kwargs(spec, {**(vec_kwargs[i] if vec_kwargs else {}), **kwargs}),
            tuple(wrappers or ()),
            registry,
        )
        for i, spec in enumerate(specs)
    ]
    vec_ids = [spec.id for spec in specs]
    if async_mode:
        return AsyncVectorEnv(vec_ids, fns, autoreset_mode=AutoresetMode.SAME_STEP)
    return SyncVectorEnv(vec_ids, fns, autoreset_mode=AutoresetMode.SAME_STEP)


class _RegistryView(Mapping[str, EnvSpec]):
    """GEM's ``ENV_REGISTRY`` dict, as a live read-only view of gem_core's registry."""

    def __getitem__(self, env_id: str) -> EnvSpec:
        try:
            return gem_core.get_registry().spec(native_id(env_id))
        except LookupError as exc:
            raise KeyError(env_id) from exc

    def __iter__(self) -> Iterator[str]:
        return iter(gem_core.list_envs())

    def __len__(self) -> int:
        return len(gem_core.list_envs())


ENV_REGISTRY: Mapping[str, EnvSpec] = _RegistryView()


def print_envs() -> None:
    """Print every registered id with its entry point and kwargs."""
    specs = [gem_core.spec(i) for i in gem_core.list_envs()]
    if not specs:
        print("No environments registered.")
    for spec in specs:
        print(f"  - {spec.id}:\n      Entry Point: {spec.entry_point}\n      Kwargs: {spec.kwargs}")
