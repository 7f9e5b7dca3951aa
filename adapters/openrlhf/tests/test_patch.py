"""The ReBN patch reaches OpenRLHF's experience maker in a fresh process and in a real Ray worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from gem_openrlhf import patch
from gem_openrlhf.rebn import compute_advantages_and_returns

TESTS = os.path.dirname(__file__)


def probe_fresh_process(estimator: str | None) -> str:
    """Run install() first, import OpenRLHF's experience maker afterwards, in a new interpreter."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from gem_openrlhf import patch
        patch.install()
        assert "{patch.TARGET_MODULE}" not in sys.modules
        from standins import install_module_standins
        install_module_standins()
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
        print(patch.is_patched(), RemoteExperienceMaker.compute_advantages_and_returns.__module__)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != patch.ESTIMATOR_ENV}
    if estimator is not None:
        env[patch.ESTIMATOR_ENV] = estimator
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [("rebn", "True gem_openrlhf.rebn"), (None, "False openrlhf.trainer.ppo_utils.experience_maker")],
    ids=["rebn", "unset"],
)
def test_the_hook_patches_a_later_import(estimator: str | None, expected: str) -> None:
    assert probe_fresh_process(estimator) == expected


def test_the_hook_patches_an_imported_module(rebn_patched) -> None:
    assert rebn_patched.compute_advantages_and_returns is compute_advantages_and_returns
    assert patch.is_patched()
    patch.install()  # idempotent
    assert rebn_patched._openrlhf_compute_advantages_and_returns is not compute_advantages_and_returns


def test_an_unknown_estimator_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(patch.ESTIMATOR_ENV, "grpo")
    with pytest.raises(Exception, match="gem's estimators are rebn"):
        patch.install()


RAY_SCRIPT = """
import sys

import ray

from gem_openrlhf.launcher import prepare


def probe(tests_dir):
    import os
    import sys

    sys.path.insert(0, tests_dir)
    from standins import install_module_standins

    from gem_openrlhf import patch

    install_module_standins()
    import openrlhf.trainer.ppo_utils.experience_maker  # noqa: F401

    return patch.is_patched(), os.environ.get(patch.ESTIMATOR_ENV, "")


flags = ["--algo.advantage.estimator", "rebn", "--algo.kl.use_loss", "--actor.model_name_or_path", "m"]
plan = prepare(flags, environ={})
ray.init(num_cpus=1, include_dashboard=False, runtime_env=plan.runtime_env, log_to_driver=False)
try:
    print(ray.get(ray.remote(probe).remote(sys.argv[1]), timeout=400))
finally:
    ray.shutdown()
"""


@pytest.mark.slow
def test_the_launchers_runtime_env_patches_a_ray_worker() -> None:
    # A local Ray in its own interpreter: the probe is pickled by value from __main__, and Ray's
    # child processes never outlive a pytest process that treats their ResourceWarnings as errors.
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != patch.ESTIMATOR_ENV}
    env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = "0"  # else Ray 2.55 warns about a default it will change
    done = subprocess.run(
        [sys.executable, "-c", RAY_SCRIPT, TESTS], env=env, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(True, 'rebn')"
