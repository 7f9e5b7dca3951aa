"""What ``gem list`` shows, cached per environment and keyed by the installed plugin distributions.

Discovering plugins imports every plugin and validates every spec (pydantic); ``gem list``
needs only a few fields of each env spec. The first ``gem list`` stores them; the next ones
read the ``gem_core`` entry points' metadata (no plugin import), and reuse the stored rows
while the key is unchanged. The key covers:

* gem-core's version and its built-in registrations' file;
* per entry point: its name and value, its distribution's ``.dist-info`` folder (name and
  version) and that folder's modification time (a reinstall makes a new one), and for an
  editable install the size and modification time of every ``.py`` file of the entry point's
  package (editing a plugin's source changes the key);
* the discovery switches (``GEM_CORE_DISABLE_PLUGIN_AUTOLOAD``, ``GEM_CORE_PLUGINS``,
  ``GEM_CORE_BLOCK_PLUGINS``, ``GEM_CORE_STRICT_PLUGINS``);
* every other ``GEM_*`` environment variable and its value (plugins take their settings from
  such variables: ``GEM_OPENENV_SERVERS`` decides which ``openenv:*`` ids exist), but the
  cache's own ``GEM_CORE_CACHE_DIR`` and ``GEM_CORE_LIST_CACHE``.

Nothing is cached (every ``gem list`` discovers) when a plugin has a problem (the report must
be the full one), under ``GEM_CORE_PLUGINS_DIR`` or ``GEM_CORE_TRACE_PLUGINS``, when an entry
point's distribution is not an installed folder, when this process already built its registry
(runtime ``register()`` calls), and with ``GEM_CORE_LIST_CACHE=0``. A cache that is missing,
corrupt, from another key or cannot be written is ignored: ``gem list`` then discovers as
before. The cache lives in ``$GEM_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gem-core``, else
``~/.cache/gem-core``, one file per Python environment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import zlib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gem_core.plugin_settings import PluginSettings

if TYPE_CHECKING:
    from gem_core.plugins import Discovery

__all__ = ["AliasRow", "EnvRow", "Listing", "cache_file", "key", "listing_of", "load", "store"]

#: Bumped when the stored format or the key's parts change.
FORMAT = 3
#: GEM_* variables that cannot change what is listed (where the cache lives, whether to use it).
_NOT_LISTING = frozenset({"GEM_CORE_CACHE_DIR", "GEM_CORE_LIST_CACHE"})
_GROUP = "gem_core"  # gem_core.plugins.ENTRY_POINT_GROUP (not imported: it pulls pluggy and pydantic)


@dataclass(frozen=True)
class EnvRow:
    """What ``gem list`` shows of one env spec."""

    id: str
    namespace: str
    tags: tuple[str, ...]
    distribution: str | None
    version: str | None
    description: str


@dataclass(frozen=True)
class AliasRow:
    """What ``gem list`` shows of one alias."""

    id: str
    target: str
    deprecated: bool


@dataclass(frozen=True)
class Listing:
    """Every registered env (in id order) and alias, as ``gem list`` needs them."""

    envs: list[EnvRow]
    aliases: list[AliasRow]

    def env_ids(self, *, namespace: str | None = None, tag: str | None = None) -> list[EnvRow]:
        """The rows :meth:`gem_core.registry.Registry.env_ids` would name, in its order."""
        return [
            r for r in self.envs if (namespace is None or r.namespace == namespace) and (tag is None or tag in r.tags)
        ]


def listing_of(found: Discovery) -> Listing:
    """The listing of a discovery's registry."""
    registry = found.registry
    versions = {p.name: p.version for p in found.plugins}
    envs = [
        EnvRow(s.id, s.namespace, tuple(s.tags), s.distribution, versions.get(s.plugin or ""), s.description)
        for s in registry.envs.values()
    ]
    aliases = [AliasRow(a.id, a.target, a.deprecated) for a in registry.aliases.values()]
    return Listing(envs, aliases)


def cache_file(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """This Python environment's cache file."""
    env = os.environ if environ is None else environ
    folder = env.get("GEM_CORE_CACHE_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gem-core"
    )
    where = zlib.crc32(os.path.join(sys.prefix, sys.executable).encode())
    return os.path.join(folder, f"list-{where:08x}.json")


def key(environ: os._Environ[str] | dict[str, str] | None = None) -> str | None:
    """The cache key of what discovery would find now, or ``None`` when ``gem list`` must discover."""
    env = os.environ if environ is None else environ
    if (env.get("GEM_CORE_LIST_CACHE") or "1").strip().lower() in {"0", "false", "no", "off"}:
        return None
    plugins = sys.modules.get("gem_core.plugins")
    if plugins is not None and getattr(plugins, "_state", None) is not None:
        return None  # this process's registry exists (maybe with runtime registrations): list it
    settings = PluginSettings.from_env(env)
    if settings.trace or settings.plugin_dirs:
        return None
    from gem_core import __version__

    parts: list[Any] = [
        FORMAT,
        __version__,
        _file_stamp(os.path.join(os.path.dirname(__file__), "builtin.py")),
        [settings.autoload, sorted(settings.allow), sorted(settings.block), settings.strict],
        # Plugins read their settings from GEM_* variables (gem-openenv's GEM_OPENENV_SERVERS names the
        # ids it registers): a change of any of them may change the listing.
        sorted((name, value) for name, value in env.items() if name.startswith("GEM_") and name not in _NOT_LISTING),
    ]
    if settings.autoload:
        md = sys.modules.get("importlib.metadata")
        if md is not None and getattr(md.entry_points, "__module__", None) != "importlib.metadata":
            return None  # entry points come from elsewhere (a test's stand-in): only discovery sees them
        parts.append(_installed())
    return json.dumps(parts)  # compared whole: no hashing library to import


def load(cache_key: str, environ: os._Environ[str] | dict[str, str] | None = None) -> Listing | None:
    """The stored listing for ``cache_key``; ``None`` if there is none, or it is unreadable or stale."""
    try:
        with open(cache_file(environ), encoding="utf-8") as fh:
            data = json.load(fh)
        if data["key"] != cache_key:
            return None
        rows = data["rows"]  # the rows as text, with its checksum: any damage to them shows
        if zlib.crc32(rows.encode()) != data["crc32"]:
            return None
        table = json.loads(rows)
        envs = [EnvRow(**{**row, "tags": tuple(row["tags"])}) for row in table["envs"]]
        aliases = [AliasRow(**row) for row in table["aliases"]]
    except Exception:  # missing, corrupt, or another format: discover instead
        return None
    if not all(_valid(r) for r in envs) or not all(_valid(a) for a in aliases):
        return None
    return Listing(envs, aliases)


def store(cache_key: str, listing: Listing, environ: os._Environ[str] | dict[str, str] | None = None) -> None:
    """Store ``listing`` under ``cache_key``, atomically; a cache that cannot be written is skipped silently."""
    import tempfile

    path = cache_file(environ)
    rows = json.dumps({"envs": [asdict(r) for r in listing.envs], "aliases": [asdict(a) for a in listing.aliases]})
    data = {"key": cache_key, "rows": rows, "crc32": zlib.crc32(rows.encode())}
    with contextlib.suppress(OSError):
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path), suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise


def _valid(row: EnvRow | AliasRow) -> bool:
    """Whether a row read back has the field types it was written with (a hand-edited file may not)."""
    if isinstance(row, AliasRow):
        return type(row.id) is str and type(row.target) is str and type(row.deprecated) is bool
    texts = (row.id, row.namespace, row.description, *row.tags)
    return all(type(t) is str for t in texts) and all(
        v is None or type(v) is str for v in (row.distribution, row.version)
    )


def _installed() -> list[Any]:
    """Every distribution folder on ``sys.path`` with its stamp, and the ``gem_core`` entry points in them.

    Read from the folders directly (``importlib.metadata`` costs more to import than the rest of
    ``gem list``); a superset of what discovery sees, so the key changes whenever that can.
    """
    found: list[Any] = []
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:  # a zip file or a missing folder
            found.append([entry, *_file_stamp(entry or ".")])
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            folder = os.path.join(entry or ".", name)
            eps = [[ep_name, value, _editable_stamp(folder, value)] for ep_name, value in _gem_entry_points(folder)]
            found.append([folder, *_file_stamp(folder), eps])
    return found


def _gem_entry_points(folder: str) -> list[tuple[str, str]]:
    """``(name, value)`` of the ``[gem_core]`` section of a distribution's ``entry_points.txt``."""
    try:
        with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    eps, section = [], None
    for line in lines:
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == _GROUP and "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            eps.append((name.strip(), value.strip()))
    return eps


def _file_stamp(path: str) -> list[int]:
    try:
        info = os.stat(path)
    except OSError:
        return [-1, -1]
    return [info.st_mtime_ns, info.st_size]


def _editable_stamp(folder: str, value: str) -> list[Any] | None:
    """For an editable install: every ``.py`` file of the entry point's package, with its stamp."""
    try:
        with open(os.path.join(folder, "direct_url.json"), encoding="utf-8") as fh:
            direct = json.load(fh)
        editable = bool(direct.get("dir_info", {}).get("editable"))
    except (OSError, ValueError, AttributeError):
        return None
    if not editable:
        return None
    top = value.partition(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: finds, imports nothing
    except (ImportError, ValueError):
        return ["not found", top]
    if spec is None:
        return ["not found", top]
    roots = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    files: list[Any] = []
    for root in roots:
        if os.path.isfile(root):
            files.append([root, *_file_stamp(root)])
            continue
        for here, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    full = os.path.join(here, name)
                    files.append([full, *_file_stamp(full)])
    return files
