"""The shared dataset-env base: no grader dependency, old gem_math / gem_core names still resolve."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gem_core
from gem_core.errors import GemCoreError
from gem_dataset_env.answers import extract_boxed
from gem_dataset_env.data import clear_cache, load_split
from gem_dataset_env.errors import DatasetUnavailable


def test_base_imports_without_math_verify() -> None:
    """QA, code and reasoning-gym use only this package: importing it must not pull in the grader."""
    code = (
        "import sys\n"
        "import gem_dataset_env.answers, gem_dataset_env.data, gem_dataset_env.single_turn\n"
        "import gem_dataset_env.specs, gem_dataset_env.tool_variants, gem_dataset_env.errors\n"
        "print(sorted(m for m in ('math_verify', 'gem_math', 'sympy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("gem_math.single_turn:DatasetEnv", "gem_dataset_env.single_turn:DatasetEnv"),
        ("gem_math.single_turn:DatasetEnvConfig", "gem_dataset_env.single_turn:DatasetEnvConfig"),
        ("gem_math.specs:hub_specs", "gem_dataset_env.specs:hub_specs"),
        ("gem_math.specs:tool_variant", "gem_dataset_env.specs:tool_variant"),
        ("gem_math.tool_variants:tool_env", "gem_dataset_env.tool_variants:tool_env"),
        ("gem_math.data:load_split", "gem_dataset_env.data:load_split"),
        ("gem_math.grading:extract_boxed", "gem_dataset_env.answers:extract_boxed"),
        ("gem_core.errors:DatasetUnavailable", "gem_dataset_env.errors:DatasetUnavailable"),
        ("gem_core.errors:GradingError", "gem_math.errors:GradingError"),
    ],
    ids=lambda s: s.split(":")[1] + "@" + s.split(":")[0],
)
def test_old_names_are_the_moved_objects(old: str, new: str) -> None:
    def load(ref: str) -> object:
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)

    assert load(old) is load(new)


def test_tool_variants_point_at_the_base() -> None:
    spec = gem_core.spec("qa:HotpotQA-search")
    assert spec.entry_point == "gem_dataset_env.tool_variants:tool_env"


def test_missing_local_file_and_offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GemCoreError, match="no such file"):
        load_split(str(tmp_path / "missing.jsonl"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetUnavailable, match="HF_HUB_OFFLINE is set"):
        load_split("nobody/no-such-dataset-xyz", env_id="x:Y-v0")


def test_local_jsonl_is_loaded_once(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(3)))
    clear_cache()
    first = load_split(str(path))
    assert load_split(str(path), split="test") is first and first[2]["answer"] == "2"


@pytest.mark.parametrize(
    ("text", "boxes"),
    [("so \\boxed{42}.", ["42"]), ("\\boxed{a} and \\fbox{b}", ["a", "b"]), ("\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),
     ("\\boxed{open", []), ("none", [])],
    ids=["one", "two", "nested", "unbalanced", "none"],
)  # fmt: skip
def test_extract_boxed(text: str, boxes: list[str]) -> None:
    assert extract_boxed(text) == boxes
