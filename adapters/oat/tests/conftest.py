"""Fixtures for the oat adapter tests: stand-ins for what needs a GPU, a real plasma store, a gloo group.

oat's trainer modules import vLLM and launchpad at module level. vLLM needs a GPU, so
``standins/inference`` (a vLLM whose "model" is a policy the test registers) goes first
on ``sys.path``; the env does not install dm-launchpad (oat asks for its TensorFlow extra,
and it has no Python 3.11 wheel), so ``standins/launcher`` is used when it is missing.
Everything else is oat's real code and its real dependencies: the plasma store of
pyarrow 11 that carries episodes from actor to learner, ``torch.distributed`` (gloo,
one rank) under oat's feedback collector, deepspeed's strategy object.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

STANDINS = Path(__file__).parent / "standins"
# The stand-in vLLM is the tests' model (a registered policy), so it is used even where vLLM is installed.
sys.path.insert(0, str(STANDINS / "inference"))
if importlib.util.find_spec("launchpad") is None:
    sys.path.insert(0, str(STANDINS / "launcher"))

THIRD_PARTY_WARNINGS = [
    # tyro notes that oat's OATArgs annotate `str` fields with a None default.
    "ignore:The field `.*` is annotated with type:UserWarning",
    # deepspeed 0.16.8 decorates functions with torch.jit.script at import (torch 2.13 deprecates it).
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning",
    # deepspeed 0.16.8's config models read `model_fields` off instances (pydantic >= 2.11 deprecates it).
    "ignore:Accessing the 'model_fields' attribute on the instance is deprecated",
    # pyarrow 11 announces that plasma is deprecated (oat 0.2.4 still uses it).
    "ignore:Plasma is deprecated:DeprecationWarning",
    # ... and its start_plasma_store kills the store process without waiting for it on shutdown.
    r"ignore:subprocess \d+ is still running:ResourceWarning",
]


def oat_python_note() -> str:
    """Which Python runs the tests, against oat-llm's declared ``<3.11`` (tox falls back to 3.11)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    if sys.version_info < (3, 11):
        return f"Python {version}, inside oat-llm's declared Requires-Python"
    return f"Python {version}: fallback, no Python 3.10 found; oat-llm installed with --ignore-requires-python"


@pytest.fixture(scope="session")
def oat_python() -> str:
    """The line the report header shows: which Python runs the tests, inside oat's range or not."""
    return oat_python_note()


def pytest_report_header(config: pytest.Config) -> list[str]:
    torch = importlib.metadata.version("torch")
    return [f"gem-oat: {oat_python_note()}; torch {torch}"]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def plasma_server() -> Iterator[Any]:
    """Oat's real ``PlasmaShmServer`` (pyarrow 11's plasma store process), as the launcher runs it."""
    from oat.utils.ipc import PlasmaShmServer

    server = PlasmaShmServer(size_mb=64)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.get_shm_path():
        if time.monotonic() > deadline:
            raise RuntimeError("plasma store did not start in 30 s")
        time.sleep(0.05)
    yield server
    server.halt()
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def gloo_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A one-rank ``torch.distributed`` group: oat's collector asks for ranks, the learner all-reduces."""
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("dist") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def save_model_dir(tokenizer: Any, path: Path) -> str:
    """A folder vLLM can load the tokenizer from (the stand-in's "model")."""
    tokenizer.save_pretrained(str(path))
    return str(path)


def _make_args(**overrides: Any) -> Any:
    from gem_oat.args import GemOatArgs

    return GemOatArgs(**{"oracle": "", "prompt_data": "", "gpus": 1, **overrides})


def _make_actor(
    tmp_path: Path,
    tokenizer: Any,
    policy: Callable[[list[int]], tuple[list[int], list[float]]],
    plasma: Any = None,
    **overrides: Any,
) -> Any:
    """A ``GemOatActor`` as oat's program builds it: ``Actor(ipc_server, vllm_args, args)``, then ``init``."""
    import vllm
    from gem_oat.actor import GemOatActor

    model = save_model_dir(tokenizer, tmp_path / "model")
    vllm.register_policy(model, policy)  # type: ignore[attr-defined]  # the stand-in's test hook
    args = _make_args(pretrain=model, **overrides)
    actor = GemOatActor(plasma, {"model": model, "gpu_memory_utilization": 0.25}, args)
    actor.init(actor_id=0, save_path=str(tmp_path / "save"))
    return actor


def _make_learner(**overrides: Any) -> Any:
    """A ``GemOatLearner`` with the attributes ``process_feedback_data`` reads.

    oat's ``LearnerBase.__init__`` starts DeepSpeed, loads the policy on a GPU and joins
    the launchpad program; the feedback step itself only needs the args, the (absent)
    critic and the buffers, so the object is built without that start-up.
    """
    from gem_oat.learner import GemOatLearner

    learner = GemOatLearner.__new__(GemOatLearner)
    learner.args = _make_args(**overrides)
    learner.critic = None
    learner.pi_buffer = []
    learner.all_buffer = []
    learner.query_step = 0
    return learner


@pytest.fixture
def make_actor() -> Callable[..., Any]:
    """``make_actor(tmp_path, tokenizer, policy, plasma=None, **GemOatArgs overrides)`` -> an initialised actor."""
    return _make_actor


@pytest.fixture
def make_learner() -> Callable[..., Any]:
    """``make_learner(**GemOatArgs overrides)`` -> a learner ready for ``process_feedback_data``."""
    return _make_learner
