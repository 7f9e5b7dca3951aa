"""The ``verl.plugins`` entry point registers both names on a bare ``import verl``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
assert "gem_verl" not in sys.modules
import verl
heavy = sorted(m for m in ("fastapi", "uvicorn", "verl.experimental.agent_loop.agent_loop") if m in sys.modules)
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
fn = ADV_ESTIMATOR_REGISTRY.get("rebn")
print(json.dumps({
    "agent": _agent_loop_registry.get("gem_env_agent"),
    "rebn": None if fn is None else f"{fn.__module__}.{fn.__qualname__}",
    "plugin_loaded": "gem_verl.plugin" in sys.modules,
    "heavy_after_import_verl": heavy,
}))
"""


def _probe(policy: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in {"VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES"}}
    if policy is not None:
        env["VERL_USE_EXTERNAL_PLUGINS"] = policy
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("policy", [None, "auto", "gem"], ids=["default", "auto", "by-name"])
def test_import_verl_registers_agent_loop_and_estimator(policy: str | None) -> None:
    result = _probe(policy)
    assert result == {
        "agent": {"_target_": "gem_verl.agent_loop.GemEnvAgentLoop"},
        "rebn": "gem_verl.advantage.compute_rebn_advantage",
        "plugin_loaded": True,
        "heavy_after_import_verl": [],  # the plugin registers lazily: no web server stack in every process
    }


_RAY_PROBE = """
import json, sys
import ray

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)


@ray.remote
def probe():
    import sys
    loaded_before = "gem_verl.plugin" in sys.modules
    import verl
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    return [loaded_before, "gem_env_agent" in _agent_loop_registry, "rebn" in ADV_ESTIMATOR_REGISTRY]


try:
    print(json.dumps(ray.get(probe.remote(), timeout=240)))
finally:
    ray.shutdown()
"""


def test_a_ray_worker_registers_both_names_on_import_verl() -> None:
    # verl's agent-loop workers and its trainer are Ray actors: fresh processes that import verl.
    done = subprocess.run([sys.executable, "-c", _RAY_PROBE], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True, True]


def test_plugins_switched_off_registers_nothing() -> None:
    # The control: with verl's plugin discovery off, nothing else registers these names.
    result = _probe("none")
    assert result == {"agent": None, "rebn": None, "plugin_loaded": False, "heavy_after_import_verl": []}


def test_registration_is_idempotent() -> None:
    import verl  # noqa: F401  (runs the entry point)
    from gem_verl.plugin import register

    register()  # a second registration of the same objects must not raise
    from gem_verl.advantage import compute_rebn_advantage
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    assert get_adv_estimator_fn("rebn") is compute_rebn_advantage


def test_importing_the_plugin_module_imports_only_the_standard_library() -> None:
    probe = (
        "import json, sys; before = set(sys.modules); import gem_verl.plugin; "
        "print(json.dumps(sorted(m.split('.')[0] for m in set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert loaded <= {"gem_verl"} | set(sys.stdlib_module_names), loaded - set(sys.stdlib_module_names)
    assert not loaded & {"fastapi", "uvicorn", "verl", "torch", "ray"}


def test_registration_runs_when_verl_imports_the_registries_later() -> None:
    # The plugin loads inside `import verl`, before verl's agent-loop and estimator modules exist.
    probe = """
import json, sys
import verl
assert "verl.trainer.ppo.core_algos" not in sys.modules
import verl.trainer.ppo.v1.trainer_base as trainer_base
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
print(json.dumps([
    "rebn" in ADV_ESTIMATOR_REGISTRY,
    getattr(trainer_base.compute_advantage_for_multi_trajectories, "__gem_verl_hook__", False),
]))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, True]
