"""Discovery switches read from ``GEM_CORE_*`` variables (no heavy imports: ``gem list``'s cache reads them too)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PluginSettings"]


def _csv(value: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(",") if p.strip())


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class PluginSettings:
    """How discovery behaves; :meth:`from_env` reads the ``GEM_CORE_*`` variables."""

    autoload: bool = True
    allow: frozenset[str] = frozenset()
    block: frozenset[str] = frozenset()
    strict: bool = False
    trace: bool = False
    plugin_dirs: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        return cls(
            autoload=not _flag(env.get("GEM_CORE_DISABLE_PLUGIN_AUTOLOAD")),
            allow=_csv(env.get("GEM_CORE_PLUGINS")),
            block=_csv(env.get("GEM_CORE_BLOCK_PLUGINS")),
            strict=_flag(env.get("GEM_CORE_STRICT_PLUGINS")),
            trace=_flag(env.get("GEM_CORE_TRACE_PLUGINS")),
            plugin_dirs=tuple(p for p in (env.get("GEM_CORE_PLUGINS_DIR") or "").split(os.pathsep) if p),
        )
