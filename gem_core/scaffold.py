"""``gem new env NAME`` / ``gem new tool NAME``: a ready-to-publish plugin package.

The package passes ``gem check`` and its own tests as generated: a pyproject with the
``gem_core`` entry point and a plugin manifest, an example env (or tool), tests that
run the env checker through gem_core's pytest plugin, a README and a CI workflow.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
from pathlib import Path
from string import Template

from gem_core.errors import ConfigError

__all__ = ["KINDS", "scaffold"]

KINDS = ("env", "tool")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

#: gem's own distributions (and GEM's): a package of the same name would replace one of them on install.
RESERVED_DISTRIBUTIONS: frozenset[str] = frozenset(
    {
        "gem-core", "gem-games", "gem-code", "gem-math", "gem-qa", "gem-reasoning-gym", "gem-dataset-env",
        "gem-tool-python", "gem-tool-search", "gem-tool-mcp", "gem-trl", "gem-verl", "gem-rl2", "gem-openrlhf",
        "gem-oat", "gem-compat", "gem-llm", "gem-rg",
    }
)  # fmt: skip
#: Their import packages.
RESERVED_PACKAGES: frozenset[str] = frozenset(
    {
        "gem", "gem_core", "gem_games", "gem_code", "gem_math", "gem_qa", "gem_rg", "gem_dataset_env",
        "gem_tool_python", "gem_tool_search", "gem_tool_mcp", "gem_trl", "gem_verl", "gem_rl2", "gem_openrlhf",
        "gem_oat", "gem_compat", "gem_llm",
    }
)  # fmt: skip

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$summary"
readme = "README.md"
requires-python = ">=3.10"
license = { text = "Apache-2.0" }
# gem plugin API 1 is the gem-core 0.1 series.
dependencies = ["gem-core>=0.1,<0.2"]
keywords = ["gem-core", "gem-core-plugin", "llm", "reinforcement-learning", "agents"]
classifiers = [
    "Programming Language :: Python :: 3",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
]

[project.optional-dependencies]
test = ["pytest>=8"]

# How gem finds the plugin: `gem list` shows what plugin.py declares once this is installed.
[project.entry-points.gem_core]
$name = "$package.plugin"

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.pytest.ini_options]
# Another installed package's broken plugin is reported, not this package's failure.
filterwarnings = ["error", "default::gem_core.errors.PluginWarning"]
"""

_PLUGIN_ENV = '''\
"""Declarations only: gem imports this module to list ids, so keep it cheap (no env code here)."""

from gem_core import EnvSpec, PluginManifest, hookimpl


@hookimpl
def plugin_manifest() -> PluginManifest:
    # Namespace "$name" is yours: other distributions cannot register ids in it.
    return PluginManifest(api_version=1, namespaces=("$name",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            id="$name:Reverse-v0",
            entry_point="$package.env:ReverseEnv",
            description="Answer with the given word written backwards.",
            tags=("single-turn", "offline"),
        ),
        EnvSpec(
            id="$name:Reverse-v0-long",
            entry_point="$package.env:ReverseEnv",
            kwargs={"min_length": 6},
            description="Reverse-v0 with words of 6 letters or more.",
            tags=("single-turn", "offline"),
        ),
    ]
'''

_ENV = '''\
"""An example env: replace it with yours and keep the tests green."""

from __future__ import annotations

from typing import Any

from gem_core import Env
from gem_core.errors import ResetNeeded

WORDS = ("apple", "river", "stone", "cloud", "tiger", "piano", "lemon", "garden", "window", "planet")


class ReverseEnv(Env):
    """Single turn: the agent gets a word and answers with it reversed (reward 1.0 if right)."""

    metadata = {"multi_turn": False}

    def __init__(self, min_length: int = 1) -> None:
        self.words = [w for w in WORDS if len(w) >= min_length]
        if not self.words:
            raise ValueError(f"no word has {min_length} letters or more")
        self.word = ""
        self.running = False  # step() is allowed only between reset() and the step that ends the episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random: use it, never the global random
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        self.running = True
        return f"Write the word {self.word!r} backwards. Answer with that one word.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self.running:
            raise ResetNeeded("ReverseEnv.step() called before reset() or after the episode ended: call reset()")
        self.running = False  # one turn per episode
        answer = action.strip().strip("'\\"").lower()
        success = answer == self.word[::-1]
        return "Correct." if success else "Wrong.", 1.0 if success else 0.0, True, False, {"success": success}

    def sample_random_action(self) -> str:
        return self.words[int(self.np_random.integers(len(self.words)))][::-1]
'''

_TESTS_ENV = """\
import pytest

import gem_core


# gem_core's pytest plugin runs the env checker once per id of the namespace.
@pytest.mark.gem_envs(namespace="$name")
def test_env_contract(gem_env_id: str, gem_check_env) -> None:
    gem_check_env(gem_env_id)


def test_reversed_word_wins() -> None:
    env = gem_core.make("$name:Reverse-v0")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(env.word[::-1])
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_long_variant_only_has_long_words() -> None:
    env = gem_core.make("$name:Reverse-v0-long")
    assert min(len(w) for w in env.words) >= 6
"""

_PLUGIN_TOOL = '''\
"""Declarations only: gem imports this module to list tools, so keep it cheap."""

from gem_core import PluginManifest, ToolSpec, hookimpl


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1)


@hookimpl
def register_tools() -> list[ToolSpec]:
    # make_tool("$name", **kwargs) calls the entry point with the spec's kwargs and the caller's.
    return [ToolSpec(name="$name", entry_point="$package.tool:$tool_class", description="Upper-cases text.")]
'''

_TOOL = '''\
"""An example tool: replace it with yours and keep the tests green."""

from __future__ import annotations

from typing import Any

from gem_core.tools import Tool, ToolResult


class $tool_class(Tool):
    """Returns the text it is given in upper case."""

    name = "$name"
    description = "Returns the given text in upper case."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    tag_argument = "text"  # also callable as <$name>some text</$name>

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        text = arguments.get("text")
        if not isinstance(text, str):  # errors go back to the model; never raise
            return ToolResult(error="give the text as a string, e.g. <$name>hello</$name>")
        return ToolResult(output=text.upper() + self.suffix)
'''

_TESTS_TOOL = """\
import asyncio

import gem_core
from gem_core.tools import Tool, ToolEnvWrapper


def test_tool_is_registered_and_runs() -> None:
    tool = gem_core.make_tool("$name", suffix="!")
    assert isinstance(tool, Tool)
    assert asyncio.run(tool.execute({"text": "hi"})).output == "HI!"
    assert asyncio.run(tool.execute({})).error is not None


def test_tool_through_the_tool_wrapper() -> None:
    env = ToolEnvWrapper(gem_core.make("core:NumberGuess-v0"), ["$name"])
    obs, _ = env.reset(seed=0)
    assert "$name" in obs
    obs, *_ = env.step("<$name>hello</$name>")
    assert "HELLO" in obs
    env.close()
"""

_README = """\
# $dist

$summary A [gem](https://pypi.org/project/gem-core/) plugin.

```bash
pip install -e .[test]
gem $listing            # shows what this package registers
$check
pytest
```

Where things are:

- `$package/plugin.py`: the declarations gem reads (`gem_core` entry point in `pyproject.toml`).
- `$package/$module.py`: the $kind itself.
- `tests/`: the package's tests$tests_note.
- `.github/workflows/ci.yml`: the same commands on every push.

Publishing: bump `version` in `pyproject.toml`, then `python -m build` and `twine upload dist/*`.
Keep the `gem-core-plugin` keyword so people can find the package.
"""

_CI = """\
name: ci
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: pip install -e .[test]
      - run: $check
      - run: pytest
"""


def scaffold(kind: str, name: str, directory: Path | None = None) -> list[Path]:
    """Write a new plugin package for an env (namespace ``name``) or a tool (named ``name``).

    Args:
        kind: ``"env"`` or ``"tool"``.
        name: Lower-case identifier: the env namespace or the tool name. The distribution
            is ``gem-<name>`` (underscores become dashes), the package ``gem_<name>``.
        directory: Where to create it; defaults to ``./gem-<name>``. Must not exist yet.

    Returns:
        The files written.

    Raises:
        ConfigError: bad kind or name, or the directory exists.
    """
    if kind not in KINDS:
        raise ConfigError(f"gem new makes {' or '.join(KINDS)}, not {kind!r}")
    if not _NAME_RE.match(name):
        suggestion = re.sub(r"[^a-z0-9_]", "_", name.lower()).lstrip("0123456789_") or "mygame"
        raise ConfigError(
            f"name {name!r} must be lower-case letters, digits and '_', starting with a letter "
            f"(it becomes the {'namespace' if kind == 'env' else 'tool name'}); try {suggestion!r}"
        )
    dist, package = f"gem-{name.replace('_', '-')}", f"gem_{name}"
    taken = _collisions(kind, name, dist, package)
    if taken:
        raise ConfigError(
            f"gem new {kind} {name}: {'; '.join(taken)}. Pick another name, e.g. {name + '_' + kind + 's'!r}."
        )
    root = Path(directory) if directory is not None else Path.cwd() / dist
    if root.exists():
        raise ConfigError(f"{root} exists already; pick another name or --dir")
    check = (
        f"gem check --all --namespace {name}"
        if kind == "env"
        else f'python -c "import gem_core; gem_core.make_tool({name!r})"'
    )
    values = {
        "name": name,
        "dist": dist,
        "package": package,
        "kind": kind,
        "module": kind,
        "check": check,
        "listing": f"list --namespace {name}" if kind == "env" else "plugins",
        "summary": f"Text environments in the {name!r} namespace." if kind == "env" else f"The {name!r} tool.",
        "tests_note": ", including the env checker on every id" if kind == "env" else "",
        "tool_class": "".join(part.capitalize() for part in name.split("_")) + "Tool",
    }
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        ".github/workflows/ci.yml": _CI,
        f"{package}/__init__.py": f'"""{values["summary"]}"""\n',
        f"{package}/plugin.py": _PLUGIN_ENV if kind == "env" else _PLUGIN_TOOL,
        f"{package}/{kind}.py": _ENV if kind == "env" else _TOOL,
        f"tests/test_{kind}.py": _TESTS_ENV if kind == "env" else _TESTS_TOOL,
    }
    written = []
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template).substitute(values))
        written.append(path)
    return written


def _collisions(kind: str, name: str, dist: str, package: str) -> list[str]:
    """Why the names the package would get are taken: each reason, or nothing."""
    reasons = []
    installed = _installed(dist)
    if dist in RESERVED_DISTRIBUTIONS or installed:
        what = "is one of gem's own packages" if dist in RESERVED_DISTRIBUTIONS else f"is installed ({installed})"
        reasons.append(f"the distribution would be {dist!r}, which {what}: installing it would replace that one")
    if package in RESERVED_PACKAGES or importlib.util.find_spec(package) is not None:
        reasons.append(f"the import package would be {package!r}, which exists already")
    reasons += _registered(kind, name)
    return reasons


def _installed(dist: str) -> str | None:
    try:
        return f"{dist} {md.version(dist)}"
    except md.PackageNotFoundError:
        return None


def _registered(kind: str, name: str) -> list[str]:
    """The namespace or tool name is already in use by an installed package (or reserved for gem's)."""
    from gem_core.plugins import GEM_NAMESPACES, get_discovery

    registry = get_discovery().registry
    if kind == "tool":
        spec = registry.tools.get(name)
        return [f"tool {name!r} is registered already by {spec.owner}"] if spec is not None else []
    owner = registry.namespace_owners.get(name) or GEM_NAMESPACES.get(name)
    if owner is None and registry.env_ids(namespace=name):
        owner = registry.spec(registry.env_ids(namespace=name)[0]).owner
    return [f"namespace {name!r} belongs to {owner}"] if owner else []
