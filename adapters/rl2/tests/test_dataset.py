"""``gem-rl2-dataset``: rows RL2's own RLDataset reads and the env module understands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gem_rl2.dataset import main, make_rows, write_parquet
from gem_rl2.episodes import Row
from omegaconf import OmegaConf

from gem_core.errors import ConfigError, EnvNotFound


def test_rows_through_rl2s_dataset(tmp_path: Path) -> None:
    from RL2.datasets import RLDataset

    from gem_core.testing_tokenizers import build_chat_tokenizer

    path = tmp_path / "train.parquet"
    main(
        [
            "--env-id", "core:NumberGuess-v0", "--first-seed", "5", "--count", "3",
            "--env-kwargs", '{"max_turns": 4}', "--wrappers", '[["tools", {"tools": ["echo"]}]]',
            "--system-prompt", "Be brief.", "--out", str(path),
        ]
    )  # fmt: skip
    config = OmegaConf.create({"path": str(path), "prompts_per_rollout": 3, "responses_per_prompt": 2})
    dataset = RLDataset(config, build_chat_tokenizer("chatml"))
    assert len(dataset) == 3
    item = dataset[1]
    assert "prompt" not in item  # so RL2 calls the env module's reset
    row = Row.from_extra_info(item["extra_info"])
    assert row == Row(
        env_id="core:NumberGuess-v0",
        seed=6,
        env_kwargs={"max_turns": 4},
        wrappers=[("tools", {"tools": ["echo"]})],
        options=None,
        system_prompt="Be brief.",
    )
    assert len(dataset.collate_fn([item])) == 2  # responses_per_prompt copies of the row


def test_rows_are_env_major_and_share_one_schema() -> None:
    rows = make_rows(["core:NumberGuess-v0", "core:NumberGuess-v0"], [1, 2], env_kwargs={"max_turns": 3})
    assert [r["extra_info"]["seed"] for r in rows] == [1, 2, 1, 2]
    assert {json.dumps(sorted(r["extra_info"])) for r in rows} == {
        json.dumps(["env_id", "env_kwargs", "options", "seed", "system_prompt", "wrappers"])
    }


def test_unknown_env_ids_fail_when_building_not_when_training() -> None:
    with pytest.raises(EnvNotFound):
        make_rows("core:NoSuchEnv-v0", [0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"env_ids": [], "seeds": [0]}, "at least one", id="no-env-ids"),
        pytest.param({"env_ids": "core:NumberGuess-v0", "seeds": []}, "at least one", id="no-seeds"),
        pytest.param(
            {"env_ids": "core:NumberGuess-v0", "seeds": [0], "env_kwargs": {"x": object()}},
            "JSON",
            id="kwargs-not-json",
        ),
    ],
)
def test_bad_inputs_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_rows(**kwargs)


def test_the_file_must_be_parquet(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="parquet"):
        write_parquet(make_rows("core:NumberGuess-v0", [0]), str(tmp_path / "rows.json"))
