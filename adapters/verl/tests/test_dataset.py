"""The Parquet builder: rows, seeds, the command line, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from gem_verl.dataset import main, make_rows, parse_seeds

from gem_core.errors import ConfigError, EnvNotFound


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("0-3", [0, 1, 2, 3]), ("5", [5]), ("1,4, 9", [1, 4, 9]), ("0-1,10", [0, 1, 10])],
    ids=["range", "single", "list", "mixed"],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["5-1", "a", "", "1-x"], ids=["backwards", "word", "empty", "bad-end"])
def test_parse_seeds_rejects_bad_text(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_seeds(text)


def test_rows_carry_env_seed_options_and_unique_indices() -> None:
    rows = make_rows(["core:NumberGuess-v0"], [7, 8], options={"a": 1}, env_kwargs={"high": 32}, start_index=10)
    assert [r["extra_info"]["index"] for r in rows] == [10, 11]
    gem = rows[1]["extra_info"]["gem"]
    assert gem["env_id"] == "core:NumberGuess-v0" and gem["seed"] == 8
    assert json.loads(gem["options"]) == {"a": 1} and json.loads(gem["env_kwargs"]) == {"high": 32}
    assert rows[0]["agent_name"] == "gem_env_agent" and rows[0]["data_source"] == "core:NumberGuess-v0"


def test_unknown_env_id_fails_when_building() -> None:
    with pytest.raises(EnvNotFound):
        make_rows(["core:NoSuchEnv-v0"], [0])


def test_command_line_writes_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "train.parquet"
    code = main(["--env-id", "core:NumberGuess-v0", "--seeds", "0-4", "--out", str(out), "--options", '{"x": 2}'])
    assert code == 0 and "wrote 5 rows" in capsys.readouterr().out
    table = pq.read_table(out).to_pylist()
    assert [r["extra_info"]["gem"]["seed"] for r in table] == [0, 1, 2, 3, 4]
    assert json.loads(table[0]["extra_info"]["gem"]["options"]) == {"x": 2}


def test_command_line_rejects_options_that_are_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        main(
            [
                "--env-id",
                "core:NumberGuess-v0",
                "--seeds",
                "0",
                "--out",
                str(tmp_path / "x.parquet"),
                "--options",
                "[1]",
            ]
        )
