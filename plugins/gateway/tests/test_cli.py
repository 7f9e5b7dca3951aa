"""``gem gateway``: the real command in its own process, a tiny model behind it, driven by the openai SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from gem_core.testing_servers import ServerDidNotStart, free_port, serve_until_healthy

pytest.importorskip("torch", reason="the eval tox env installs torch (CPU)")
GEM = Path(sys.executable).parent / "gem"


def test_the_command_is_listed_by_gem() -> None:
    out = subprocess.run([str(GEM), "gateway", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--tool-parser" in out.stdout and "--max-sessions" in out.stdout


def test_gem_gateway_serves_records_and_ends_episodes(tmp_path: Path) -> None:
    from gem_core.testing_models import save_tiny_model
    from gem_core.testing_tokenizers import build_chat_tokenizer

    folder = save_tiny_model(tmp_path / "model", build_chat_tokenizer("chatml_tools"))
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GEM_GATEWAY_ADMIN_TOKEN": "tok"}
    command = [str(GEM), "gateway", str(folder), "--port", str(port), "--max-tokens", "8", "--temperature", "0"]
    try:
        with serve_until_healthy(command, f"http://127.0.0.1:{port}/health", tmp_path / "log", env=env):
            url = f"http://127.0.0.1:{port}"
            sdk = openai.OpenAI(base_url=f"{url}/s/cli-1/v1", api_key="unused", max_retries=0, timeout=120)
            reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert reply.usage.completion_tokens <= 8
            with httpx.Client(base_url=url, timeout=30) as http:
                done = http.post(
                    "/admin/sessions/cli-1/finish", json={"reward": 0.5}, headers={"Authorization": "Bearer tok"}
                )
            assert done.status_code == 200
            (turn,) = done.json()["turns"]
            assert turn["reward"] == 0.5 and len(turn["action_token_ids"]) == reply.usage.completion_tokens
            assert len(turn["action_logprobs"]) == len(turn["action_token_ids"])
    except ServerDidNotStart as exc:
        pytest.fail(str(exc))
