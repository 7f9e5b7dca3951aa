"""OpenRLHF's own rollout and experience code, driven on the CPU around a stand-in vLLM engine.

The path a sample takes on a cluster, minus the Ray hops and the GPU forward passes:

1. ``openrlhf.trainer.ray.vllm_engine._load_agent_executor`` loads gem's agent file
   (``--train.agent_func_path``) and builds ``AgentExecutor()``;
2. OpenRLHF's ``RolloutRayActor.generate_responses`` runs the ``n_samples_per_prompt``
   episodes of a prompt on one event loop; its ``generate`` wraps the engine (here
   :class:`~standins.StandInLLM` in place of ``vllm.AsyncLLMEngine``);
3. ``SamplesGenerator._process_response_into_experience`` turns each response into an
   ``Experience``; ``RemoteExperienceMaker.split_rollout_samples`` batches them;
4. ``RemoteExperienceMaker.compute_advantages_and_returns`` (gem's ReBN once patched).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from standins import SamplingParams, StandInLLM, install_module_standins

install_module_standins()

from gem_openrlhf import agent_func  # noqa: E402
from openrlhf.trainer.ppo_utils import experience_maker  # noqa: E402
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator  # noqa: E402
from openrlhf.trainer.ray import vllm_engine  # noqa: E402

AGENT_FUNC_PATH = agent_func.__file__


def rollout_actor(llm: StandInLLM) -> Any:
    """An OpenRLHF ``RolloutRayActor`` (the class behind ``@ray.remote``) with gem's executor and ``llm`` as engine.

    Its ``__init__`` would start vLLM; the rest of the object is OpenRLHF's own code.
    """
    cls = vllm_engine.RolloutRayActor.__ray_metadata__.modified_class
    actor = cls.__new__(cls)
    actor.executor = vllm_engine._load_agent_executor(AGENT_FUNC_PATH)
    actor.llm = llm
    actor._mm_pad_token_ids = None
    actor.kwargs = {}
    return actor


def sampling_params(*, max_new_tokens: int | None = None, logprobs: bool = False) -> SamplingParams:
    """What ``SamplesGenerator._dispatch_prompts_to_vllm`` builds from OpenRLHF's defaults."""
    return SamplingParams(
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        max_tokens=max_new_tokens,
        min_tokens=1,
        skip_special_tokens=False,
        logprobs=1 if logprobs else None,
    )


def generate_responses(
    actor: Any,
    prompt: str,
    tokenizer: Any,
    *,
    max_len: int,
    n_samples: int = 1,
    label: str = "",
    params: SamplingParams | None = None,
) -> list[dict[str, Any]]:
    """``RolloutRayActor.generate_responses`` for one prompt, as the sample generator calls it remotely."""
    return asyncio.run(
        actor.generate_responses(
            prompt=prompt,
            label=label,
            sampling_params=params or sampling_params(),
            max_length=max_len,
            hf_tokenizer=tokenizer,
            num_samples=n_samples,
        )
    )


def trainer_args(
    *,
    n_samples_per_prompt: int = 1,
    micro_batch_size: int = 2,
    gamma: float = 1.0,
    estimator: str = "reinforce",
    kl_use_loss: bool = True,
) -> SimpleNamespace:
    """The slice of OpenRLHF's hierarchized CLI args that the sample and experience code read."""
    return SimpleNamespace(
        rollout=SimpleNamespace(
            n_samples_per_prompt=n_samples_per_prompt,
            micro_batch_size=micro_batch_size,
            batch_size=1,
            max_tokens_per_gpu=None,
        ),
        train=SimpleNamespace(dynamic_batch_enable=False),
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator=estimator, gamma=gamma, lambd=1.0, no_std_norm=False),
            kl=SimpleNamespace(use_loss=kl_use_loss),
            dynamic_filtering_enable=False,
        ),
        reward=SimpleNamespace(
            clip_range=(-1e4, 1e4),
            overlong_buffer_len=None,
            overlong_penalty_factor=1.0,
            stop_properly_penalty_coef=None,
        ),
        vllm=SimpleNamespace(enable_sleep=False),
        data=SimpleNamespace(max_len=None),
    )


def to_experiences(responses: Sequence[dict[str, Any]], args: SimpleNamespace, max_len: int) -> list[Any]:
    """OpenRLHF's ``_process_response_into_experience`` on each response (one ``Experience`` per sample)."""
    generator = SamplesGenerator.__new__(SamplesGenerator)
    generator.args = args
    return [generator._process_response_into_experience(r, max_len=max_len) for r in responses]


def experience_maker_for(args: SimpleNamespace, tokenizer: Any, kl_coef: float = 0.0) -> Any:
    """A ``RemoteExperienceMaker`` without model actors (only its batching and advantage code run)."""
    return experience_maker.RemoteExperienceMaker(
        actor_model_group=None,
        critic_model_group=None,
        reward_model_group=None,
        initial_model_group=None,
        kl_controller=SimpleNamespace(value=kl_coef),
        strategy=SimpleNamespace(args=args),
        tokenizer=tokenizer,
    )
