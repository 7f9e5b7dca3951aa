"""``gem-rl2-train``: RL2's own Hydra config and CLI, prepared for gem, then RL2's PPO main."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from gem_rl2 import train
from gem_rl2.episodes import SETTINGS_ENV, Settings
from rl2_harness import rl2_config

from gem_core.errors import ConfigError, RLInputError

BASE = [
    "actor.model_name=/models/tiny",
    "actor.max_length_per_device=4096",
    "rollout.max_turns=6",
    "adv.estimator=rebn",
    "adv.gamma=0.9",
]


def test_prepare_completes_rl2s_config_for_gem() -> None:
    config = rl2_config(BASE)
    assert config.rollout.env_path is None
    settings = train.prepare(config, BASE)
    assert settings == Settings(tokenizer="/models/tiny", max_turns=6, on_cut="invalid")
    assert config.rollout.env_path == train.ENV_PATH
    assert Path(train.ENV_PATH).is_file()
    for params in (config.rollout.train_sampling_params, config.rollout.test_sampling_params):
        assert params.skip_special_tokens is False
        assert params.no_stop_trim is True


def test_prepare_keeps_a_given_env_path_and_reads_gem_options() -> None:
    overrides = [
        *BASE,
        "rollout.env_path=/my/env.py",
        "+gem.on_cut=pass",
        "+gem.chat_template_kwargs={enable_thinking:false}",
    ]
    config = rl2_config(overrides)
    settings = train.prepare(config, overrides)
    assert (settings.on_cut, dict(settings.chat_template_kwargs)) == ("pass", {"enable_thinking": False})
    assert Settings.from_json(settings.to_json()) == settings
    assert config.rollout.env_path == "/my/env.py"


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        pytest.param("adv.estimator=grpo", ConfigError, "knows gae, reinforce, rebn", id="unknown-estimator"),
        pytest.param("adv.gamma=1.5", RLInputError, "gamma", id="gamma-above-one"),
        pytest.param("rollout.max_turns=0", ConfigError, "max_turns", id="no-turns"),
        pytest.param("actor.model_name=null", ConfigError, "actor.model_name", id="no-model"),
        pytest.param("rollout.train_sampling_params.stop=[END]", ConfigError, "stop", id="stop-strings"),
        pytest.param("+gem.on_cut=drop", ConfigError, "on_cut", id="unknown-cut-policy"),
        pytest.param("+gem.on_env_error=ignore", ConfigError, "on_env_error", id="unknown-env-error-policy"),
        pytest.param("+gem=3", ConfigError, "mapping", id="gem-not-a-mapping"),
    ],
)
def test_prepare_names_bad_settings(override: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        train.prepare(rl2_config([*BASE, override]), [*BASE, override])


def test_the_cli_runs_rl2s_main_with_the_prepared_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import RL2.trainer.ppo as ppo

    seen: list[Any] = []

    def rl2_body(config: Any) -> None:  # stands for PPOTrainer(config).train(): needs GPUs
        seen.append((config, os.environ[SETTINGS_ENV], ppo.compute_advantages))

    class HydraMain:
        __wrapped__ = staticmethod(rl2_body)

    monkeypatch.setattr(ppo, "main", HydraMain())
    monkeypatch.setattr(ppo, "compute_advantages", ppo.compute_advantages)
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    train.main([*BASE, f"hydra.run.dir={tmp_path}", "hydra.output_subdir=null"])
    config, settings, compute = seen[0]
    assert config.rollout.env_path == train.ENV_PATH
    assert json.loads(settings) == {
        "tokenizer": "/models/tiny",
        "max_turns": 6,
        "on_cut": "invalid",
        "chat_template_kwargs": {},
        "on_env_error": "end",
    }
    assert compute.handles_rebn
