"""Dataset envs: a non-str action is refused before the episode's one turn is used; bad settings are ConfigErrors."""

from __future__ import annotations

from typing import Any

import pytest

import gem_core
from gem_core.errors import ConfigError, InvalidAction

DATASET_IDS = ["math:Sample-v0", "qa:Sample-v0", "code:Sample-v0", "rg:chain_sum"]


@pytest.mark.parametrize("env_id", DATASET_IDS)
@pytest.mark.parametrize("action", [None, 42, b"\\boxed{4}"], ids=repr)
def test_a_non_string_action_is_refused_and_the_turn_is_kept(env_id: str, action: Any) -> None:
    env = gem_core.make(env_id)
    try:
        env.reset(seed=0)
        with pytest.raises(InvalidAction, match=r"takes a str \(the model's whole reply"):
            env.step(action)
        _, _, terminated, _, _ = env.step("\\boxed{4}")  # the episode's turn is still there
        assert terminated
    finally:
        env.close()


@pytest.mark.parametrize("seed", [True, -3, 2.0], ids=repr)
def test_reset_refuses_bad_seeds(seed: Any) -> None:
    env = gem_core.make("math:Sample-v0")
    with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
        env.reset(seed=seed)


@pytest.mark.parametrize(
    ("sandbox", "field"),
    [({"pool_size": 0}, "pool_size"), ({"no_such_setting": 1}, "no_such_setting"), ({"isolation": "vm"}, "isolation")],
    ids=["range", "unknown", "choice"],
)
def test_bad_code_sandbox_settings_are_a_config_error_naming_the_field(sandbox: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        gem_core.make("code:Sample-v0", sandbox=sandbox)
