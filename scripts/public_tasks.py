"""Count and play public Terminal-Bench v1 / Harbor task folders with gem's loader and backends.

The folders are other people's code: they are read where they lie (outside the repository) and
never copied into it.

Count (what loads, per backend, and every refusal by reason)::

    python scripts/public_tasks.py count [--runtime docker] [--pythons 3.13=/path/python3.13]... \
        [--json counts.json] [NAME=]FOLDER...

Each FOLDER is searched for task folders (a folder holding ``task.yaml`` or ``task.toml``; the
search does not enter a task folder). Columns: ``container`` (``load_for_container`` on the named
runtime, ``FROM`` images checked), ``sandbox`` (the default ``load_task``) and ``sandbox+pythons``
(with ``--pythons`` stand-ins; only re-read for folders the sandbox refuses).

Play (reference solution, then a no-op, each in a fresh episode; one JSON line per task as it ends)::

    python scripts/public_tasks.py play --runtime docker --ca-bundle /etc/ssl/certs/ca-certificates.crt \
        --jobs 3 --out played.jsonl TASK_FOLDER...

``--runtime sandbox`` plays them in the episode sandbox instead (``--pythons`` as for ``count``).

A task already in ``--out`` is not played again (the run can be stopped and resumed).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import re
import time
from pathlib import Path
from typing import Any


def task_folders(root: Path) -> list[Path]:
    """Every task folder under ``root`` (itself included), not entering a task folder."""
    if (root / "task.yaml").exists() or (root / "task.toml").exists():
        return [root]
    found: list[Path] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found.extend(task_folders(child))
    return found


def reason_class(reason: str) -> str:
    """A refusal's reason with the task's own names, paths and numbers replaced, to count by class."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "X", reason)
    text = re.sub(r"FROM \S+", "FROM X", text)
    text = re.sub(r"(?:Debian package|Python requirement|package) \S+", "package X", text)
    text = re.sub(r"\S*/\S+", "PATH", text)
    text = re.sub(r"\b\d+(?:\.\d+)*\b", "N", text)
    text = re.sub(r"\bimport [\w., ]+?(?=, which| which)", "import X", text)
    return text[:120]


def _parse_pythons(items: list[str]) -> dict[str, str]:
    pythons = {}
    for item in items:
        version, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"--pythons takes VERSION=PATH, got {item!r}")
        pythons[version] = path
    return pythons


def count(args: argparse.Namespace) -> None:
    from gem_terminal.container.backend import ContainerConfig, load_for_container, runtime_for
    from gem_terminal.loader import TerminalTask, load_task

    runtime = runtime_for(args.runtime)
    config = ContainerConfig(base_images=args.base_images)
    pythons = _parse_pythons(args.pythons)
    report: dict[str, Any] = {"runtime": runtime.kind, "base_images": args.base_images, "sets": {}}
    columns = ("container", "sandbox", "sandbox+pythons")
    for item in args.sets:
        name, _, folder = item.rpartition("=")
        root = Path(folder)
        name = name or root.name
        started = time.monotonic()
        loaded: dict[str, list[str]] = {c: [] for c in columns}
        reasons: dict[str, collections.Counter[str]] = {c: collections.Counter() for c in columns}
        examples: dict[str, str] = {}
        folders = task_folders(root)
        for path in folders:
            sandbox = load_task(path)
            results = {
                "container": load_for_container(path, runtime, config),
                "sandbox": sandbox,
                "sandbox+pythons": sandbox
                if isinstance(sandbox, TerminalTask) or not pythons
                else load_task(path, pythons=pythons),
            }
            for column, result in results.items():
                if isinstance(result, TerminalTask):
                    loaded[column].append(str(path))
                else:
                    key = reason_class(result.reason)
                    reasons[column][key] += 1
                    examples.setdefault(key, f"{path.name}: {result.reason[:240]}")
        seconds = time.monotonic() - started
        print(f"== {name} ({root}): {len(folders)} folders in {seconds:.0f} s", flush=True)
        for column in columns:
            print(f"   {column}: {len(loaded[column])} load, {sum(reasons[column].values())} refused", flush=True)
            for key, n in reasons[column].most_common():
                print(f"      {n:5d}  {key}\n             e.g. {examples[key]}", flush=True)
        report["sets"][name] = {
            "folder": str(root),
            "folders": len(folders),
            "seconds": round(seconds, 1),
            "loaded": loaded,
            "reasons": {c: dict(reasons[c].most_common()) for c in columns},
            "examples": examples,
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def play_one(
    path: str, runtime: str, container: dict[str, Any], command_timeout_s: float, pythons: dict[str, str] | None = None
) -> dict[str, Any]:
    """Reference solution then a no-op on one task folder, each in a fresh episode (a container each, or a sandbox)."""
    from gem_terminal.env import TerminalEnv, reference_action

    row: dict[str, Any] = {"task": path}
    started = time.monotonic()
    try:
        backend: dict[str, Any] = {"pythons": pythons or {}} if runtime == "sandbox" else {"container": container}
        env = TerminalEnv(tasks_dir=path, backend=runtime, command_timeout_s=command_timeout_s, max_turns=3, **backend)
    except Exception as exc:  # a refusal at load is a result too
        row["load"] = f"{type(exc).__name__}: {str(exc)[-600:]}"
        return row
    try:
        task = env.tasks[0]
        for kind, reply in (("ref", reference_action(task)), ("noop", "")):
            begun = time.monotonic()
            try:
                env.reset(options={"task": task.name})
                _, reward, _, _, info = env.step(reply + "<done></done>")
                row[kind] = reward
                if (kind == "ref" and reward < 1) or (kind == "noop" and reward > 0):
                    row[f"{kind}_out"] = str(info.get("checker_output", ""))[-1500:]
            except Exception as exc:
                row[kind] = "error"
                row[f"{kind}_out"] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            row[f"{kind}_s"] = round(time.monotonic() - begun, 1)
            if row[kind] == "error" and kind == "ref":
                break
    finally:
        env.close()
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def play(args: argparse.Namespace) -> None:
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["task"] for line in out.read_text().splitlines() if line.strip()}
    todo = [str(Path(p)) for p in args.tasks if str(Path(p)) not in done]
    container: dict[str, Any] = {"base_images": args.base_images}
    if args.ca_bundle:
        container["ca_bundle"] = args.ca_bundle
    print(f"{len(todo)} to play ({len(done)} already in {out}), {args.jobs} at once", flush=True)
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool, out.open("a") as sink:
        pythons = _parse_pythons(args.pythons)
        futures = {pool.submit(play_one, p, args.runtime, container, args.command_timeout_s, pythons): p for p in todo}
        for future in concurrent.futures.as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # the worker itself died
                row = {"task": futures[future], "load": f"worker: {type(exc).__name__}: {exc}"}
            row["finished"] = time.strftime("%H:%M:%S", time.gmtime())
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(row["task"], row.get("ref"), row.get("noop"), row.get("seconds"), row.get("load", ""), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    counting = sub.add_parser("count", help="what loads per backend, refusals by reason")
    counting.add_argument("sets", nargs="+", help="[NAME=]FOLDER holding task folders")
    counting.add_argument("--runtime", default="auto", choices=("auto", "docker", "podman"))
    counting.add_argument("--base-images", default="map", choices=("auto", "map", "pull"))
    counting.add_argument(
        "--pythons", action="append", default=[], help="VERSION=PATH, a stand-in for the sandbox (repeatable)"
    )
    counting.add_argument("--json", help="write the counts and the loaded folders here")
    playing = sub.add_parser("play", help="reference 1 and no-op 0, in fresh episodes, N at once")
    playing.add_argument("tasks", nargs="+", help="task folders")
    playing.add_argument("--runtime", default="docker", choices=("docker", "podman", "sandbox"))
    playing.add_argument(
        "--pythons", action="append", default=[], help="VERSION=PATH, a stand-in for the sandbox (repeatable)"
    )
    playing.add_argument("--base-images", default="map", choices=("auto", "map", "pull"))
    playing.add_argument("--ca-bundle")
    playing.add_argument("--jobs", type=int, default=3)
    playing.add_argument("--command-timeout-s", type=float, default=900.0)
    playing.add_argument("--out", required=True, help="JSONL of results, appended as tasks end")
    args = parser.parse_args(argv)
    (count if args.command == "count" else play)(args)


if __name__ == "__main__":
    main()
