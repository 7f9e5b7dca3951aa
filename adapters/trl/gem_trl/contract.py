"""What gem-trl uses of TRL beyond its documented API, in one place, checked at start-up.

TRL's ``rollout_func`` is experimental and ReBN needs per-token advantages, so the
adapter reaches into ``GRPOTrainer``'s internals. Every such name is listed here.
:func:`check_trl_api` verifies the methods and their parameters (cheap; called by
:class:`~gem_trl.trainer.GemGRPOTrainer` on construction) and, given a built trainer,
the attributes its ``__init__`` sets. The tests (``tests/test_contract.py``) also pin the
behaviour behind the names (``env_mask`` becomes TRL's tool mask, the truncation rule of
``mask_truncated_completions``, ...). A TRL upgrade that moves any of it fails with a
message naming what moved and the TRL version gem-trl was checked against.
"""

from __future__ import annotations

import inspect
from typing import Any

from gem_core.errors import ConfigError

__all__ = [
    "GRPO_TRAINER_ATTRIBUTES",
    "GRPO_TRAINER_METHODS",
    "GRPO_TRAINER_MODE_ATTRIBUTES",
    "TRL_VERSION_CHECKED",
    "VLLM_COLOCATE_ATTRIBUTES",
    "VLLM_GENERATION_ATTRIBUTES",
    "VLLM_GENERATION_METHODS",
    "TrlApiError",
    "check_trl_api",
]

#: The TRL release this contract was read from (the one gem-trl pins).
TRL_VERSION_CHECKED = "1.16.0"

#: ``GRPOTrainer`` methods gem-trl overrides or calls, with the parameters it relies on.
GRPO_TRAINER_METHODS: dict[str, tuple[str, ...]] = {
    # overridden by GemGRPOTrainer to put ReBN advantages into its output dict
    "_generate_and_score_completions": ("self", "inputs"),
    # called by GemRollout to log gem/* metrics (TRL averages them across processes)
    "_log_metric": ("self", "name", "value"),
    # calls rollout_func(prompts, trainer) and turns env_mask into its tool mask; overridden (gem_trl.vision)
    # to take the episodes' image features out of the rollout's fields (element 5 of its result)
    "_generate": ("self", "prompts"),
    # every forward of a batch; overridden to give it the episodes' images (gem_trl.vision)
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "pixel_values",
        "image_grid_thw",
        "num_images",
        "mm_token_type_ids",
    ),
}

#: Attributes of every built ``GRPOTrainer`` that gem-trl reads.
GRPO_TRAINER_ATTRIBUTES: tuple[str, ...] = (
    "processing_class",
    "chat_template_kwargs",
    "max_completion_length",
    "use_vllm",
    "eos_token_ids",
    "model_wrapped",
    "accelerator",
    "mask_truncated_completions",
    "_dist",
    "_metrics",
    "_logs",
)

#: Attributes that TRL 1.16 sets only in one generation mode, keyed by ``use_vllm``: ``model.generate``'s
#: sampling settings without vLLM (read by :func:`~gem_trl.rollout.hf_generate`), the engine with it.
GRPO_TRAINER_MODE_ATTRIBUTES: dict[bool, tuple[str, ...]] = {
    False: ("generation_config", "generation_kwargs"),
    True: ("vllm_generation", "_last_loaded_step"),
}

#: Attributes of a built ``VLLMGeneration`` that gem-trl reads or sets; the last three only in colocate mode
#: (the rollout keeps a sleeping engine awake for a whole rollout, see :func:`~gem_trl.rollout.vllm_awake`).
VLLM_GENERATION_ATTRIBUTES: tuple[str, ...] = ("mode", "tensor_parallel_size", "max_completion_length")
VLLM_COLOCATE_ATTRIBUTES: tuple[str, ...] = ("llm", "enable_sleep_mode", "_llm_weights_sleeping")

#: ``trl.generation.vllm_generation.VLLMGeneration`` (``trainer.vllm_generation``): methods and parameters.
VLLM_GENERATION_METHODS: dict[str, tuple[str, ...]] = {
    "__init__": ("max_completion_length", "mode", "tensor_parallel_size", "enable_sleep_mode"),
    "generate": ("self", "prompts", "images", "num_generations"),
    "sync_weights": ("self",),
}

#: ``trl.models.utils.unwrap_model_for_generation``: parameters passed by the ``model.generate`` backend.
UNWRAP_PARAMETERS = (
    "model",
    "accelerator",
    "gather_deepspeed3_params",
    "generation_kwargs",
    "gradient_checkpointing_kwargs",
)


class TrlApiError(ConfigError):
    """The installed TRL does not have what gem-trl uses of its internals."""


def _missing_parameters(function: Any, wanted: tuple[str, ...]) -> list[str]:
    parameters = inspect.signature(function).parameters
    return [name for name in wanted if name not in parameters]


def _missing_trainer_attributes(trainer: Any) -> list[str]:
    """What a built trainer lacks of the attributes gem-trl reads in the trainer's own generation mode."""
    use_vllm = bool(getattr(trainer, "use_vllm", False))
    mode = "use_vllm=True" if use_vllm else "use_vllm=False"
    missing = [name for name in GRPO_TRAINER_ATTRIBUTES if not hasattr(trainer, name)]
    problems = [f"a built GRPOTrainer has no attribute {name!r}" for name in missing]
    problems += [
        f"a GRPOTrainer built with {mode} has no attribute {name!r}"
        for name in GRPO_TRAINER_MODE_ATTRIBUTES[use_vllm]
        if not hasattr(trainer, name)
    ]
    engine = getattr(trainer, "vllm_generation", None) if use_vllm else None
    if engine is not None:
        wanted = VLLM_GENERATION_ATTRIBUTES
        if getattr(engine, "mode", None) == "colocate":
            wanted += VLLM_COLOCATE_ATTRIBUTES
        problems += [f"trainer.vllm_generation has no attribute {n!r}" for n in wanted if not hasattr(engine, n)]
    return problems


def check_trl_api(trainer: Any = None) -> None:
    """Check the installed TRL against :data:`GRPO_TRAINER_METHODS` and friends.

    Args:
        trainer: A built ``GRPOTrainer``: also check :data:`GRPO_TRAINER_ATTRIBUTES` on it, those of
            :data:`GRPO_TRAINER_MODE_ATTRIBUTES` for its ``use_vllm`` and, with vLLM, its engine's.

    Raises:
        TrlApiError: Naming every method, parameter or attribute that is missing, the
            installed TRL version and the one gem-trl was checked against.
    """
    import trl
    from trl import GRPOTrainer
    from trl.models import utils as model_utils

    problems: list[str] = []
    for name, parameters in GRPO_TRAINER_METHODS.items():
        method = getattr(GRPOTrainer, name, None)
        if not callable(method):
            problems.append(f"GRPOTrainer.{name} is gone")
        elif missing := _missing_parameters(method, parameters):
            problems.append(f"GRPOTrainer.{name} lost parameters {missing}")
    unwrap = getattr(model_utils, "unwrap_model_for_generation", None)
    if unwrap is None:
        problems.append("trl.models.utils.unwrap_model_for_generation is gone")
    elif missing := _missing_parameters(unwrap, UNWRAP_PARAMETERS):
        problems.append(f"trl.models.utils.unwrap_model_for_generation lost parameters {missing}")
    try:
        from trl.generation.vllm_generation import VLLMGeneration
    except ImportError as exc:
        problems.append(f"trl.generation.vllm_generation.VLLMGeneration cannot be imported ({exc})")
    else:
        for name, parameters in VLLM_GENERATION_METHODS.items():
            method = getattr(VLLMGeneration, name, None)
            if not callable(method):
                problems.append(f"VLLMGeneration.{name} is gone")
            elif missing := _missing_parameters(method, parameters):
                problems.append(f"VLLMGeneration.{name} lost parameters {missing}")
    if trainer is not None:
        problems += _missing_trainer_attributes(trainer)
        logs = getattr(trainer, "_logs", None)
        if isinstance(logs, dict) and "advantages" not in logs:
            problems.append("GRPOTrainer._logs has no 'advantages' entry")
    if problems:
        raise TrlApiError(
            f"gem-trl relies on TRL internals that changed in the installed trl {trl.__version__} "
            f"(checked against {TRL_VERSION_CHECKED}): " + "; ".join(problems) + ". Install "
            f"trl=={TRL_VERSION_CHECKED} or update gem_trl (see gem_trl/contract.py)."
        )
