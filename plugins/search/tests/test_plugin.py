"""Plugin discovery stays light: listing tools must not import numpy, aiohttp or the index code."""

from __future__ import annotations

import subprocess
import sys


def test_listing_tools_imports_nothing_heavy() -> None:
    code = (
        "import sys, gem_core; reg = gem_core.get_registry(); assert 'search' in reg.tools; "
        "print(sorted(m for m in ('numpy', 'aiohttp', 'gem_tool_search.bm25') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_lazy_exports_resolve() -> None:
    import gem_tool_search

    for name in gem_tool_search.__all__:
        assert getattr(gem_tool_search, name) is not None
