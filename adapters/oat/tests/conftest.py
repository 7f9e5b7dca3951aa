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
import torch

from gem_core.testing_models import build_tiny_model

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
    """A ``GemOatLearner`` with the attributes ``process_feedback_data`` and ``prepare_round`` read.

    oat's ``LearnerBase.__init__`` / ``_init`` start DeepSpeed, load the policy on a GPU and
    join the launchpad program; the buffers are built here as oat's ``_init`` builds them
    (``deque(maxlen=args.pi_buffer_maxlen_per_device)``, checked by ``test_learner.py``) from
    the args as ``GemOatLearner._init`` prepares them.
    """
    from collections import deque

    from gem_oat.args import check_round_options
    from gem_oat.learner import GemOatLearner

    learner = GemOatLearner.__new__(GemOatLearner)
    learner.args = GemOatLearner.resolve_args(_make_args(**overrides))
    check_round_options(learner.args, 1)  # one learner rank, as GemOatLearner._init checks after oat's
    learner.critic = None
    learner.pi_buffer = deque(maxlen=learner.args.pi_buffer_maxlen_per_device)
    learner.all_buffer = deque(maxlen=int(1e9))
    learner.query_step = 0
    return learner


def tiny_policy_dir(tokenizer: Any, path: Path) -> str:
    """A one-layer Llama with the tokenizer's vocabulary, saved where oat's ``LLM`` can load it (torch left seeded)."""
    model = build_tiny_model(
        tokenizer,
        architecture="llama",
        seed=0,
        restore_rng=False,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


class CpuEngine(torch.nn.Module):
    """What oat's learner uses of a DeepSpeed engine (ZeRO 0, one rank), on the CPU.

    ``DeepspeedStrategy.backward`` / ``optimizer_step`` / ``get_gradient_norm`` call
    ``engine.backward(loss)``, ``engine.step()`` and read ``engine.module``. DeepSpeed 0.16.8
    does run on a CPU, but its CPU accelerator JIT-compiles a C++ communication op first
    (219 s on this 2-core machine), too slow for CI; so this stands in for the engine:
    the loss is divided by the accumulation steps and the optimizer steps at each boundary,
    as DeepSpeed does.
    """

    def __init__(self, module: Any, optimizer: Any, accumulation_steps: int) -> None:
        super().__init__()
        self.module = module
        self.optimizer, self.accumulation_steps = optimizer, accumulation_steps
        self.micro_steps = 0
        self.optimizer_steps = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # the model's own attributes (``model``, ``lm_head``), as DeepSpeed's
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("module"), name)

    def backward(self, loss: Any) -> None:
        (loss / self.accumulation_steps).backward()

    def step(self) -> None:
        self.micro_steps += 1
        if self.micro_steps % self.accumulation_steps == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.optimizer_steps += 1


def _make_trainer(model_dir: str, **overrides: Any) -> Any:
    """A learner that runs oat's own ``learn`` / ``learning_step`` on the CPU.

    What oat's ``LearnerBase._init`` / ``PPOLearner._init`` build, on a tiny policy: oat's
    ``LLM`` wrapper (float32: the CPU lacks bf16 kernels for some ops), oat's
    ``DeepspeedStrategy`` around a :class:`CpuEngine`, oat's ``MultiTurnTransitionDataset``
    and drgrpo's loss aggregation. ``train_batch_size`` defaults to 1 here (an optimizer
    step per transition). Needs the ``gloo_group`` and ``cpu_for_cuda`` fixtures.
    """
    import functools

    import torch
    from oat.algorithms.ppo_multiturn import MultiTurnTransitionDataset
    from oat.model import LLM
    from oat.utils.deepspeed import DeepspeedStrategy
    from oat.utils.ops import masked_sum
    from transformers import AutoTokenizer

    learner = _make_learner(**{"train_batch_size": 1, **overrides})
    args = learner.args
    strategy = DeepspeedStrategy(train_batch_size=args.train_batch_size, bf16=False, args=args)
    strategy.world_size = 1
    strategy.grad_acc_step = args.train_batch_size
    policy = LLM(model_dir, bf16=False)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3, weight_decay=args.l2)  # oat's l2: 0
    policy.model = CpuEngine(policy.model, optimizer, strategy.grad_acc_step)
    learner.model, learner.optimizer, learner.scheduler, learner.strategy = policy, optimizer, None, strategy
    learner.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    learner.ref_model = LLM(model_dir, bf16=False) if args.beta > 0 else None  # the KL term's reference
    learner.dataset_builder = MultiTurnTransitionDataset
    learner.masked_aggregator = functools.partial(masked_sum, constant_normalizer=args.generate_max_length)
    learner.global_step = 0
    learner.policy_sgd_step = 0
    learner.gradient_update_st = 0.0  # oat's run() sets it before its loop
    learner.update_interval = args.rollout_batch_size // args.rollout_batch_size_per_device
    return learner


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Llama policy and the chatml test tokenizer, in one folder oat's ``LLM`` loads."""
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return tiny_policy_dir(build_chat_tokenizer("chatml"), tmp_path_factory.mktemp("policy"))


@pytest.fixture
def cpu_for_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Oat's ``learn``/``learning_step`` put tensors on ``torch.cuda.current_device()``: the CPU here."""
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


@pytest.fixture(scope="session")
def make_trainer() -> Callable[..., Any]:
    """``make_trainer(model_dir, **GemOatArgs overrides)`` -> a learner that trains on the CPU."""
    return _make_trainer


@pytest.fixture
def make_actor() -> Callable[..., Any]:
    """``make_actor(tmp_path, tokenizer, policy, plasma=None, **GemOatArgs overrides)`` -> an initialised actor."""
    return _make_actor


@pytest.fixture
def make_learner() -> Callable[..., Any]:
    """``make_learner(**GemOatArgs overrides)`` -> a learner ready for ``process_feedback_data``."""
    return _make_learner
