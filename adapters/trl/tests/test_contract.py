"""The TRL internals gem-trl uses are where gem_trl.contract says, and behave as the adapter assumes.

On a TRL upgrade these fail first, each naming what moved.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, build_tiny_tokenizer, make_prompt_dataset
from gem_trl.contract import GRPO_TRAINER_MODE_ATTRIBUTES, TRL_VERSION_CHECKED, TrlApiError, check_trl_api
from trl import GRPOTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> GemGRPOTrainer:
    tokenizer = build_tiny_tokenizer()
    args = GemGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("contract")),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=2,
        num_generations=2,
    )
    return GemGRPOTrainer(
        model=build_tiny_model(tokenizer),
        args=args,
        train_dataset=make_prompt_dataset("core:NumberGuess-v0", 2),
        processing_class=tokenizer,
    )


def test_installed_trl_is_the_checked_one() -> None:
    import trl

    assert trl.__version__ == TRL_VERSION_CHECKED, "re-read gem_trl/contract.py against the new TRL, then bump it"


def test_methods_attributes_and_signatures_are_there(trainer: GemGRPOTrainer) -> None:
    check_trl_api(trainer)


def test_a_moved_internal_names_itself(monkeypatch: pytest.MonkeyPatch, trainer: GemGRPOTrainer) -> None:
    monkeypatch.delattr(GRPOTrainer, "_log_metric")
    with pytest.raises(TrlApiError, match=r"checked against 1\.16\.0\): GRPOTrainer\._log_metric is gone"):
        check_trl_api()
    monkeypatch.undo()
    monkeypatch.delattr(trainer, "mask_truncated_completions")
    with pytest.raises(TrlApiError, match="no attribute 'mask_truncated_completions'"):
        check_trl_api(trainer)


def _source(function: Any) -> str:
    return inspect.getsource(function)


@pytest.mark.parametrize(
    ("where", "needle", "why"),
    [
        ("_generate", 'extra_fields.pop("env_mask"', "the rollout's env_mask becomes TRL's tool mask"),
        ("_generate", "self.rollout_func(prompts, self)", "rollout_func is called with (prompts, trainer)"),
        ("_generate", 'required_keys = {"prompt_ids", "completion_ids", "logprobs"}', "the rollout's required keys"),
        (
            "_generate_and_score_completions",
            "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list]",
            "mask_truncated_completions drops a completion whose last token is no stop token",
        ),
        (
            "_generate_and_score_completions",
            'self._logs["advantages"].extend(all_process_advantages.tolist())',
            "TRL logs one advantage per completion of every process, which GemGRPOTrainer replaces",
        ),
        (
            "_generate_and_score_completions",
            "inp[key] = values[i]",
            "the rollout's per-episode fields are merged into the inputs (GemGRPOTrainer reads 'episode')",
        ),
        (
            "_compute_loss",
            "if advantages.dim() == 1:",
            "the loss takes (batch, tokens) advantages as they are",
        ),
    ],
    ids=["env-mask", "rollout-call", "required-keys", "truncation-rule", "logged-advantages", "extra-fields", "2d-adv"],
)
def test_behaviour_the_adapter_relies_on(where: str, needle: str, why: str) -> None:
    assert needle in _source(getattr(GRPOTrainer, where)), f"GRPOTrainer.{where} changed: {why}"


def test_vllm_engine_reads_its_token_limit_at_call_time() -> None:
    from trl.generation.vllm_generation import VLLMGeneration

    source = _source(VLLMGeneration.generate)
    assert "max_completion_length = self.max_completion_length" in source, (
        "VLLMGeneration.generate no longer reads self.max_completion_length per call; the per-turn limit breaks"
    )
    assert "return prompt_ids, completion_ids, logprobs, logprob_token_ids" in source


def test_mode_attributes_are_set_in_their_own_branch_of_grpo_trainer_init() -> None:
    """TRL sets model.generate's settings only without vLLM and the engine only with it: each mode asks its own."""
    source = _source(GRPOTrainer.__init__)
    branches = source.split("        if self.use_vllm:\n", 1)[1].split("self._dist = DistributedBackend", 1)[0]
    with_vllm, without_vllm = branches.split("\n        else:\n", 1)
    for use_vllm, branch, other in ((True, with_vllm, without_vllm), (False, without_vllm, with_vllm)):
        for name in GRPO_TRAINER_MODE_ATTRIBUTES[use_vllm]:
            assert f"self.{name} = " in branch and f"self.{name} = " not in other, (name, use_vllm)
