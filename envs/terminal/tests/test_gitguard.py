"""The checker's git guard, on the real git: a repository's own configuration runs no program through it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_terminal.gitguard import GIT_GUARD

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed here")

#: Each kind of key that names a program, with a git call (in the repository, after a file changed) that runs it.
DRIVERS = {
    "filter-smudge": ("filter.{name}.smudge", "* filter={name}", ["archive", "HEAD"]),
    "filter-clean": ("filter.{name}.clean", "* filter={name}", ["status", "--porcelain"]),
    "filter-process": ("filter.{name}.process", "* filter={name}", ["add", "-A"]),
    "diff-textconv": ("diff.{name}.textconv", "* diff={name}", ["diff"]),
    "diff-command": ("diff.{name}.command", "* diff={name}", ["diff"]),
}


def _git(*args: str, cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture
def guarded(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has the guard first (as the checker's has), with no user or system config."""
    folder = tmp_path / "checker-bin"
    folder.mkdir()
    (folder / "git").write_text(GIT_GUARD)
    (folder / "git").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": f"{folder}:{os.environ['PATH']}",
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }


def _repo(root: Path, env: dict[str, str]) -> Path:
    repo = root / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "a.txt").write_text("stored\n")
    (repo / "sub" / "b.txt").write_text("stored\n")
    _git("init", "-q", cwd=repo, env=env)
    _git("add", "-A", cwd=repo, env=env)
    _git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "one", cwd=repo, env=env)
    for changed in (repo / "a.txt", repo / "sub" / "b.txt"):
        changed.write_text("STORED\n")  # the same size: git must read it (clean) to tell
    return repo


def _plant(repo: Path, key: str, attribute: str, marker: Path) -> None:
    """The agent's move: the key names a program that leaves ``marker``; an attribute gives every path the driver."""
    program = f"sh -c 'touch {marker}; cat'"
    subprocess.run(["git", "config", "--file", str(repo / ".git/config"), key, program], check=True, timeout=60)
    (repo / ".git/info").mkdir(exist_ok=True)
    (repo / ".git/info/attributes").write_text(attribute + "\n")


def _unguarded(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PATH": env["PATH"].split(":", 1)[1]}


@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize(
    "where",
    ["cwd", "dash-C", "git-dir", "GIT_DIR", "subfolder"],
)
def test_no_program_of_the_repository_s_config_runs(
    tmp_path: Path, guarded: dict[str, str], driver: str, where: str
) -> None:
    key, attribute, call = DRIVERS[driver]
    repo = _repo(tmp_path, guarded)
    marker = tmp_path / "ran"
    _plant(repo, key.format(name="gem"), attribute.format(name="gem"), marker)
    cwd, args, env = repo, list(call), dict(guarded)
    if where == "dash-C":
        cwd, args = tmp_path, ["-C", str(repo), *call]
    elif where == "git-dir":
        args = [f"--git-dir={repo / '.git'}", f"--work-tree={repo}", *call]
        cwd = tmp_path
    elif where == "GIT_DIR":
        env.update(GIT_DIR=str(repo / ".git"), GIT_WORK_TREE=str(repo))
    elif where == "subfolder":
        cwd = repo / "sub"
    # The move is live: without the guard, the same call runs the agent's program.
    _git(*args, cwd=cwd, env=_unguarded(env), check=False)
    assert marker.exists(), f"{driver} did not run without the guard: the test proves nothing"
    marker.unlink()
    _git(*args, cwd=cwd, env=env, check=False)
    assert not marker.exists()


@settings(max_examples=10, deadline=None)
@given(
    driver=st.sampled_from(list(DRIVERS)),
    name=st.text(alphabet="abcXYZ.-_019", min_size=1, max_size=12).filter(lambda n: n.strip(".") == n),
    required=st.booleans(),
)
def test_any_driver_name_is_switched_off(
    tmp_path_factory: pytest.TempPathFactory, driver: str, name: str, required: bool
) -> None:
    """Driver names of any case, with dots (a subsection as written), ``required`` or not: nothing runs."""
    root = tmp_path_factory.mktemp("driver")
    folder = root / "bin"
    folder.mkdir()
    (folder / "git").write_text(GIT_GUARD)
    (folder / "git").chmod(0o755)
    env = {"PATH": f"{folder}:{os.environ['PATH']}", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    repo = _repo(root, env)
    key, attribute, call = DRIVERS[driver]
    marker = root / "ran"
    _plant(repo, key.format(name=name), attribute.format(name=name), marker)
    if required and driver.startswith("filter"):
        subprocess.run(["git", "-C", str(repo), "config", f"filter.{name}.required", "true"], check=True, timeout=60)
    _git(*call, cwd=repo, env=env, check=False)
    assert not marker.exists()


def test_what_git_says_passes_through_unchanged(tmp_path: Path, guarded: dict[str, str]) -> None:
    repo = _repo(tmp_path, guarded)
    real = _unguarded(guarded)
    for args in (["rev-parse", "--verify", "nope"], ["status", "--porcelain"], ["log", "--format=%s"], ["--version"]):
        mine, theirs = _git(*args, cwd=repo, env=guarded, check=False), _git(*args, cwd=repo, env=real, check=False)
        assert (mine.returncode, mine.stdout, mine.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr), args
    # A repository that does not exist yet is made as git makes it.
    _git(f"--git-dir={tmp_path / 'new.git'}", "init", "-q", "--bare", cwd=tmp_path, env=guarded)
    assert (tmp_path / "new.git" / "HEAD").exists()


def test_the_checker_s_own_settings_stay(tmp_path: Path, guarded: dict[str, str]) -> None:
    """A driver the checker names on its command line runs; pinned keys (GIT_CONFIG_COUNT) keep their values."""
    repo = _repo(tmp_path, guarded)
    marker = tmp_path / "mine"
    (repo / ".git/info/attributes").write_text("* filter=mine\n")
    own = f"filter.mine.smudge=sh -c 'touch {marker}; cat'"
    _git("-c", own, "archive", "HEAD", cwd=repo, env=guarded)
    assert marker.exists()
    pinned = {**guarded, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.editor", "GIT_CONFIG_VALUE_0": "mine"}
    subprocess.run(["git", "config", "--file", str(repo / ".git/config"), "core.editor", "theirs"], check=True)
    assert _git("config", "core.editor", cwd=repo, env=pinned).stdout.strip() == "mine"
