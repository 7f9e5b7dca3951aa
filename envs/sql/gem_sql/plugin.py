"""gem-sql's registrations: the bundled databases' questions and the Spider/BIRD loaders (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest

_ENV = "gem_sql.env:make_sql_env"
_SAMPLES = Path(__file__).parent / "samples"
_TAGS = ("multi-turn", "tool", "sql", "offline")

#: ``(id suffix, bundled database)``: one id per database besides ``sql:Bundled-v0`` (all of them).
PER_DATABASE = (("Shop", "shop"), ("School", "school"), ("Flights", "flights"), ("Library", "library"), ("HR", "hr"))


def _spec(env_id: str, kwargs: dict[str, object], description: str) -> EnvSpec:
    return EnvSpec(id=env_id, entry_point=_ENV, kwargs={**kwargs, "label": env_id}, description=description, tags=_TAGS)


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("sql",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        _spec(
            "sql:Bundled-v0",
            {},
            "60 questions on 5 bundled SQLite databases; explore with the sql tool, answer with one query.",
        ),
        *(
            _spec(f"sql:{name}-v0", {"databases": (db,)}, f"The 12 questions on the bundled {db} database.")
            for name, db in PER_DATABASE
        ),
        _spec(
            "sql:Spider-v0",
            {"source": "spider", "path": str(_SAMPLES / "spider")},
            "Spider-format data (tables.json, dev.json, database/); a shipped sample unless you pass path=.",
        ),
        _spec(
            "sql:BIRD-v0",
            {"source": "bird", "path": str(_SAMPLES / "bird")},
            "BIRD-format data (dev.json with evidence, dev_databases/); a shipped sample unless you pass path=.",
        ),
    ]
