"""The sandbox's filesystem is an allow-list: the interpreter, the stdlib and the allowed packages, read-only.

Only namespace mode can hide files; these tests skip (saying so) on machines that fall back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from gem_tool_python import SandboxPool
from gem_tool_python.probes import SNOOP_TIMEOUT_S, snoop_program

from gem_core.errors import SandboxIsolationWarning, ToolError

SECRET = "gem-graders-secret-4f1c2a"


def namespaces_pool(**settings: object) -> SandboxPool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        try:
            return SandboxPool(isolation="namespaces", pool_size=1, **settings).start()  # type: ignore[arg-type]
        except ToolError as exc:
            pytest.skip(f"only namespace mode hides files, and it is unavailable here: {exc}")


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    p = namespaces_pool(timeout_s=SNOOP_TIMEOUT_S, cpu_s=int(SNOOP_TIMEOUT_S))
    yield p
    p.close()


@pytest.fixture
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Graders' data beside the installed packages and in the home folder, world-readable."""
    site = Path(next(p for p in sys.path if p.endswith("-packages")))
    beside = site / "gem_secret_probe"
    beside.mkdir()
    (beside / "answers.jsonl").write_text(json.dumps({"answer": SECRET}))
    home = Path(tempfile.mkdtemp(dir=Path.home()))
    (home / "answers.jsonl").write_text(SECRET)
    home.chmod(0o755)
    yield beside
    shutil.rmtree(beside)
    shutil.rmtree(home)


def test_a_snooping_program_finds_no_graders_data(pool: SandboxPool, planted: Path) -> None:
    result = pool.run(snoop_program([SECRET]))
    assert (result.status, json.loads(result.stdout)) == ("ok", []), result
    assert "gem_secret_probe" not in pool.run("import os, sys; print(sys.path, os.listdir(sys.path[-2]))").stdout


def test_the_worker_script_named_in_proc_1_is_unreadable(pool: SandboxPool) -> None:
    code = (
        "import os\n"
        "args = open('/proc/1/cmdline').read().split('\\0')\n"
        "script = next(a for a in args if a.endswith('_worker.py'))\n"
        "print(os.path.exists(script), os.path.exists(os.path.dirname(script)))\n"
    )
    result = pool.run(code)
    assert (result.status, result.stdout) == ("ok", "False False\n"), result


def test_the_root_holds_only_what_python_needs(
    pool: SandboxPool, allowed_root_entries: set[str], allowed_tmp_entries: set[str]
) -> None:
    result = pool.run("import os; print(sorted(os.listdir('/')), sorted(os.listdir('/tmp')), os.access('/', os.W_OK))")
    top = set(json.loads(result.stdout.split("]")[0].replace("'", '"') + "]"))
    system = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "tmp", "usr", "work"}
    # Wherever the checkout, the venv or the interpreter live (/check, /root, /home, ...),
    # their top folder shows; nothing else of the host's root may.
    assert top <= system | allowed_root_entries
    assert not ({"var", "run", "srv", "opt", "mnt", "media", "boot"} - allowed_root_entries) & top
    assert result.stdout.endswith(f"{sorted({'work'} | allowed_tmp_entries)} False\n"), result.stdout


@pytest.fixture(scope="module")
def tmp_venv() -> Iterator[Path]:
    """A virtualenv under /tmp holding one small package (the private /tmp must not hide it)."""
    root = Path(tempfile.mkdtemp(prefix="gem-venv-", dir="/tmp"))
    root.chmod(0o755)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    [site] = (root / "venv" / "lib").glob("python3*/site-packages")
    for name, body in (("tinypkg", "VALUE = 42\n"), ("otherpkg", "VALUE = 'hidden'\n")):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(body)
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{name}-1.0.dist-info/METADATA,,\n")
    yield root / "venv"
    shutil.rmtree(root)


def test_packages_of_a_venv_under_tmp_are_importable_and_only_the_allowed_ones(tmp_venv: Path) -> None:
    pool = namespaces_pool(python=str(tmp_venv / "bin" / "python"), packages=("tinypkg",))
    try:
        result = pool.run("import tinypkg; print(tinypkg.VALUE)\nimport otherpkg")
    finally:
        pool.close()
    assert result.stdout == "42\n"
    assert "No module named 'otherpkg'" in (result.error or ""), result


def test_numpy_is_importable_by_default(pool: SandboxPool) -> None:
    pytest.importorskip("numpy")
    result = pool.run("import numpy; print(numpy.arange(4).sum())")
    assert (result.status, result.stdout) == ("ok", "6\n"), result


def test_extra_paths_can_be_exposed_read_only(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir=Path.home()))
    try:
        folder.chmod(0o755)
        (folder / "data.txt").write_text("shared")
        (folder / "data.txt").chmod(0o644)
        pool = namespaces_pool(expose=(str(folder),))
        try:
            code = f"print(open({str(folder / 'data.txt')!r}).read())\nopen({str(folder / 'x')!r}, 'w')"
            result = pool.run(code)
        finally:
            pool.close()
    finally:
        shutil.rmtree(folder)
    assert result.stdout == "shared\n" and "Read-only file system" in (result.error or ""), result
    assert os.path.exists(tmp_path)
