"""gem_core's pytest plugin, run in pytester subprocesses (loaded from its pytest11 entry point)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CHECKS_CORE = """
import pytest

@pytest.mark.gem_envs(namespace="core")
def test_contract(gem_env_id, gem_check_env):
    gem_check_env(gem_env_id)
"""

WITH_IDS_AND_KWARGS = """
import pytest

@pytest.mark.gem_envs(ids=["core:NumberGuess-v0"])
def test_contract(gem_env_id, gem_check_env):
    gem_check_env(gem_env_id, high=50, seed=3)
"""

BREAKS_CONTRACT = """
import random
import pytest
import gem_core
from gem_core.testing import NumberGuessEnv

class GlobalRandom(NumberGuessEnv):
    def reset(self, *, seed=None, options=None):
        random.random()
        return super().reset(seed=seed)

gem_core.register("bad:Global-v0", GlobalRandom)

@pytest.mark.gem_envs(namespace="bad")
def test_contract(gem_env_id, gem_check_env):
    gem_check_env(gem_env_id)
"""

NO_MARKER = """
def test_x(gem_env_id):
    pass
"""


def test_marker_fixture_and_failures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_core=CHECKS_CORE, test_ids=WITH_IDS_AND_KWARGS, test_bad=BREAKS_CONTRACT, test_no_marker=NO_MARKER
    )
    result = pytester.runpytest_subprocess("-v")
    # core has 6 ids (3 NumberGuess, PictureNumberGuess, Nim, RPS), plus test_ids
    result.assert_outcomes(passed=7, failed=1, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*test_core.py::test_contract?core:NumberGuess-v0? PASSED*",
            "*test_core.py::test_contract?core:NumberGuess-v0-echo? PASSED*",
            "*test_core.py::test_contract?core:NumberGuess-v0-hard? PASSED*",
            "*test_core.py::test_contract?core:PictureNumberGuess-v0? PASSED*",
            "*test_ids.py::test_contract?core:NumberGuess-v0? PASSED*",
            "*test_bad.py::test_contract?bad:Global-v0? FAILED*",
            "*EnvCheckError*global `random` state*",
            "*gem_env_id is set by @pytest.mark.gem_envs*",
        ]
    )


def test_empty_namespace_fails_collection(pytester: pytest.Pytester) -> None:
    """An uninstalled package must not pass by checking nothing."""
    pytester.makepyfile(CHECKS_CORE.replace('"core"', '"nothing_here"'))
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*no env ids in namespace 'nothing_here'*pip install -e .*"])


def test_marker_is_declared(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gem_envs(namespace=None, ids=None)*"])
