"""gem-math's sample data; dataset loading itself lives in :mod:`gem_dataset_env.data` (re-exported here)."""

from __future__ import annotations

from pathlib import Path

from gem_dataset_env.data import clear_cache, load_split

__all__ = ["SAMPLES_DIR", "clear_cache", "load_split", "sample_path"]

#: Small datasets shipped with gem-math so its envs run offline.
SAMPLES_DIR = Path(__file__).parent / "samples"


def sample_path(name: str) -> str:
    """Absolute path of a sample file shipped with gem-math (e.g. ``"math.jsonl"``)."""
    return str(SAMPLES_DIR / name)
