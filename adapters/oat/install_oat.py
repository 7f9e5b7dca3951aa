"""Install oat-llm 0.2.4's own code into the running Python, without its dependencies.

oat-llm pins vLLM 0.8.4 and flash-attn, which need a GPU; ``requirements-cpu.txt`` holds
the rest of what its trainer modules import. On Python 3.10 (oat's declared ``<3.11``)
pip checks oat's ``Requires-Python`` as usual; only on the 3.11 fallback is that check
skipped, and the script says so.
"""

from __future__ import annotations

import subprocess
import sys

OAT = "oat-llm==0.2.4"


def main() -> int:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", OAT]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if sys.version_info >= (3, 11):
        print(f"gem-oat: Python {version} is outside oat-llm's <3.11; installing with --ignore-requires-python")
        command.append("--ignore-requires-python")
    else:
        print(f"gem-oat: installing {OAT} on Python {version}")
    return subprocess.call(command)


if __name__ == "__main__":
    raise SystemExit(main())
