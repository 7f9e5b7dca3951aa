"""Start-up cost: ``import gem_core``, first ``make``, and ``gem list`` with every installed plugin.

Each measurement runs in a fresh interpreter (imports are cached within one), N times; we
report the median and the spread. When GEM (``gem-llm``) is installed, ``import gem`` is
measured the same way, side by side.

Then ``gem list`` in venvs with 1, 10 and 100 generated env packages installed (``--packages``;
each a distribution with an entry point, a plugin module and three env ids, written as pip
leaves a wheel install; the venv sees this interpreter's packages through a ``.pth`` file):
discovering (``GEM_CORE_LIST_CACHE=0``: every plugin imported, every spec validated) and from
the cached listing, with the cost per package.

    python bench/startup.py [--runs 15] [--packages 1,10,100]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ENV = "core:NumberGuess-v0"
TARGETS_MS = {"import gem_core": 100.0, "gem list": 80.0}


def time_command(argv: list[str], runs: int, env: dict[str, str] | None = None) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


PLUGIN = """from gem_core import hookimpl
from gem_core.registry import EnvSpec, PluginManifest


@hookimpl
def plugin_manifest():
    return PluginManifest(api_version=1, namespaces=("{ns}",))


@hookimpl
def register_envs():
    return [
        EnvSpec(id=f"{ns}:Guess{{k}}-v0", entry_point="gem_core.testing:NumberGuessEnv", description="generated")
        for k in range(3)
    ]
"""


def package_venv(root: Path, count: int) -> Path:
    """A venv with ``count`` generated env packages, seeing this interpreter's packages; its python."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    parents = [p for p in site.getsitepackages() if os.path.isdir(p)]
    (purelib / "_parent_env.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in parents))
    for i in range(count):
        ns = f"bench{i}"
        (purelib / f"gem_{ns}.py").write_text(PLUGIN.format(ns=ns))
        info = purelib / f"gem_{ns}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gem-{ns}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[gem_core]\n{ns} = gem_{ns}\n")
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text(f"gem_{ns}.py,,\n{info.name}/METADATA,,\n")
    return python


def bench_packages(counts: list[int], runs: int) -> None:
    print(f"\n`gem list` with generated env packages installed (median of {runs} runs, ms)\n")
    print(f"{'packages':>8}{'python':>9}{'discover':>10}{'cached':>9}{'discover net':>14}{'cached net':>12}")
    rows: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gem-startup-") as scratch:
        for count in counts:
            python = str(package_venv(Path(scratch) / f"venv{count}", count))
            env = {**os.environ, "GEM_CORE_CACHE_DIR": str(Path(scratch) / f"cache{count}")}
            listing = [python, "-m", "gem_core.cli", "list"]
            subprocess.run(listing, check=True, stdout=subprocess.DEVNULL, env=env)  # fills the cache
            base = statistics.median(time_command([python, "-c", "pass"], runs, env))
            cold = statistics.median(time_command(listing, runs, {**env, "GEM_CORE_LIST_CACHE": "0"}))
            warm = statistics.median(time_command(listing, runs, env))
            rows[count] = (cold - base, warm - base)
            print(f"{count:>8}{base:>9.1f}{cold:>10.1f}{warm:>9.1f}{cold - base:>14.1f}{warm - base:>12.1f}")
    if len(rows) > 1:
        low, high = min(rows), max(rows)
        per = [(rows[high][k] - rows[low][k]) / (high - low) for k in (0, 1)]
        print(f"\nper extra package: discover {per[0]:.2f} ms, cached {per[1]:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--packages", default="1,10,100", help="generated env packages per venv ('' to skip)")
    args = parser.parse_args()
    py = sys.executable
    gem_cli = shutil.which("gem") or ""
    listing = [gem_cli, "list"] if gem_cli else [py, "-m", "gem_core.cli", "list"]
    subprocess.run(listing, check=True, stdout=subprocess.DEVNULL)  # fills the cached listing
    cases: list[tuple[str, list[str], dict[str, str] | None]] = [
        ("python (baseline)", [py, "-c", "pass"], None),
        ("import gem_core", [py, "-c", "import gem_core"], None),
        ("import + list_envs()", [py, "-c", "import gem_core; gem_core.list_envs()"], None),
        ("import + first make()", [py, "-c", f"import gem_core; gem_core.make({ENV!r}).reset(seed=0)"], None),
        ("gem list", listing, None),
        ("gem list (discover)", listing, {**os.environ, "GEM_CORE_LIST_CACHE": "0"}),
    ]
    if importlib.util.find_spec("gem") is not None:
        cases.append(("GEM: import gem", [py, "-c", "import gem"], None))
    else:
        print("(gem-llm not installed: no GEM column; `pip install gem-llm` to compare)\n")

    count = subprocess.run(
        [py, "-c", "import gem_core; print(len(gem_core.list_envs()))"], capture_output=True, text=True
    )
    print(f"registered env ids: {count.stdout.strip()}; runs per case: {args.runs}\n")
    print(f"{'case':<26}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'net of python':>15}{'target':>9}")
    baseline = None
    for name, argv, env in cases:
        samples = time_command(argv, args.runs, env)
        median = statistics.median(samples)
        baseline = median if baseline is None else baseline
        target = TARGETS_MS.get(name)
        target_text = "" if target is None else f"{'ok' if median - baseline < target else 'MISS'} <{target:g}"
        print(
            f"{name:<26}{median:>10.1f}{min(samples):>9.1f}{max(samples):>9.1f}{median - baseline:>15.1f}{target_text:>9}"
        )
    print("\n'net of python' subtracts the bare interpreter start-up; targets apply to it.")
    if args.packages:
        bench_packages([int(n) for n in args.packages.split(",")], args.runs)


if __name__ == "__main__":
    main()
