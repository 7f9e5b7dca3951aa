"""``gem_env_agent`` through verl's own code: registry, server client contract, v1 storage, trainer metrics.

The stand-ins are described in ``verl_harness``: the LLM server (it needs a GPU
inference engine) and TransferQueue's key-value store. The env, the tokenizer (built
locally), the loop's construction, the worker's post-processing and storage, and the
trainer's advantage and metrics steps are the real ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import numpy as np
import pytest
import torch
from gem_verl.agent_loop import GemAgentLoopOutput, finish_reason, merge_extra_fields
from gem_verl.dataset import make_rows, write_parquet
from hydra.errors import InstantiationException
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl_harness import (
    Server,
    Storage,
    compute_advantage,
    compute_metrics,
    config,
    padded,
    play,
    row,
    store,
)

import gem_core
from gem_core.conformance import CASES
from gem_core.episode import INVALID_ACTION, Generation
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.testing import REPLY_ENDINGS, engine_reading, sampled_reply
from gem_core.testing_tokenizers import build_chat_tokenizer

CASE = {case.name: case for case in CASES}
BISECT = CASE["bisect"]
ENV = BISECT.env_id


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return BISECT.tokenizer()


def _wrong(turn: int, text: str) -> str:
    return "My guess is 0"  # never right: the env's guess limit ends the episode


WRONG = dataclasses.replace(BISECT, name="wrong", reply=_wrong)


def test_sequence_layout_plays_token_in_token_out_within_the_budgets(tokenizer: Any) -> None:
    cfg = config(BISECT)
    server = Server(BISECT, tokenizer)
    (out,) = play(cfg, server, tokenizer, row(ENV, seed=3))
    assert isinstance(out, GemAgentLoopOutput)
    turns = len(out.extra_fields["turn_scores"])
    assert turns >= 2 and out.extra_fields["gem"]["success"] is True and out.num_turns == 2 * turns

    # Token in / token out: every request's prompt is a prefix of the final sequence.
    full = out.prompt_ids + out.response_ids
    assert len(server.calls) == turns and server.calls[0]["prompt_ids"] == out.prompt_ids
    for call in server.calls:
        assert full[: len(call["prompt_ids"])] == call["prompt_ids"]
        used = len(call["prompt_ids"]) - len(out.prompt_ids)
        # max_tokens: the per-turn cap, or what is left of rollout.response_length
        assert call["max_tokens"] == min(
            BISECT.limits.max_turn_tokens, cfg.actor_rollout_ref.rollout.response_length - used
        )
    assert len(out.response_ids) <= cfg.actor_rollout_ref.rollout.response_length

    # The stream is the chat template's rendering of the conversation the env saw.
    env = gem_core.make(ENV)
    observation, _ = env.reset(seed=3)
    messages = []
    for action in out.extra_fields["gem"]["actions"]:
        messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": action}]
        observation = env.step(action)[0]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert tokenizer.decode(full, skip_special_tokens=False) + "\n" == rendered

    # One turn id per generated token, -1 on template/env tokens; rewards on each turn's last token.
    turn_ids = np.asarray(out.turn_ids)
    assert ((turn_ids >= 0) == np.asarray(out.response_mask, dtype=bool)).all()
    assert sorted(set(turn_ids[turn_ids >= 0].tolist())) == list(range(turns))
    rewards = np.asarray(out.token_rewards)
    last_tokens = [int(np.flatnonzero(turn_ids == t)[-1]) for t in range(turns)]
    assert rewards[last_tokens].tolist() == out.extra_fields["turn_scores"]
    logprobs = np.asarray(out.response_logprobs)
    assert np.all(logprobs[turn_ids < 0] == 0.0) and np.all(logprobs[turn_ids >= 0] < 0.0)
    assert out.metrics.generate_sequences >= 0.0 and out.metrics.num_preempted == 0


@pytest.mark.parametrize(
    ("style", "on_cut", "action"),
    [("vllm", "invalid", INVALID_ACTION), ("sglang", "invalid", INVALID_ACTION), ("vllm", "pass", None)],
    ids=["vllm-completed", "sglang-length", "on-cut-pass"],
)
def test_a_cut_generation_is_not_a_valid_action(tokenizer: Any, style: str, on_cut: str, action: Any) -> None:
    case = CASE["cut-generation"]
    cfg = config(case, on_cut=on_cut)
    server = Server(case, tokenizer, style=style)
    (out,) = play(cfg, server, tokenizer, row(case.env_id, seed=case.seeds[0]))
    gem = out.extra_fields["gem"]
    assert server.calls[1]["max_tokens"] == case.limits.max_turn_tokens
    assert gem["cut_turns"] == 1
    if action is not None:
        assert gem["actions"][1] == action
        assert out.extra_fields["turn_scores"][1] == -0.1  # the env's penalty for a malformed answer
    else:  # the cut text "... My guess is 1" reaches the env
        assert gem["actions"][1].startswith("Let me think")


@pytest.mark.parametrize(
    ("stop_reason", "ids", "max_tokens", "expected"),
    [
        ("completed", [5, 6, 2], 3, "stop"),  # ends with the stop token: done, even at the limit
        ("completed", [5, 6, 7], 3, "length"),  # vLLM says completed for a cut too
        ("completed", [5, 6], 3, "stop"),
        ("stop", [5, 6, 7], 3, "length"),
        ("length", [5], 3, "length"),
        ("aborted", [], 3, "abort"),
        ("abort", [5], 3, "abort"),
        (None, [5, 6, 7], None, "stop"),
    ],
)
def test_finish_reason_maps_every_server_convention(
    stop_reason: Any, ids: list[int], max_tokens: Any, expected: str
) -> None:
    assert finish_reason(stop_reason, ids, max_tokens, {2}) == expected


def test_extra_fields_are_merged_as_verls_loops_merge_them() -> None:
    merged = merge_extra_fields(
        [
            {
                "global_steps": 4,
                "min_global_steps": 4,
                "max_global_steps": 4,
                "num_cached_tokens": 9,
                "spec_num_draft_tokens": 2,
            },
            {
                "global_steps": 6,
                "min_global_steps": 6,
                "max_global_steps": 6,
                "num_cached_tokens": 1,
                "spec_num_draft_tokens": 3,
            },
            {"global_steps": 5, "min_global_steps": 3, "max_global_steps": 5, "kv_transfer_params": {"a": 1}},
        ]
    )
    assert merged == {
        "global_steps": 5,
        "min_global_steps": 3,
        "max_global_steps": 6,
        "num_cached_tokens": 9,
        "spec_num_draft_tokens": 5,
        "kv_transfer_params": {"a": 1},
    }


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
def test_outputs_pass_verls_v1_storage_and_the_trainers_metrics_step(tokenizer: Any, layout: str) -> None:
    # The weights change during the episodes (a sync every second request): the episode spans versions.
    cfg = config(WRONG, layout=layout)
    episodes = []
    for index, seed in enumerate([1, 2]):
        server = Server(WRONG, tokenizer, global_steps=3, step_every=2, num_preempted=None, routed_experts=True)
        fields = row(ENV, seed, index=index)
        outputs = play(cfg, server, tokenizer, fields)
        turns = len(server.calls)
        for out in outputs:
            assert out.extra_fields["min_global_steps"] == 3
            assert out.extra_fields["max_global_steps"] == 3 + (turns - 1) // 2
            assert out.extra_fields["global_steps"] == server.global_steps
            assert out.metrics.num_preempted == -1  # the server never reported it
            assert len(out.routed_experts) == len(out.prompt_ids) + len(out.response_ids)
            # a version on each generated token, -1 elsewhere: request k (0-based) ran under 3 + k // 2
            generated = [v for v, m in zip(out.policy_versions, out.response_mask, strict=True) if m]
            assert all(v >= 3 for v in generated) and len(generated) == sum(out.response_mask)
            assert all(v == -1 for v, m in zip(out.policy_versions, out.response_mask, strict=True) if not m)
        episodes.append((outputs, fields))

    storage = Storage()
    keys = store(storage, cfg, tokenizer, episodes)
    tags = [storage.tags[("train", k)] for k in keys]
    assert all(isinstance(t["min_global_steps"], int) and isinstance(t["max_global_steps"], int) for t in tags)
    stored = [storage.samples[("train", k)]["gem_policy_versions"].tolist() for k in keys]
    assert stored == [v for outputs, _ in episodes for v in (o.policy_versions for o in outputs)]

    _, data = compute_advantage(storage, cfg, keys)
    advantages, mask = padded(data["advantages"]), padded(data["response_mask"])
    assert np.all(advantages[mask == 0] == 0.0) and np.isfinite(advantages).all()
    step_metrics = compute_metrics(storage, cfg, keys, global_steps=6)
    assert step_metrics["training/off_policy/trajectory_spans/max"] == 1 + (5 - 1) // 2
    assert step_metrics["training/off_policy/trajectory_staleness_worst/max"] == 6 - 1 - 3
    assert step_metrics["training/num_turns/max"] == 10
    assert np.isfinite(step_metrics["critic/advantages/mean"])


def test_outputs_pass_verls_legacy_worker_padding(tokenizer: Any) -> None:
    cfg = config(BISECT)
    fields = row(ENV, seed=5)
    (out,) = play(cfg, Server(BISECT, tokenizer), tokenizer, fields)
    worker = type(
        "Worker",
        (),
        {
            name: getattr(AgentLoopWorker, name)
            for name in (
                "_compute_multi_modal_inputs",
                "_compute_position_ids",
                "_get_mm_processor_kwargs",
                "_compute_score",
                "_compute_teacher_logprobs",
                "_pad_token_ids",
            )
        }
        | {
            "distillation_enabled": False,
            "processor": None,
            "mm_processor_kwargs": {},
            "reward_loop_worker_handles": None,
        },
    )()
    worker.tokenizer = tokenizer
    worker.rollout_config = cfg.actor_rollout_ref.rollout
    internal = asyncio.run(AgentLoopWorker._agent_loop_postprocess(worker, out, validate=False, **fields))
    batch = AgentLoopWorker._postprocess(worker, [internal], input_non_tensor_batch=None)
    assert batch.batch["responses"].shape == (1, cfg.actor_rollout_ref.rollout.response_length)
    assert int(batch.batch["response_mask"].sum()) == sum(out.response_mask)
    assert batch.non_tensor_batch["min_global_steps"][0] == 3
    assert np.array(batch.non_tensor_batch["max_global_steps"], dtype=int).tolist() == [3]


def test_grpo_with_the_transition_layout_is_refused(tokenizer: Any) -> None:
    cfg = config(BISECT, layout="transition", estimator="grpo")
    with pytest.raises(InstantiationException) as raised:
        play(cfg, Server(BISECT, tokenizer), tokenizer, row(ENV, seed=0))
    assert isinstance(raised.value.__cause__, ConfigError)
    assert "last turn only" in str(raised.value.__cause__)
    grouped = config(BISECT, estimator="grpo")
    grouped.actor_rollout_ref.rollout.n = 4  # grpo compares the episodes of a group (n=1 is refused)
    (out,) = play(grouped, Server(BISECT, tokenizer), tokenizer, row(ENV, seed=0))
    assert out.reward_score == sum(out.extra_fields["turn_scores"])  # grpo's per-episode score


class _FailingServer(Server):
    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        if len(self.calls) == 2:
            raise RuntimeError("server went away")
        return await super().generate(request_id, **kwargs)


def test_an_episode_that_fails_is_reported_with_its_name(tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    fields = row(ENV, seed=7, index=4, session_id=2)
    with caplog.at_level(logging.ERROR, logger="gem_verl.agent_loop"), pytest.raises(RuntimeError) as raised:
        play(config(WRONG), _FailingServer(WRONG, tokenizer), tokenizer, fields)
    (record,) = [r for r in caplog.records if r.name == "gem_verl.agent_loop"]
    assert record.levelno == logging.ERROR
    assert "core:NumberGuess-v0 seed=7 uid=uid4 session=2" in record.getMessage()
    assert "(core:NumberGuess-v0/seed=7, turn 2)" in record.getMessage()  # the engine's note: where it failed
    assert record.exc_info is not None and record.exc_info[1] is raised.value


def test_rows_from_parquet_through_verl_dataset(tokenizer: Any, tmp_path: Any) -> None:
    path = write_parquet(
        make_rows([ENV], [4, 9], options={"note": "x"}, system_prompt="Play well."), tmp_path / "train.parquet"
    )
    dataset = RLHFDataset(
        data_files=[path],
        tokenizer=tokenizer,
        config=OmegaConf.create({"max_prompt_length": 64, "filter_overlong_prompts": True, "cache_dir": str(tmp_path)}),
    )
    assert len(dataset) == 2
    item = dataset[1]
    assert item["agent_name"] == "gem_env_agent" and item["index"] == 1
    server = Server(BISECT, tokenizer)
    fields = {k: v for k, v in item.items() if not isinstance(v, torch.Tensor)}
    (out,) = play(config(BISECT), server, tokenizer, {**fields, "uid": "u", "session_id": 0})
    first_prompt = tokenizer.decode(server.calls[0]["prompt_ids"], skip_special_tokens=False)
    assert first_prompt.startswith("<|im_start|>system\nPlay well.<|im_end|>\n<|im_start|>user\nI picked")
    assert out.extra_fields["gem"]["seed"] == 9


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gem": {"layout": "tokens"}}, "gem"),
        ({"gem": {"max_turns": 0}}, "gem"),
        ({"gem": {"on_cut": "drop"}}, "gem"),
        ({"trainer": {"use_v1": False}}, "v1 trainer"),
    ],
    ids=["unknown-layout", "zero-max-turns", "unknown-on-cut", "legacy-trainer"],
)
def test_bad_trainer_config_raises_config_error(tokenizer: Any, change: dict[str, Any], message: str) -> None:
    cfg = OmegaConf.merge(config(BISECT), OmegaConf.create(change))
    # verl builds loops with hydra, which wraps constructor errors; the ConfigError is the cause.
    with pytest.raises(InstantiationException) as raised:
        play(cfg, Server(BISECT, tokenizer), tokenizer, row(ENV, seed=0))
    assert isinstance(raised.value.__cause__, ConfigError)
    assert message in str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extra_info": {"index": 0}}, "no extra_info"),
        ({"extra_info": {"gem": {"env_id": ENV, "options": "{bad"}}}, "not valid JSON"),
        ({"extra_info": {"gem": {"env_id": ENV, "colour": 1}}}, "bad extra_info"),
    ],
    ids=["missing-gem", "bad-options-json", "unknown-field"],
)
def test_bad_rows_raise_config_error(tokenizer: Any, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        play(config(BISECT), Server(BISECT, tokenizer), tokenizer, fields)


def test_a_first_prompt_longer_than_prompt_length_is_an_error_not_a_cut(tokenizer: Any) -> None:
    cfg = config(BISECT)
    cfg.actor_rollout_ref.rollout.prompt_length = 8
    server = Server(BISECT, tokenizer)
    with pytest.raises(TrajectoryError, match=r"rollout\.prompt_length=8"):
        play(cfg, server, tokenizer, row(ENV, seed=0))
    assert server.calls == []


FAULTY = "test:Faulty-v0"


@pytest.fixture
def faulty() -> str:
    """NumberGuess that raises ``TimeoutError`` at the turn a row's ``env_kwargs`` names (0: in reset)."""
    from gem_core.testing import faulty_number_guess

    gem_core.register(FAULTY, faulty_number_guess, kwargs={"error": "TimeoutError"}, override=True)
    return FAULTY


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
def test_a_batch_with_failing_envs_trains_only_on_the_others(
    tokenizer: Any, faulty: str, layout: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An env that raises ends its own episode: a sample with nothing to train, out of rebn's statistics, counted."""
    cfg = config(WRONG, layout=layout)
    good = [(row(ENV, seed, index=i), ENV) for i, seed in enumerate([1, 2])]
    failing = [
        (row(faulty, 3, index=2, env_kwargs={"fail_at": 0}), "reset"),
        (row(faulty, 4, index=3, env_kwargs={"fail_at": 2}), "step"),
    ]
    played = {}
    for fields, _ in [*good, *failing]:
        played[fields["uid"]] = (play(cfg, Server(WRONG, tokenizer), tokenizer, fields), fields)
    for fields, phase in failing:
        (out,) = played[fields["uid"]][0]
        assert not any(out.response_mask) and set(out.turn_ids) == {-1} and out.reward_score == 0.0
        summary = out.extra_fields["gem"]
        assert summary["error_phase"] == phase and summary["error"].startswith("TimeoutError: FaultyEnv")
        assert summary["num_turns"] == (0 if phase == "reset" else 1)  # the turns before the failure are kept

    def advantages_of(uids: list[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        storage = Storage()
        keys = store(storage, cfg, tokenizer, [played[uid] for uid in uids])
        _, data = compute_advantage(storage, cfg, keys)
        rows = [t.numpy() for t in data["advantages"].unbind()]
        masks = [t.numpy() for t in data["response_mask"].unbind()]
        assert all(np.all(a[m == 0] == 0.0) for a, m in zip(rows, masks, strict=True))
        with caplog.at_level(logging.WARNING, logger="gem_verl.trainer_hook"):
            metrics = compute_metrics(storage, cfg, keys)
        return dict(zip(keys, rows, strict=True)), metrics

    everything, metrics = advantages_of(list(played))
    survivors, clean_metrics = advantages_of([fields["uid"] for fields, _ in good])
    # rebn's mean and std come from the surviving episodes only: their advantages are unchanged
    for key, value in survivors.items():
        np.testing.assert_allclose(everything[key], value, rtol=1e-6, atol=1e-7)
    for fields, _ in failing:
        assert not everything[f"{fields['uid']}_0_0"].any()
    assert metrics["gem/env_errors"] == 2.0 and clean_metrics["gem/env_errors"] == 0.0
    assert np.isfinite(metrics["critic/advantages/mean"])
    (warning,) = [r.getMessage() for r in caplog.records if "env error" in r.getMessage()]
    assert "2 of 4 episodes" in warning and f"{faulty} seed=3 in reset: TimeoutError" in warning


@pytest.mark.parametrize(
    "mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_verls_loss_aggregation_gives_a_sample_with_no_trainable_token_no_weight(mode: str) -> None:
    from verl.trainer.ppo.core_algos import agg_loss

    losses = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1.0
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float32)  # last row: a failed episode
    with_failed = agg_loss(losses, mask, mode, loss_scale_factor=4)
    without = agg_loss(losses[:2], mask[:2], mode, loss_scale_factor=4)
    assert torch.isfinite(with_failed) and torch.allclose(with_failed, without)


def test_on_env_error_raise_propagates(tokenizer: Any, faulty: str) -> None:
    fields = row(faulty, 3, env_kwargs={"fail_at": 1})
    with pytest.raises(TimeoutError, match="injected failure in step 1"):
        play(config(WRONG, on_env_error="raise"), Server(WRONG, tokenizer), tokenizer, fields)


FINISH_TOKENIZER = build_chat_tokenizer("chatml")

# What each server says for each way a reply ends (verl's TokenOutput.stop_reason).
SAID = {
    "vllm": {"stop": "completed", "stop-at-limit": "completed", "cut": "completed", "abort": "aborted"},
    "sglang": {"stop": "stop", "stop-at-limit": "length", "cut": "length", "abort": "abort"},  # length tested first
    "fully-async": {"stop": "stop", "stop-at-limit": "length", "cut": "length", "abort": "aborted"},
}


@settings(max_examples=60, deadline=None)
@given(ending=st.sampled_from(REPLY_ENDINGS), server=st.sampled_from(sorted(SAID)), max_tokens=st.integers(2, 24))
def test_no_cut_is_read_as_a_stop_whatever_the_server_says(ending: str, server: str, max_tokens: int) -> None:
    eos = int(FINISH_TOKENIZER.eos_token_id)
    ids = sampled_reply(ending, max_tokens, eos, filler_id=47)
    generation = Generation(token_ids=ids, finish_reason=finish_reason(SAID[server][ending], ids, max_tokens, {eos}))
    expected = {"stop-at-limit": "stop"}.get(ending, ending)  # its stop token sampled: complete
    assert engine_reading(generation, FINISH_TOKENIZER, max_tokens) == expected
