"""``python -m gem_terminal.container prepare [SUITE...]``: build the base images once (cached on disk).

``prepare`` makes the image map's base images (default: every suite the map names) for each runtime
present (Docker with a daemon, Podman with runc; ``--runtime`` names one), so the first episode does not
pay for them; ``runtime`` prints the one ``auto`` picks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from gem_core.errors import ToolError
from gem_terminal.container.images import IMAGE_MAP, BaseImage, ensure_base_image
from gem_terminal.container.runtime import detect_runtime, present_runtimes


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m gem_terminal.container", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="build the base images of the image map")
    prepare.add_argument("suites", nargs="*", help="Debian suites (default: all the map names)")
    prepare.add_argument(
        "--ca-bundle",
        default=os.environ.get("GEM_TERMINAL_CA_BUNDLE"),
        help="the host's CA bundle, for uv's download behind a TLS-intercepting proxy",
    )
    prepare.add_argument("--runtime", choices=["docker", "podman"], help="only this runtime (default: each present)")
    sub.add_parser("runtime", help="print the runtime auto picks")
    args = parser.parse_args(argv)
    try:
        if args.command == "runtime":
            print(detect_runtime().kind)
            return 0
        kinds = [args.runtime] if args.runtime else present_runtimes()
        runtimes = [detect_runtime(kind) for kind in kinds] if kinds else [detect_runtime()]
        ca = Path(args.ca_bundle) if args.ca_bundle else None
        for runtime in runtimes:
            for suite in args.suites or sorted({suite for _, suite in IMAGE_MAP}):
                started = time.monotonic()
                tag = ensure_base_image(runtime, BaseImage(suite), ca_bundle=ca)
                print(f"{tag} ({runtime.kind}, {time.monotonic() - started:.1f} s)")
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
