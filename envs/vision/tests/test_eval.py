"""gem eval with image envs against an OpenAI-compatible HTTP server on loopback (scripted replies).

The server is real HTTP (the backend's own client, retries, JSON); its replies are scripted because
no multimodal model server runs on this machine. It checks what gem sends: image parts as data URLs.
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gem_core.cli import main
from gem_core.episode import EpisodeLimits
from gem_core.eval.backends import OpenAIBackend
from gem_core.eval.run import EvalSettings, evaluate
from gem_core.eval.traces import image_folder, load_images, read_trace
from gem_core.multimodal import Image, message_images
from gem_core.testing_servers import ScriptedChatServer, scripted_chat_server


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    """Answers every chat request with ``\\boxed{42}`` and keeps the request bodies."""
    with scripted_chat_server(lambda body: "\\boxed{42}") as chat:
        yield chat


def test_gem_eval_sends_image_parts_and_traces_each_image_once(server: ScriptedChatServer, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    backend = OpenAIBackend("vlm", server.url, api_key="k", backoff_s=0.01)

    async def go() -> list[dict[str, Any]]:
        try:
            settings = EvalSettings(
                env_ids=["vision:Geometry-v0", "vision:PieChart-v0"],
                num_episodes=3,
                trace_path=str(trace),
                limits=EpisodeLimits(max_turns=1),
            )
            return await evaluate(backend, settings)
        finally:
            await backend.aclose()

    records = asyncio.run(go())
    assert len(records) == 6 and all(r["error"] is None and r["num_turns"] == 1 for r in records)
    for body in server.bodies:
        parts = body["messages"][0]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")
        Image.from_bytes(base64.b64decode(urls[0].split(",", 1)[1]))  # the bytes the env drew
    stored = [load_images(r, trace) for r in read_trace(trace)]
    images = {i.sha256 for r in stored for m in r["messages"] for i in message_images(m["content"])}
    assert sorted(p.name for p in Path(image_folder(trace)).iterdir()) == sorted(f"{h}.png" for h in images)
    out = io.StringIO()
    assert main(["view", str(trace), "--env", "vision:PieChart-v0", "--seed", "0"], stdout=out) == 0
    assert "[image png 420x300 sha256:" in out.getvalue()
