"""Plugin discovery with real distributions pip-installed into a fresh virtualenv.

Two packages under tests/plugin_packages/: gem-demo-plugin (a working env package that owns
namespace 'demo') and gem-broken-plugin (one entry point per way a plugin can be broken or
hostile: missing dependency, module typo, raising hook, bad spec, bad manifest, plugin API 2,
misspelled hook, a squatter on the demo namespace and id, the demo entry-point name reused).
gem eval is left out here (the venv has no eval extra); tests/test_plugins.py runs it against
the same kinds of breakage in-process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "tests" / "plugin_packages"

# one pytest-xdist worker runs the whole module: the venv (a pip install of gem-core built from source, about
# 50 s) is a module fixture, which each worker that got one of these tests would build again
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("plugin-venv")]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("plugin-venv")
    path = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    # Built from copies: setuptools builds in the source tree (build/, *.egg-info), where another build of the
    # same tree (another tox env's install, a developer's) can change files mid-build (one such failed with
    # ENOENT while copying build/lib of gem-core).
    source = folder / "gem-core"
    shutil.copytree(ROOT / "gem_core", source / "gem_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    plugins = [shutil.copytree(PACKAGES / name, folder / name) for name in ("gem-demo-plugin", "gem-broken-plugin")]
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    dists = [str(source), *map(str, plugins)]
    subprocess.run([*pip, *dists], check=True)
    return path


def gem(venv: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_CORE_", "PYTEST_"))}
    environ.update(env)
    environ.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(venv / "bin" / "gem"), *args], capture_output=True, text=True, env=environ, cwd=venv, timeout=120
    )


#: What gem-broken-plugin's entry points must each be reported with.
BROKEN = {
    "broken": "a_dependency_that_is_not_installed",
    "typo": "names module 'gem_broken_plugin.plugn', which does not exist",
    "raises": "kaboom in register_envs",
    "badspec": "entry_pont",
    "badmanifest": "expected PluginManifest",
    "future": "targets gem plugin API 2",
    "misspelled": "rename it to 'register_envs'",
    "aaa_intruder": "which gem-demo-plugin owns",
}


@pytest.mark.parametrize(
    ("argv", "code", "shown"),
    [
        (["list"], 0, "demo:Countdown-v0-old -> demo:Countdown-v0 (deprecated)"),
        (["list", "--json"], 0, '"version": "0.4.2"'),
        (["info", "demo:Countdown-v0"], 0, "gem-demo-plugin 0.4.2"),
        (["check", "demo:Countdown-v0"], 0, "ok    demo:Countdown-v0"),
        (["check", "--all", "-n", "demo"], 0, "ok    demo:Countdown-v0"),
        (["check", "--all"], 3, "ok    demo:Countdown-v0"),
        (["plugins"], 3, "[gem-demo-plugin 0.4.2]  loaded"),
        (["play", "demo:Countdown-v0", "--seed", "0"], 0, "bye. return this episode"),
    ],
    ids=["list", "list-json", "info", "check", "check-namespace", "check-all", "plugins", "play"],
)
def test_every_broken_kind_beside_a_healthy_package(venv: Path, argv: list[str], code: int, shown: str) -> None:
    """Installed for real: each command works for gem-demo-plugin, and names what did not load."""
    proc = gem(venv, *argv)
    assert (proc.returncode, shown in proc.stdout) == (code, True), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    if argv[0] in {"list", "plugins"}:
        reported = proc.stdout + proc.stderr
        for name, text in BROKEN.items():
            assert f"'{name}' from gem-broken-plugin 1.0.1" in reported and text in reported, name
        assert "impostor" not in proc.stdout


def test_make_in_a_script_reports_each_problem_once(venv: Path) -> None:
    code = (
        "import gem_core\n"
        "env = gem_core.make('demo:Countdown-v0')\n"
        "print(env.spec.distribution, env.reset(seed=0)[0][:8])\n"
    )
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split()[0] == "gem-demo-plugin"
    warned = [line for line in proc.stderr.splitlines() if "PluginWarning" in line]
    assert len(warned) == len(set(warned)) >= len(BROKEN)  # each problem once
    assert all(text in proc.stderr for text in BROKEN.values())
    assert "entry_points.txt" in proc.stderr  # the module typo points at its declaration
    strict = gem(venv, "list", GEM_CORE_STRICT_PLUGINS="1")
    assert strict.returncode == 3 and "gem: plugin error" in strict.stderr


def test_block_list(venv: Path) -> None:
    proc = gem(venv, "plugins", GEM_CORE_BLOCK_PLUGINS="gem-broken-plugin")
    assert proc.returncode == 0, proc.stderr
    assert "broken  [gem-broken-plugin 1.0.1]  blocked" in proc.stdout
    assert "[gem-demo-plugin 0.4.2]  loaded" in proc.stdout
    assert "envs: demo:Countdown-v0, demo:Countdown-v0-old" in proc.stdout


def test_allow_list(venv: Path) -> None:
    proc = gem(venv, "plugins", GEM_CORE_PLUGINS="gem-demo-plugin")
    assert proc.returncode == 0, proc.stderr
    assert "broken  [gem-broken-plugin 1.0.1]  not allowed" in proc.stdout
    assert "[gem-demo-plugin 0.4.2]  loaded" in proc.stdout


def test_disable_autoload(venv: Path) -> None:
    proc = gem(venv, "list", GEM_CORE_DISABLE_PLUGIN_AUTOLOAD="1")
    assert proc.returncode == 0, proc.stderr
    assert "core:NumberGuess-v0" in proc.stdout
    assert "demo:" not in proc.stdout


def test_installed_env_plays_and_checks(venv: Path) -> None:
    proc = gem(venv, "check", "demo:Countdown-v0", GEM_CORE_BLOCK_PLUGINS="gem-broken-plugin")
    assert (proc.returncode, proc.stdout) == (0, "ok    demo:Countdown-v0\n"), proc.stderr
    code = (
        "import warnings, gem_core\n"
        "env = gem_core.make('demo:Countdown-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "n = int(obs.split()[3].rstrip('.'))\n"
        "total = sum(env.step(str(k))[1] for k in range(n, 0, -1))\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    gem_core.make('demo:Countdown-v0-old')\n"
        "print(total, w[0].category.__name__)\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GEM_CORE_")}
    environ["GEM_CORE_BLOCK_PLUGINS"] = "gem-broken-plugin"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=environ, cwd=venv, check=True
    )
    assert out.stdout.split() == ["1.0", "DeprecationWarning"]


def test_import_does_not_discover_or_import_heavy_modules(venv: Path) -> None:
    code = (
        "import sys, gem_core\n"
        "heavy = [m for m in ('numpy', 'pydantic', 'pluggy', 'gem_demo_plugin') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_scaffolded_packages_build_install_check_and_test(venv: Path, tmp_path: Path) -> None:
    """`gem new env/tool` -> wheels -> installed: listed, checked, and their own tests pass with the pytest plugin."""
    python = str(venv / "bin" / "python")
    for kind, name in (("env", "mygame"), ("tool", "shouty")):
        proc = gem(venv, "new", kind, name, "--dir", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
    wheels = tmp_path / "wheels"
    pip = [python, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), tmp_path / "mygame", tmp_path / "shouty"], check=True
    )
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert built == ["gem_mygame-0.1.0-py3-none-any.whl", "gem_shouty-0.1.0-py3-none-any.whl"]
    subprocess.run([*pip, "install", *map(str, wheels.glob("*.whl")), "pytest>=8"], check=True)

    listed = gem(venv, "list", "--namespace", "mygame", GEM_CORE_BLOCK_PLUGINS="gem-broken-plugin")
    assert listed.stdout.splitlines()[1].split()[:2] == ["mygame:Reverse-v0", "gem-mygame"], listed.stderr
    # the CI step of the generated workflow; another distribution's broken plugin does not fail it
    checked = gem(venv, "check", "--all", "--namespace", "mygame")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 ok, 0 failed" in checked.stdout and "plugins with problems, not needed here" in checked.stderr
    plugins = gem(venv, "plugins", GEM_CORE_BLOCK_PLUGINS="gem-broken-plugin")
    assert plugins.returncode == 0 and "tools: shouty" in plugins.stdout and "owns namespaces: mygame" in plugins.stdout
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_CORE_", "PYTEST_"))}
    environ.pop("PYTHONPATH", None)
    for name, passed in (("mygame", "4 passed"), ("shouty", "2 passed")):
        proc = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path / name, capture_output=True, text=True, env=environ, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0 and passed in proc.stdout, proc.stdout + proc.stderr
