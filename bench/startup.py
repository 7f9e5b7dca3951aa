"""Start-up cost: ``import gem_core``, first ``make``, and ``gem list`` with every installed plugin.

Each measurement runs in a fresh interpreter (imports are cached within one), N times; we
report the median and the spread. When GEM (``gem-llm``) is installed, ``import gem`` is
measured the same way, side by side.

    python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import time

TARGETS_MS = {"import gem_core": 100.0, "gem list": 300.0}


def time_command(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    py = sys.executable
    gem_cli = shutil.which("gem") or ""
    cases: list[tuple[str, list[str]]] = [
        ("python (baseline)", [py, "-c", "pass"]),
        ("import gem_core", [py, "-c", "import gem_core"]),
        ("import + list_envs()", [py, "-c", "import gem_core; gem_core.list_envs()"]),
        ("import + first make()", [py, "-c", "import gem_core; gem_core.make('core:NumberGuess-v0').reset(seed=0)"]),
        ("gem list", [gem_cli, "list"] if gem_cli else [py, "-m", "gem_core.cli", "list"]),
    ]
    if importlib.util.find_spec("gem") is not None:
        cases.append(("GEM: import gem", [py, "-c", "import gem"]))
    else:
        print("(gem-llm not installed: no GEM column; `pip install gem-llm` to compare)\n")

    count = subprocess.run(
        [py, "-c", "import gem_core; print(len(gem_core.list_envs()))"], capture_output=True, text=True
    )
    print(f"registered env ids: {count.stdout.strip()}; runs per case: {args.runs}\n")
    print(f"{'case':<26}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'net of python':>15}{'target':>9}")
    baseline = None
    for name, argv in cases:
        samples = time_command(argv, args.runs)
        median = statistics.median(samples)
        baseline = median if baseline is None else baseline
        target = TARGETS_MS.get(name)
        target_text = "" if target is None else f"{'ok' if median - baseline < target else 'MISS'} <{target:g}"
        print(
            f"{name:<26}{median:>10.1f}{min(samples):>9.1f}{max(samples):>9.1f}{median - baseline:>15.1f}{target_text:>9}"
        )
    print("\n'net of python' subtracts the bare interpreter start-up; targets apply to it.")


if __name__ == "__main__":
    main()
