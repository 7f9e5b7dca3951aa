"""gem-openrlhf-dataset: prompt rows OpenRLHF's PromptDataset reads as they are."""

from __future__ import annotations

import json
import os

import pytest
from gem_openrlhf.dataset import EpisodeRequest, check_rows, main, make_rows

from gem_core.errors import ConfigError, EnvNotFound


def test_rows_name_env_and_seed_and_round_trip() -> None:
    rows = make_rows(["core:NumberGuess-v0"], [3, 4], env_kwargs={"max_turns": 5}, system_prompt="Hi")
    assert [r["datasource"] for r in rows] == ["core:NumberGuess-v0"] * 2
    request = EpisodeRequest.from_prompt(rows[1]["input"])
    assert request == EpisodeRequest(
        env_id="core:NumberGuess-v0", seed=4, env_kwargs={"max_turns": 5}, system_prompt="Hi"
    )


def test_openrlhfs_prompt_dataset_keeps_the_row_as_written(tmp_path) -> None:
    # openrlhf.datasets/__init__ imports HF `datasets` for other dataset kinds: load this one file by path
    import importlib.util
    from types import SimpleNamespace

    import openrlhf

    path = os.path.join(os.path.dirname(openrlhf.__file__), "datasets", "prompts_dataset.py")
    spec = importlib.util.spec_from_file_location("_openrlhf_prompts_dataset", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    rows = make_rows("core:NumberGuess-v0", [0, 1])
    args = SimpleNamespace(data=SimpleNamespace(input_key="input", label_key=None, apply_chat_template=False))
    strategy = SimpleNamespace(args=args, is_rank_0=lambda: False)
    dataset = module.PromptDataset(rows, tokenizer=None, strategy=strategy)
    datasource, prompt, label, image = dataset[1]
    assert (datasource, prompt, label, image) == ("core:NumberGuess-v0", rows[1]["input"], "", None)
    assert EpisodeRequest.from_prompt(prompt).seed == 1


def test_unknown_env_ids_fail_at_build_time() -> None:
    with pytest.raises(EnvNotFound, match="NumberGues-v0"):
        make_rows("core:NumberGues-v0", [0])


def test_cli_writes_jsonl(tmp_path, capsys) -> None:
    out = tmp_path / "d" / "train.jsonl"
    assert main(["--env-id", "core:NumberGuess-v0", "--seeds", "0-2,9", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [EpisodeRequest.from_prompt(r["input"]).seed for r in lines] == [0, 1, 2, 9]
    assert check_rows(out) == 4
    assert "wrote 4 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "5-1"], "runs backwards"),
        (["--seeds", "0", "--options", "[1]"], "must be a JSON object"),
        (["--seeds", "0", "--env-kwargs", "{bad"], "not valid JSON"),
    ],
    ids=["backwards-seeds", "options-not-object", "env-kwargs-not-json"],
)
def test_cli_errors_name_the_flag(tmp_path, argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        main(["--env-id", "core:NumberGuess-v0", "--out", str(tmp_path / "x.jsonl"), *argv])
