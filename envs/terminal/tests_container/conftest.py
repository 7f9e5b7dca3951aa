"""The real container runtimes here: every test that takes ``runtime`` runs on each one present.

Docker counts when its daemon answers, Podman when it and runc are installed; a machine with both runs
the suite on both (CI installs one: ``scripts/container_runtime.sh``). Where none is usable the tests
that need one are skipped, except in CI (``CI=true``): there a missing runtime is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gem_core.errors import ToolError
from gem_terminal.container.backend import ContainerConfig, runtime_for
from gem_terminal.container.runtime import Runtime, detect_runtime, present_runtimes
from gem_terminal.container.session import OWNER_LABEL

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "container_tasks"
#: Checked once at collection; ``none`` stands for "no runtime" (skipped, or failed in CI).
RUNTIMES = present_runtimes() or ["none"]


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> Runtime:
    if request.param != "none":
        return runtime_for(request.param)
    try:
        return detect_runtime("auto")  # what a user without either sees: the reasons for both
    except ToolError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs a container runtime: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def container_config(runtime: Runtime) -> ContainerConfig:
    # Behind this machine's TLS-intercepting proxy, pip in an image build needs the host's bundle.
    bundle = os.environ.get("GEM_TERMINAL_CA_BUNDLE") or "/etc/ssl/certs/ca-certificates.crt"
    return ContainerConfig(
        ca_bundle=bundle if Path(bundle).is_file() else None, base_images="map", runtime=runtime.kind
    )


@pytest.fixture
def no_leftovers(runtime: Runtime) -> Iterator[None]:
    """The test leaves no episode container and no checker image behind (of those this process started)."""
    mine = f"label={OWNER_LABEL}={os.getpid()}"  # other processes may play episodes on the same runtime

    def names() -> set[str]:
        listing = runtime.call("ps", "-a", "--filter", mine, "--format", "{{.Names}}")
        images = runtime.call("images", "--filter", mine, "--format", "{{.Repository}}")
        found = set(listing.stdout.decode().split())
        return found | {i for i in images.stdout.decode().split() if "gem-check-" in i}

    before = names()
    yield
    left = names() - before
    assert not left, f"left behind: {sorted(left)}"
