"""Terminal env benchmark: episode set-up, command round trip, episodes per second at 1, 8 and 32 concurrent.

Run (as root, where the episode sandbox works): ``python bench/terminal.py [--json out.json]``.

Sections:

* ``layers``: what starting an episode's writable root costs with each strategy, on the same task
  layer (``--layer-files`` files of ``--layer-kb`` KiB): a full copy (``shutil.copytree``), a hardlink
  farm (``cp -al``: a copy of the tree's metadata, and files shared until written, which then needs
  copy-up on write that hardlinks cannot do by themselves), a reflink copy (``cp --reflink=always``;
  copy-on-write where the file system has it), and the overlay the sandbox uses (the sandbox's
  start-up with that layer, minus its start-up with no layer).
* ``episode``: the sandbox's start-up alone (interpreter, namespaces, mounts) and a task's reset
  (start-up plus its set-up commands), each median and p95.
* ``round_trip``: ``true`` in a warm episode, p50 and p95.
* ``backends``: the sandbox against each container runtime here (Podman, Docker where a daemon
  answers) on one shipped task: episode start (+close), a ``true`` round trip through the episode's
  session (against one ``exec`` per command), the check phase, the image build (first and cached),
  and the ratios to the sandbox; with ``--harbor-python``, Harbor's own ``docker`` environment on the same
  task's image (see ``bench_harbor``), and a side-by-side table of the medians with their ratios.
* ``throughput``: whole episodes (reset, the reference solution, ``<done>``, the checker, close) per
  second with 1, 8 and 32 running at once (threads), on a task mix from the shipped tasks.

Numbers are from one run on whatever machine runs it; the docs say which machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gem_terminal.env import TerminalEnv, reference_action
from gem_tool_python.episode import EpisodeSandbox, episodes_available, prepare_layer

MIX = ("text-sort-uniq", "files-archive", "git-init-commit", "python-fix-syntax")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def bench_layers(args: argparse.Namespace, rows: dict[str, Any]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gem-bench-layers-"))
    try:
        source = work / "source"
        for i in range(args.layer_files):
            path = source / f"d{i % 20}" / f"f{i}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(args.layer_kb * 1024))
        layer = prepare_layer(source, work / "layer")
        counter = iter(range(10**6))

        def copy() -> None:
            shutil.copytree(layer, work / f"copy{next(counter)}", symlinks=True)

        def hardlinks() -> None:
            subprocess.run(["cp", "-al", str(layer), str(work / f"links{next(counter)}")], check=True)

        reflink = subprocess.run(
            ["cp", "-a", "--reflink=always", str(layer), str(work / "reflink-probe")], capture_output=True, text=True
        )
        results = {"copytree": timed(copy, args.repeat), "hardlink_farm": timed(hardlinks, args.repeat)}
        if reflink.returncode == 0:
            results["reflink"] = timed(
                lambda: subprocess.run(
                    ["cp", "-a", "--reflink=always", str(layer), str(work / f"r{next(counter)}")], check=True
                ),
                args.repeat,
            )
        else:
            rows["layers"]["reflink"] = f"unsupported here: {reflink.stderr.strip().splitlines()[0][:80]}"
        empty, layered = [], []
        for _ in range(args.repeat):
            with EpisodeSandbox([]) as sandbox:
                empty.append(sandbox.setup_s)
            with EpisodeSandbox([layer]) as sandbox:
                layered.append(sandbox.setup_s)
        results["overlay (sandbox start with the layer)"] = layered
        rows["layers"]["sandbox start, no layer (median s)"] = statistics.median(empty)
        for name, values in results.items():
            rows["layers"][f"{name} (median s)"] = statistics.median(values)
        size = sum(f.stat().st_size for f in layer.rglob("*") if f.is_file())
        rows["layers"]["layer"] = f"{args.layer_files} files, {size / 2**20:.1f} MiB"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_episode(args: argparse.Namespace, rows: dict[str, Any]) -> None:
    starts = timed(lambda: EpisodeSandbox([]).close(), args.repeat)
    rows["episode"]["sandbox start+close p50 (s)"] = percentile(starts, 0.5)
    rows["episode"]["sandbox start+close p95 (s)"] = percentile(starts, 0.95)
    env = TerminalEnv(task="git-resolve-conflict")  # five set-up commands (git init, commits, branches)
    try:
        resets = timed(lambda: env.reset(seed=0), args.repeat)
    finally:
        env.close()
    rows["episode"]["reset with set-up, git-resolve-conflict p50 (s)"] = percentile(resets, 0.5)
    rows["episode"]["reset with set-up, git-resolve-conflict p95 (s)"] = percentile(resets, 0.95)


def bench_round_trip(args: argparse.Namespace, rows: dict[str, Any]) -> None:
    with EpisodeSandbox([]) as sandbox:
        sandbox.run("true")
        times = [sandbox.run("true").elapsed_s for _ in range(args.commands)]
        cat = [sandbox.run("seq 1 2000").elapsed_s for _ in range(args.commands // 4)]
    rows["round_trip"]["`true` p50 (ms)"] = 1000 * percentile(times, 0.5)
    rows["round_trip"]["`true` p95 (ms)"] = 1000 * percentile(times, 0.95)
    rows["round_trip"]["`seq 1 2000` (9 KB out) p50 (ms)"] = 1000 * percentile(cat, 0.5)


def one_episode(index: int) -> float:
    name = MIX[index % len(MIX)]
    env = TerminalEnv(task=name)
    try:
        env.reset(seed=index)
        env.step(reference_action(env.tasks[0]))
        reward = env.step("<done></done>")[1]
    finally:
        env.close()
    if reward != 1.0:
        raise RuntimeError(f"{name}: the reference solution scored {reward}")
    return reward


def bench_throughput(args: argparse.Namespace, rows: dict[str, Any]) -> None:
    one_episode(0)  # builds the task layers once, as a training run does
    for concurrency in args.concurrency:
        count = max(args.episodes, concurrency * 2)
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one_episode, range(count)))
        elapsed = time.perf_counter() - start
        rows["throughput"][f"{concurrency} concurrent: episodes/s"] = count / elapsed


def bench_backends(args: argparse.Namespace, rows: dict[str, Any]) -> None:
    """Episode start (+close), command round trip and the check phase per backend, on one shipped task."""
    from gem_terminal.container.backend import runtime_for
    from gem_terminal.env import TASKS_DIR, task_layer
    from gem_terminal.loader import TerminalTask, load_task
    from gem_tool_python.episode import EpisodeConfig

    from gem_core.errors import ToolError

    task = load_task(TASKS_DIR / "text-sort-uniq")
    assert isinstance(task, TerminalTask)
    out = rows["backends"]
    config = EpisodeConfig()
    layer = task_layer(task, config.uid)

    def sandbox_start() -> None:
        EpisodeSandbox([layer], config).close()

    out["sandbox"] = {"start+close p50 (s)": statistics.median(timed(sandbox_start, args.repeat))}
    with EpisodeSandbox([layer], config) as sandbox:
        rt = timed(lambda: sandbox.run("true"), args.backend_commands)
    out["sandbox"]["`true` round trip p50 (ms)"] = 1000 * statistics.median(rt)
    for kind in ("podman", "docker"):
        try:
            runtime = runtime_for(kind)  # type: ignore[arg-type]
        except ToolError as exc:
            out[kind] = f"unavailable: {exc}"
            continue
        out[kind] = _bench_container(runtime, task.path, config, args, out["sandbox"])
    if args.harbor_python:
        docker = out.get("docker")
        if isinstance(docker, dict):
            out["harbor docker"] = bench_harbor(args, docker["image"], out["sandbox"])
        else:
            out["harbor docker"] = f"not run: gem's docker backend is {docker}"
    print(side_by_side(out), flush=True)


#: Run by Harbor's interpreter (``--harbor-python``), never imported here: Harbor's ``DockerEnvironment``
#: (Docker Compose; one ``docker compose exec`` per command) started and stopped as a trial does, then
#: ``true`` through its ``exec``. Its one argument: JSON with ``environment_dir``, ``repeat``, ``commands``.
HARBOR_DRIVER = """
import asyncio, json, logging, sys, tempfile, time, uuid
from pathlib import Path
from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

spec = json.loads(sys.argv[1])
logging.disable(logging.WARNING)
root = tempfile.mkdtemp(prefix="gem-bench-harbor-")

def make():
    paths = TrialPaths(trial_dir=Path(tempfile.mkdtemp(dir=root)))
    paths.mkdir()
    return DockerEnvironment(
        environment_dir=Path(spec["environment_dir"]), environment_name="gem-bench",
        session_id="gem-bench-" + uuid.uuid4().hex[:8], trial_paths=paths, task_env_config=EnvironmentConfig())

async def main():
    out = {}
    env = make()
    started = time.perf_counter()
    await env.start(force_build=False)
    await env.stop(delete=False)
    out["first start+stop (s)"] = time.perf_counter() - started
    out["start+stop (s)"] = []
    for _ in range(spec["repeat"]):
        env = make()
        started = time.perf_counter()
        await env.start(force_build=False)
        await env.stop(delete=False)
        out["start+stop (s)"].append(time.perf_counter() - started)
    env = make()
    await env.start(force_build=False)
    try:
        out["exec true (s)"] = []
        for _ in range(spec["commands"]):
            started = time.perf_counter()
            result = await env.exec("true", timeout_sec=60)
            out["exec true (s)"].append(time.perf_counter() - started)
            assert result.return_code == 0, result
    finally:
        await env.stop(delete=True)
    print(json.dumps(out))

asyncio.run(main())
"""


def bench_harbor(args: argparse.Namespace, image: str, sandbox: dict[str, Any]) -> dict[str, Any] | str:
    """Harbor's ``docker`` environment on gem's image of the same task, through ``--harbor-python``.

    Its environment folder is one ``FROM`` line naming the image gem's docker episodes run, so both
    start the same image; Harbor builds it through Compose (a cache hit), starts ``main`` with
    ``sleep infinity``, and runs each command as its own ``docker compose exec``. Harbor's container has the
    default network (another policy needs its egress sidecar, built from the network); gem's has none.
    Docker Compose must be a plugin of the ``docker`` client: ``--harbor-docker-config`` names a folder
    with ``cli-plugins/docker-compose`` where it is not installed (``DOCKER_CONFIG`` for Harbor alone:
    Podman reads that variable too).
    """
    folder = Path(tempfile.mkdtemp(prefix="gem-bench-harbor-env-"))
    try:
        (folder / "Dockerfile").write_text(f"FROM {image}\n")
        spec = {"environment_dir": str(folder), "repeat": args.repeat, "commands": args.harbor_commands}
        bound = 300 + 120 * args.repeat + 30 * args.harbor_commands  # every Compose call is bounded by Harbor too
        try:
            done = subprocess.run(
                [args.harbor_python, "-c", HARBOR_DRIVER, json.dumps(spec)],
                capture_output=True,
                text=True,
                timeout=bound,
                cwd=folder,
                env={
                    **os.environ,
                    **({"DOCKER_CONFIG": args.harbor_docker_config} if args.harbor_docker_config else {}),
                },
            )
        except subprocess.TimeoutExpired:
            return f"failed: Harbor's environment ran past {bound} s"
        if done.returncode != 0:
            return f"failed: {(done.stderr or done.stdout).strip()[-600:]}"
        measured = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    row: dict[str, Any] = {
        "first start+stop (s)": measured["first start+stop (s)"],
        "start+close p50 (s)": statistics.median(measured["start+stop (s)"]),
        "`true` round trip p50 (ms)": 1000 * statistics.median(measured["exec true (s)"]),
    }
    row["start ratio to the sandbox"] = row["start+close p50 (s)"] / sandbox["start+close p50 (s)"]
    row["round trip ratio to the sandbox"] = row["`true` round trip p50 (ms)"] / sandbox["`true` round trip p50 (ms)"]
    return row


def side_by_side(out: dict[str, Any]) -> str:
    """The backends' medians as one Markdown table, each with its ratio to the sandbox's."""
    columns = [name for name, row in out.items() if isinstance(row, dict)]
    lines = ["| what (p50) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    rows = (
        ("episode start + close", "start+close p50 (s)", "s"),
        ("`true` through the episode's session (Harbor: its `exec`)", "`true` round trip p50 (ms)", "ms"),
        ("`true` as one `exec` per command", "one `exec` per command p50 (ms)", "ms"),
    )
    for label, key, unit in rows:
        cells = []
        for name in columns:
            value = out[name].get(key)
            if key.startswith("one") and name == "harbor docker":
                value = out[name].get("`true` round trip p50 (ms)")  # Harbor's exec is one per command
            base = out["sandbox"].get(key) or out["sandbox"]["`true` round trip p50 (ms)"]
            if value is None:
                cells.append("")
                continue
            ratio = "" if name == "sandbox" else f" ({value / base:.{1 if value / base < 10 else 0}f}x)"
            cells.append(f"{value:.3g} {unit}{ratio}" if value < 1000 else f"{value:.0f} {unit}{ratio}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bench_container(
    runtime: Any, path: Path, config: Any, args: argparse.Namespace, sandbox: dict[str, Any]
) -> dict[str, Any]:
    from gem_terminal.container.backend import ContainerConfig
    from gem_terminal.container.images import build_task_image
    from gem_terminal.container.session import ContainerEpisode
    from gem_terminal.loader import TerminalTask, load_task

    ca = ContainerConfig(ca_bundle=args.ca_bundle).ca_path() if args.ca_bundle else None
    task = load_task(path, backend="container")
    assert isinstance(task, TerminalTask), task
    started = time.perf_counter()
    image = build_task_image(runtime, task, ca_bundle=ca, base_images="map")
    cached = timed(lambda: build_task_image(runtime, task, ca_bundle=ca, base_images="map"), 3)
    row: dict[str, Any] = {
        "first build or cache hit (s)": time.perf_counter() - started,
        "cached build p50 (s)": statistics.median(cached),
    }

    def container_start() -> None:
        ContainerEpisode(runtime, image, config).close()

    row["start+close p50 (s)"] = statistics.median(timed(container_start, args.repeat))
    checks = []
    for _ in range(max(args.repeat // 2, 1)):
        with ContainerEpisode(runtime, image, config) as episode:
            started = time.perf_counter()
            episode.begin_check()
            checks.append(time.perf_counter() - started)
    row["check phase (stop, diff, commit, fresh container) p50 (s)"] = statistics.median(checks)
    with ContainerEpisode(runtime, image, config) as episode:
        rt = timed(lambda: episode.run("true"), args.backend_commands)
        name = episode.name
        execs = timed(lambda: runtime.call("exec", name, "true"), max(args.backend_commands // 10, 5))
    row["image"] = image
    row["`true` round trip p50 (ms)"] = 1000 * statistics.median(rt)
    row["one `exec` per command p50 (ms)"] = 1000 * statistics.median(execs)
    row["start ratio to the sandbox"] = row["start+close p50 (s)"] / sandbox["start+close p50 (s)"]
    row["round trip ratio to the sandbox"] = row["`true` round trip p50 (ms)"] / sandbox["`true` round trip p50 (ms)"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--layer-files", type=int, default=1000)
    parser.add_argument("--layer-kb", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--backend-commands", type=int, default=100)
    parser.add_argument("--ca-bundle", default=None, help="the host's CA bundle, for image builds behind a proxy")
    parser.add_argument(
        "--harbor-python", default=None, help="an interpreter with Harbor installed: also bench its docker environment"
    )
    parser.add_argument("--harbor-docker-config", default=None, help="DOCKER_CONFIG for Harbor (its compose plugin)")
    parser.add_argument("--harbor-commands", type=int, default=20, help="`true`s through Harbor's exec")
    sections = {"layers": bench_layers, "episode": bench_episode, "round_trip": bench_round_trip}
    sections.update(throughput=bench_throughput, backends=bench_backends)
    parser.add_argument("--sections", nargs="+", choices=sorted(sections), default=list(sections))
    args = parser.parse_args(argv)
    usable, why = episodes_available()
    if not usable:
        print(f"episode sandbox unavailable: {why}", file=sys.stderr)
        return 2
    rows: dict[str, Any] = {name: {} for name in args.sections}
    for name in args.sections:
        sections[name](args, rows)
        print(json.dumps({name: rows[name]}, indent=1), flush=True)
    load = os.getloadavg()
    rows["machine"] = {"cpus": os.cpu_count(), "load average (1, 5, 15 min)": load}
    print(json.dumps({"machine": rows["machine"]}))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
