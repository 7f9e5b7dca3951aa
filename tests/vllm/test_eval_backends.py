"""``gem eval`` on a real vLLM: the vllm backend (in process and from the command line) and the openai
backend against ``vllm serve``, token-exact against each other under greedy decoding."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_core.cli import main
from gem_core.episode import EpisodeLimits, TurnRequest
from gem_core.eval.backends import EvalBackendError, OpenAIBackend, Sampling, VLLMBackend
from gem_core.eval.run import EvalSettings, evaluate
from gem_core.eval.traces import read_trace

pytest.importorskip("gem_games", reason="the vllm tox env installs gem-games")

GAME = "game:GuessTheNumber-v0-easy"
EPISODE = ["-n", "3", "--max-turns", "3", "--max-turn-tokens", "8", "--sampling-seed", "0"]


def _evaluate(backend: Any, **kwargs: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        try:
            return await evaluate(backend, EvalSettings(env_ids=[GAME], **kwargs))
        finally:
            await backend.aclose()

    return asyncio.run(go())


class AbortingLLM:
    """The session's engine, with the first request of the first batch reported as ``reason`` (as vLLM may)."""

    def __init__(self, llm: Any, reason: str) -> None:
        self.llm, self.reason, self.batches = llm, reason, 0

    def get_tokenizer(self) -> Any:
        return self.llm.get_tokenizer()

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        outputs = self.llm.generate(*args, **kwargs)
        if self.batches == 0:
            outputs[0].outputs[0].finish_reason = self.reason
        self.batches += 1
        return outputs


@pytest.mark.parametrize("reason", ["abort", "error", "something-new"])
def test_a_request_that_did_not_finish_fails_its_episode_only(llm: Any, model_dir: Path, reason: str) -> None:
    backend = VLLMBackend(str(model_dir), llm=AbortingLLM(llm, reason), sampling=Sampling(max_tokens=8))
    records = _evaluate(backend, num_episodes=3, limits=EpisodeLimits(max_turns=2))
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1, [r["error"] for r in records]
    assert "EvalBackendError" in failed[0]["error"] and repr(reason) in failed[0]["error"]
    assert failed[0]["success"] is False and failed[0]["end_reason"] == "error"
    assert all(r["num_turns"] >= 1 for r in records if not r["error"])


@pytest.mark.parametrize(("reason", "expected"), [("stop", "stop"), ("length", "length"), ("repetition", "length")])
def test_finish_reasons_of_a_finished_request(llm: Any, model_dir: Path, reason: str, expected: str) -> None:
    from vllm.outputs import CompletionOutput

    backend = VLLMBackend(str(model_dir), llm=llm)
    out = CompletionOutput(index=0, text="", token_ids=[5, 6], cumulative_logprob=None, logprobs=None)
    out.finish_reason = reason
    generation = backend._generation(out)
    assert not isinstance(generation, EvalBackendError)
    assert generation.finish_reason == expected and generation.token_ids == [5, 6]


def test_gem_eval_vllm_from_the_command_line(model_dir: Path, vllm_server: str, tmp_path: Path) -> None:
    """A fresh process, as a user runs it: engine settings from --engine-kw, stdout holds the JSON alone."""
    vllm_trace, server_trace = tmp_path / "vllm.jsonl", tmp_path / "server.jsonl"
    engine = ["--engine-kw", "enforce_eager=true", "--engine-kw", "dtype=float32", "--engine-kw", "max_model_len=2048"]
    gem = Path(sys.executable).parent / "gem"
    command = [str(gem), "eval", str(model_dir), GAME, "--backend", "vllm", *engine, *EPISODE]
    done = subprocess.run(
        [*command, "--json", "--trace", str(vllm_trace)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # nothing else on stdout
    assert "INFO" in done.stderr  # vLLM's log lines went to stderr
    assert summary["backend"] == "vllm" and summary["engine"] == {
        "enforce_eager": True,
        "dtype": "float32",
        "max_model_len": 2048,
    }
    assert summary["envs"][0]["episodes"] == 3 and summary["envs"][0]["errors"] == 0

    # The same episodes through vllm serve, token ids in and out: the same replies, token for token.
    server = ["--backend", "openai", "--base-url", vllm_server, "--api", "completions"]
    code, out = _gem(
        "eval",
        str(model_dir),
        GAME,
        *server,
        "--tokenizer",
        str(model_dir),
        "--exact-tokens",
        *EPISODE,
        "--trace",
        str(server_trace),
        "--json",
    )
    assert code == 0 and json.loads(out)["envs"][0]["errors"] == 0
    by_vllm, by_server = read_trace(vllm_trace), read_trace(server_trace)
    assert _replies(by_server) == _replies(by_vllm)
    assert all(r["turns"] for r in by_vllm)


def _replies(records: list[dict[str, Any]]) -> dict[int, list[tuple[str, int, str]]]:
    return {r["seed"]: [(t["action"], t["generated_tokens"], t["stop_reason"]) for t in r["turns"]] for r in records}


def _gem(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def test_openai_chat_against_vllm_serve(model_dir: Path, vllm_server: str, tmp_path: Path) -> None:
    code, out = _gem("eval", str(model_dir), GAME, "--base-url", vllm_server, *EPISODE, "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["backend"] == "openai" and summary["envs"][0]["errors"] == 0


def test_exact_tokens_and_logprobs_match_the_engine(llm: Any, model_dir: Path, vllm_server: str) -> None:
    """One request through the server and through the offline engine: the same ids and logprobs."""
    tokenizer = llm.get_tokenizer()
    messages = [{"role": "user", "content": "Guess the number between 1 and 16."}]
    prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    request = TurnRequest(episode_index=0, turn=0, prompt_ids=prompt, messages=messages, max_tokens=16)
    sampling = Sampling(temperature=0.0, max_tokens=16)
    offline = VLLMBackend(str(model_dir), llm=llm, sampling=sampling)
    served = OpenAIBackend(
        str(model_dir), vllm_server, api="completions", tokenizer=tokenizer, exact_tokens=True, sampling=sampling
    )

    async def both() -> tuple[Any, Any]:
        try:
            return await offline.generate(request, "k"), await served.generate(request, "k")
        finally:
            await served.aclose()

    mine, theirs = asyncio.run(both())
    assert theirs.token_ids == mine.token_ids and len(mine.token_ids) > 0
    assert theirs.finish_reason == mine.finish_reason
    assert theirs.logprobs == pytest.approx(mine.logprobs, abs=1e-4)
