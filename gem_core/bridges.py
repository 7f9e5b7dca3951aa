"""Which of gem's bridges to other ecosystems work in this Python environment (``gem plugins --bridges``).

A bridge is a gem package (optionally with an extra) that speaks another project's API: OpenEnv's wire
protocol, OpenEnv's own SDK, verifiers, MCP, the trainers' adapters. It is usable when its package is
installed, its module is found, and every requirement the package declares (for that extra too) is
installed at a version inside the declared range. Nothing is imported: the check reads the installed
metadata only (OpenEnv's client alone takes seconds to import).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

__all__ = ["BRIDGES", "Bridge", "BridgeStatus", "bridge_status"]


@dataclass(frozen=True)
class Bridge:
    """One bridge: the gem package that carries it and how to install it.

    Attributes:
        name: What it bridges to, for people.
        distribution: The gem package.
        module: Its import name (found, not imported).
        install: The command that installs it, from a gem checkout.
        extra: The package's extra that brings the other project, if the bridge needs one.
        conflict: What upstream pins keep from installing beside it, if anything.
    """

    name: str
    distribution: str
    module: str
    install: str
    extra: str | None = None
    conflict: str = ""


_OPENENV_CONFLICT = (
    "openenv 0.10 needs mcp<2 (through fastmcp 3), gem-verifiers (verifiers 0.4.0) needs mcp==2.0.0 and "
    "gem-tool-mcp mcp>=2.0: use a second environment for OpenEnv's own SDK; gem-openenv without the extra "
    "speaks OpenEnv's protocol beside them"
)
_MCP2 = "needs mcp 2, which openenv 0.10 (mcp<2) excludes: OpenEnv's SDK goes in another environment"

#: The bridges gem ships, in the order ``gem plugins --bridges`` lists them.
BRIDGES: tuple[Bridge, ...] = (
    Bridge(
        "OpenEnv protocol (gem serve, openenv:* ids)", "gem-openenv", "gem_openenv", "pip install -e plugins/openenv"
    ),
    Bridge(
        "OpenEnv's own SDK and CLI (openenv validate, typed clients)",
        "gem-openenv",
        "openenv",
        "pip install -e 'plugins/openenv[openenv]'",
        extra="openenv",
        conflict=_OPENENV_CONFLICT,
    ),
    Bridge("verifiers envs", "gem-verifiers", "gem_verifiers", "pip install -e plugins/verifiers", conflict=_MCP2),
    Bridge("MCP tool servers", "gem-tool-mcp", "gem_tool_mcp", "pip install -e plugins/mcp", conflict=_MCP2),
    Bridge("TRL (GRPOTrainer, environment_factory)", "gem-trl", "gem_trl", "pip install -e adapters/trl"),
    Bridge("verl", "gem-verl", "gem_verl", "pip install -e adapters/verl"),
    Bridge("OpenRLHF", "gem-openrlhf", "gem_openrlhf", "pip install -e 'adapters/openrlhf[openrlhf]'", "openrlhf"),
    Bridge("RL2", "gem-rl2", "gem_rl2", "pip install -e 'adapters/rl2[rl2]'", "rl2"),
    Bridge("oat", "gem-oat", "gem_oat", "pip install -e 'adapters/oat[oat]'", "oat"),
    Bridge(
        "OpenAI-compatible gateway (agent harnesses)", "gem-gateway", "gem_gateway", "pip install -e plugins/gateway"
    ),
)


@dataclass
class BridgeStatus:
    """A bridge as found in this environment.

    Attributes:
        bridge: The bridge.
        version: The gem package's version, or ``None`` when it is not installed.
        requirements: Each declared requirement (``name spec``) -> the installed version, or ``None``.
        versions: The installed version of each required distribution found.
        problems: Why it is not usable, each with its fix; empty when it is.
    """

    bridge: Bridge
    version: str | None
    requirements: dict[str, str | None] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.version is not None and not self.problems


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _requires(name: str) -> list[str]:
    return metadata.requires(name) or []


def bridge_status(
    bridge: Bridge,
    version_of: Callable[[str], str | None] = _installed,
    requires_of: Callable[[str], list[str]] = _requires,
) -> BridgeStatus:
    """Whether ``bridge`` is usable here, the versions it runs on, and what to do when it is not.

    Args:
        bridge: The bridge to look at.
        version_of: The installed version of a distribution, or ``None`` (the real metadata by default).
        requires_of: A distribution's declared requirements (``Requires-Dist``; the real metadata by default).
    """
    from packaging.requirements import InvalidRequirement, Requirement

    status = BridgeStatus(bridge, version_of(bridge.distribution))
    if status.version is None:
        status.problems.append(f"{bridge.distribution} is not installed: {bridge.install}")
        return status
    environment = {"extra": bridge.extra or ""}
    for text in requires_of(bridge.distribution):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue  # another extra's (test, ...) or another platform's
        installed = version_of(requirement.name)
        spec = str(requirement.specifier)
        status.requirements[f"{requirement.name}{spec}"] = installed
        if installed is None:
            status.problems.append(
                f"{requirement.name}{spec} is not installed: {bridge.install}"
                + (f" (beware: {bridge.conflict})" if bridge.conflict else "")
            )
            continue
        status.versions[requirement.name] = installed
        if spec and not requirement.specifier.contains(installed, prereleases=True):
            status.problems.append(
                f"{requirement.name} {installed} is installed, {bridge.distribution} needs {requirement.name}{spec}"
                + (f" ({bridge.conflict})" if bridge.conflict else f": {bridge.install}")
            )
    if not status.problems and importlib.util.find_spec(bridge.module) is None:
        status.problems.append(f"the module {bridge.module} is not found: {bridge.install}")
    return status
