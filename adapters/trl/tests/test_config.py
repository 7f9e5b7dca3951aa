"""GemGRPOConfig validates gem's settings with errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest
from gem_trl import GemGRPOConfig

from gem_core.errors import ConfigError


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("advantage_estimator", "ppo"),
        ("gamma", 1.5),
        ("max_turns", 0),
        ("max_turn_tokens", 0),
        ("on_env_error", "ignore"),
    ],
    ids=["unknown-estimator", "gamma-above-one", "zero-turns", "zero-turn-tokens", "unknown-env-error-policy"],
)
def test_bad_setting_names_the_field(tmp_path: Any, field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        GemGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: value})


def test_defaults_are_rebn_undiscounted(tmp_path: Any) -> None:
    config = GemGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert (config.advantage_estimator, config.gamma, config.max_turns) == ("rebn", 1.0, None)
    assert config.on_env_error == "end"  # one failing env never stops a training step
