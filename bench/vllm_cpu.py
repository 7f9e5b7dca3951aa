"""Real vLLM on the CPU with the tiny test model: import, engine start-up, tokens/s, server ready time.

Run in the vllm tox env: ``.tox/vllm/bin/python bench/vllm_cpu.py`` (docs/real-engines.md has the numbers).
``--in-process`` builds the engine the way tests/vllm does (no engine-core or worker process).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def server_ready_s(model: str) -> float:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(port)]
    command += ["--host", "127.0.0.1", "--enforce-eager", "--dtype", "float32", "--max-model-len", "2048"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    return time.perf_counter() - started
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the server exited")
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--server", action="store_true", help="also time a server start")
    args = parser.parse_args()
    from gem_core.testing_models import save_tiny_model

    model = str(save_tiny_model(tempfile.mkdtemp(prefix="tiny-vllm-")))
    started = time.perf_counter()
    from vllm import LLM, SamplingParams, TokensPrompt

    print(f"import vllm: {time.perf_counter() - started:.1f} s")
    kwargs = {"enforce_eager": True, "dtype": "float32", "max_model_len": 2048}
    if args.in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        kwargs["distributed_executor_backend"] = "uni"
    started = time.perf_counter()
    llm = LLM(model=model, **kwargs)
    print(f"LLM(): {time.perf_counter() - started:.1f} s")
    prompts = [TokensPrompt(prompt_token_ids=[1, 393, 201, 41, 87, 284, 2, 201, 1, 67, 201])] * 8
    params = SamplingParams(temperature=1.0, max_tokens=64, ignore_eos=True, seed=0)
    llm.generate(prompts[:1], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(f"{tokens} tokens (8 x 64): {tokens / (time.perf_counter() - started):.0f} tokens/s")
    if args.server:
        print(f"server ready: {server_ready_s(model):.1f} s")


if __name__ == "__main__":
    main()
