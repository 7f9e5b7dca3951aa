"""``gem_env_agent`` plays real gem envs through verl's agent-loop machinery.

The only fake is the LLM server (it needs a GPU inference engine): ``_ScriptedServer``
answers ``generate`` with token ids, the way verl's own CPU agent-loop tests do. The
tokenizer is a real Hugging Face tokenizer built locally (ChatML template), the env is
the real ``core:NumberGuess-v0``, the agent loop is instantiated from verl's registry with
``hydra.utils.instantiate`` exactly as ``AgentLoopWorker`` does, and the outputs go
through verl's own post-processing (padding and batch assembly of the worker, the
``as_dict`` + TensorDict path of the v1 TransferQueue worker) and ``compute_advantage``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import hydra
import numpy as np
import pytest
import torch
import verl  # noqa: F401  (the entry point registers the loop and the estimator)
from gem_verl.agent_loop import GemAgentLoopOutput, GemEnvAgentLoop
from gem_verl.dataset import make_rows, write_parquet
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput

import gem_core
from gem_core.errors import ConfigError
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer

PROMPT_LENGTH = 128
RESPONSE_LENGTH = 256


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    tok = build_chat_tokenizer("chatml", vocab_size=600)
    return tok


class _ScriptedServer:
    """Fake LLM server: reads the last env message from the prompt ids and answers by bisection.

    ``mode="bisect"`` finds NumberGuess's number; ``mode="garbage"`` never writes a number
    (format-error rewards until the env truncates). Generated ids end with ``<|im_end|>``
    like a real server's stop token; logprobs are distinct per token so alignment is checked.
    """

    def __init__(self, tokenizer: Any, mode: str = "bisect", with_logprobs: bool = True) -> None:
        self.tokenizer = tokenizer
        self.mode = mode
        self.with_logprobs = with_logprobs
        self.calls: list[dict[str, Any]] = []
        self.low, self.high = 1, 16
        self.end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any):
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), **sampling_params})
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        last_user = text.rsplit("<|im_start|>user\n", 1)[-1]
        if "I picked" in last_user:
            self.low, self.high = 1, 16
        match = re.search(r"(-?\d+) is wrong; the number is (higher|lower)", last_user)
        if match:
            guess = int(match.group(1))
            if match.group(2) == "higher":
                self.low = guess + 1
            else:
                self.high = guess - 1
        answer = "no idea" if self.mode == "garbage" else f"My guess is {(self.low + self.high) // 2}"
        ids = [*self.tokenizer.encode(answer, add_special_tokens=False), self.end_id]
        logprobs = [-0.01 * (len(self.calls) * 100 + i) for i in range(len(ids))] if self.with_logprobs else None
        return TokenOutput(token_ids=ids, log_probs=logprobs, num_preempted=0)


def _config(layout: str = "sequence", gamma: float = 0.9, **gem: Any) -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": PROMPT_LENGTH,
                    "response_length": RESPONSE_LENGTH,
                    "multi_turn": {"tool_config_path": None},
                },
                "model": {},
            },
            "data": {"apply_chat_template_kwargs": {}},
            "algorithm": {"gamma": gamma, "adv_estimator": "rebn"},
            "trainer": {"use_v1": True},
            "gem": {"layout": layout, **gem},
        }
    )


def _make_loop(config: Any, server: _ScriptedServer, tokenizer: Any) -> GemEnvAgentLoop:
    """Instantiate from verl's registry with the arguments ``AgentLoopWorker._run_agent_loop`` passes."""
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry["gem_env_agent"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",  # verl's ChatML boundary handling (newline after <|im_end|>)
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, GemEnvAgentLoop)
    return loop


def _row(seed: int, index: int = 0, **kwargs: Any) -> dict[str, Any]:
    row = make_rows("core:NumberGuess-v0", [seed], start_index=index, **kwargs)[0]
    return {**row, "raw_prompt": row["prompt"], "index": index, "uid": f"uid{index}", "session_id": 0}


def _play(config: Any, server: _ScriptedServer, tokenizer: Any, row: dict[str, Any]) -> list[Any]:
    """Build the loop and run it inside one event loop, as verl's worker does (the loop keeps a handle on it)."""

    async def play() -> list[Any]:
        loop = _make_loop(config, server, tokenizer)
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **row)

    return asyncio.run(play())


def test_sequence_layout_plays_a_multi_turn_episode_token_in_token_out(tokenizer: Any) -> None:
    server = _ScriptedServer(tokenizer)
    (out,) = _play(_config("sequence"), server, tokenizer, _row(seed=3))
    assert isinstance(out, GemAgentLoopOutput)
    turn_scores = out.extra_fields["turn_scores"]
    assert len(turn_scores) >= 2 and turn_scores[-1] == 1.0 and all(r == 0.0 for r in turn_scores[:-1])
    assert out.extra_fields["gem"]["success"] is True
    assert out.extra_fields["gem"]["terminated"] is True
    assert out.num_turns == 2 * len(turn_scores)

    # Token in / token out: every call's prompt extends the previous prompt plus the sampled ids.
    assert len(server.calls) == len(turn_scores)
    full = out.prompt_ids + out.response_ids
    for call in server.calls:
        assert full[: len(call["prompt_ids"])] == call["prompt_ids"]
    assert server.calls[0]["prompt_ids"] == out.prompt_ids
    # max_tokens shrinks with what the episode used so far.
    assert [c["max_tokens"] for c in server.calls] == [
        RESPONSE_LENGTH - (len(c["prompt_ids"]) - len(out.prompt_ids)) for c in server.calls
    ]

    # The stream is exactly the chat template's rendering of the conversation, replayed on a fresh env.
    env = gem_core.make("core:NumberGuess-v0")
    observation, _ = env.reset(seed=3)
    mask = np.asarray(out.response_mask)
    spans = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])) != 0).reshape(-1, 2)
    messages = []
    for start, end in spans:
        action = tokenizer.decode(out.response_ids[start:end], skip_special_tokens=True)
        messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": action}]
        observation = env.step(action)[0]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert tokenizer.decode(full, skip_special_tokens=False) + "\n" == rendered

    # Mask: 1 exactly on the generated spans; rewards on each span's last token; logprobs aligned.
    assert len(spans) == len(turn_scores)
    rewards = np.asarray(out.token_rewards)
    assert np.flatnonzero(rewards).tolist() == [e - 1 for s, e in spans if rewards[e - 1] != 0]
    assert [rewards[e - 1] for _, e in spans] == turn_scores
    logprobs = np.asarray(out.response_logprobs)
    assert np.all(logprobs[mask == 0] == 0.0) and np.all(logprobs[mask == 1] < 0.0)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == len(out.token_rewards)
    assert out.metrics.generate_sequences > 0.0 and out.metrics.num_preempted == 0


def test_transition_layout_returns_one_output_per_turn_with_returns(tokenizer: Any) -> None:
    gamma = 0.8
    server = _ScriptedServer(tokenizer)
    outputs = _play(_config("transition", gamma=gamma), server, tokenizer, _row(seed=3))
    (sequence,) = _play(_config("sequence", gamma=gamma), _ScriptedServer(tokenizer), tokenizer, _row(3))
    turn_scores = sequence.extra_fields["turn_scores"]
    assert len(outputs) == len(turn_scores) >= 2
    expected_returns = discounted_returns(turn_scores, gamma)
    for t, out in enumerate(outputs):
        assert out.prompt_ids == server.calls[t]["prompt_ids"]
        assert out.response_mask == [1] * len(out.response_ids)
        assert out.token_rewards[:-1] == [0.0] * (len(out.response_ids) - 1)
        assert out.token_rewards[-1] == pytest.approx(expected_returns[t])
        assert out.extra_fields["gem_turn_index"] == t
    # The same episode either way: the last transition's prompt + response is the sequence.
    last = outputs[-1]
    assert last.prompt_ids + last.response_ids == sequence.prompt_ids + sequence.response_ids


def test_format_errors_until_the_env_truncates(tokenizer: Any) -> None:
    (out,) = _play(_config(), _ScriptedServer(tokenizer, mode="garbage"), tokenizer, _row(seed=1))
    assert out.extra_fields["turn_scores"] == [-0.1] * 5  # NumberGuess allows 5 guesses
    assert out.extra_fields["gem"]["format_errors"] == 5
    assert out.extra_fields["gem"]["truncated"] is True and out.extra_fields["gem"]["success"] is None


def test_max_turns_and_response_budget_cut_episodes(tokenizer: Any) -> None:
    (out,) = _play(_config(max_turns=2), _ScriptedServer(tokenizer, mode="garbage"), tokenizer, _row(1))
    assert out.extra_fields["turn_scores"] == [-0.1, -0.1]
    assert out.extra_fields["gem"]["truncated"] is True

    small = _config()
    small.actor_rollout_ref.rollout.response_length = 40
    server = _ScriptedServer(tokenizer, mode="garbage", with_logprobs=False)
    (out,) = _play(small, server, tokenizer, _row(1))
    assert len(out.response_ids) <= 40
    assert out.response_logprobs is None
    assert out.extra_fields["gem"]["truncated"] is True
    assert 1 <= len(out.extra_fields["turn_scores"]) < 5


def _worker_postprocess(outputs: list[Any], config: Any, tokenizer: Any, row: dict[str, Any]) -> DataProto:
    """Verl's (legacy) worker post-processing: padding to prompt/response length, batch assembly."""

    class _Worker:
        _compute_multi_modal_inputs = AgentLoopWorker._compute_multi_modal_inputs
        _compute_position_ids = AgentLoopWorker._compute_position_ids
        _get_mm_processor_kwargs = AgentLoopWorker._get_mm_processor_kwargs
        _compute_score = AgentLoopWorker._compute_score
        _compute_teacher_logprobs = AgentLoopWorker._compute_teacher_logprobs
        _pad_token_ids = AgentLoopWorker._pad_token_ids
        distillation_enabled = False
        processor = None
        mm_processor_kwargs: dict[str, Any] = {}
        reward_loop_worker_handles = None

        def __init__(self) -> None:
            self.tokenizer = tokenizer
            self.rollout_config = config.actor_rollout_ref.rollout

    worker = _Worker()
    internal = [
        asyncio.run(AgentLoopWorker._agent_loop_postprocess(worker, out, validate=False, **row)) for out in outputs
    ]
    return AgentLoopWorker._postprocess(worker, internal, input_non_tensor_batch=None)


def _v1_batch(outputs_per_episode: list[list[Any]], rows: list[dict[str, Any]]) -> tuple[DataProto, list[str]]:
    """What verl's v1 worker stores (``as_dict`` per output, keys ``{uid}_{session}_{i}``) and its trainer reads."""
    fields, keys = [], []
    for outputs, row in zip(outputs_per_episode, rows, strict=True):
        for i, out in enumerate(outputs):
            field = out.as_dict()
            field["loss_mask"] = field["response_mask"]
            field["uid"] = row["uid"]
            fields.append(field)
            keys.append(f"{row['uid']}_{row['session_id']}_{i}")
    stored = list_of_dict_to_tensordict(fields)
    # trainer_base._compute_advantage: nested -> padded DataProto with token_level_rewards = rm_scores
    selected = stored.select("response_mask", "rm_scores")
    data = DataProto(batch=selected.to_padded_tensor())
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data.non_tensor_batch["uid"] = np.array([f["uid"] for f in fields], dtype=object)
    return data, keys


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
def test_outputs_pass_verl_postprocessing_and_rebn_matches_core(tokenizer: Any, layout: str) -> None:
    gamma = 0.9
    config = _config(layout, gamma=gamma)
    rows = [_row(seed=s, index=i) for i, s in enumerate([0, 3, 5, 11])]
    modes = ["bisect", "garbage", "bisect", "garbage"]
    outputs_per_episode = [
        _play(config, _ScriptedServer(tokenizer, mode=m), tokenizer, row) for row, m in zip(rows, modes, strict=True)
    ]
    turn_scores = [outs[0].extra_fields["turn_scores"] for outs in outputs_per_episode]
    assert any(len(s) > 1 for s in turn_scores)

    # verl's worker validation: padding to prompt/response length and batch assembly accept the outputs.
    # A transition's prompt is the history so far, so it may exceed rollout.prompt_length (never the
    # prompt + response budget); the v1 trainer stores it unpadded, the legacy padding needs that width.
    pad_config = _config(layout, gamma=gamma)
    if layout == "transition":
        pad_config.actor_rollout_ref.rollout.prompt_length = PROMPT_LENGTH + RESPONSE_LENGTH
    prompt_width = pad_config.actor_rollout_ref.rollout.prompt_length
    for outs, row in zip(outputs_per_episode, rows, strict=True):
        assert all(len(o.prompt_ids) + len(o.response_ids) <= PROMPT_LENGTH + RESPONSE_LENGTH for o in outs)
        batch = _worker_postprocess(outs, pad_config, tokenizer, row)
        assert batch.batch["responses"].shape == (len(outs), RESPONSE_LENGTH)
        assert batch.batch["prompts"].shape == (len(outs), prompt_width)
        assert torch.equal(batch.batch["response_mask"].sum(-1), torch.tensor([sum(o.response_mask) for o in outs]))

    # v1 path: stored as_dict fields -> padded batch -> verl's advantage dispatch -> our rebn.
    data, keys = _v1_batch(outputs_per_episode, rows)
    data = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="rebn", gamma=gamma, config=config.algorithm
    )
    expected = rebn_advantages([np.asarray(s) for s in turn_scores], gamma)
    got: list[list[float]] = []
    row_index = 0
    for outs in outputs_per_episode:
        per_episode: list[float] = []
        for _ in outs:
            adv = data.batch["advantages"][row_index].numpy()
            mask = data.batch["response_mask"][row_index].numpy().astype(bool)
            spans = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])) != 0).reshape(-1, 2)
            for start, end in spans:
                assert np.allclose(adv[start:end], adv[start])  # one advantage per turn, on all its tokens
                per_episode.append(float(adv[start]))
            assert np.all(adv[~mask] == 0.0)
            row_index += 1
        got.append(per_episode)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_rows_from_parquet_through_verl_dataset(tokenizer: Any, tmp_path: Any) -> None:
    path = write_parquet(
        make_rows(["core:NumberGuess-v0"], [4, 9], options={"note": "x"}, system_prompt="Play well."),
        tmp_path / "train.parquet",
    )
    dataset = RLHFDataset(
        data_files=[path],
        tokenizer=tokenizer,
        config=OmegaConf.create({"max_prompt_length": 64, "filter_overlong_prompts": True, "cache_dir": str(tmp_path)}),
    )
    assert len(dataset) == 2
    item = dataset[1]
    assert item["agent_name"] == "gem_env_agent" and item["index"] == 1
    server = _ScriptedServer(tokenizer)
    row = {k: v for k, v in item.items() if not isinstance(v, torch.Tensor)}
    (out,) = _play(_config(), server, tokenizer, {**row, "uid": "u", "session_id": 0})
    first_prompt = tokenizer.decode(server.calls[0]["prompt_ids"], skip_special_tokens=False)
    assert first_prompt.startswith("<|im_start|>system\nPlay well.<|im_end|>\n<|im_start|>user\nI picked")
    assert out.extra_fields["gem"]["seed"] == 9


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gem": {"layout": "tokens"}}, "gem"),
        ({"gem": {"max_turns": 0}}, "gem"),
        ({"trainer": {"use_v1": False}}, "v1 trainer"),
    ],
    ids=["unknown-layout", "zero-max-turns", "legacy-trainer"],
)
def test_bad_trainer_config_raises_config_error(tokenizer: Any, change: dict[str, Any], message: str) -> None:
    config = OmegaConf.merge(_config(), OmegaConf.create(change))
    # verl builds loops with hydra, which wraps constructor errors; the ConfigError is the cause.
    with pytest.raises(InstantiationException) as raised:
        _play(config, _ScriptedServer(tokenizer), tokenizer, _row(seed=0))
    assert isinstance(raised.value.__cause__, ConfigError)
    assert message in str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"extra_info": {"index": 0}}, "no extra_info"),
        ({"extra_info": {"gem": {"env_id": "core:NumberGuess-v0", "options": "{bad"}}}, "not valid JSON"),
        ({"extra_info": {"gem": {"env_id": "core:NumberGuess-v0", "colour": 1}}}, "bad extra_info"),
    ],
    ids=["missing-gem", "bad-options-json", "unknown-field"],
)
def test_bad_rows_raise_config_error(tokenizer: Any, row: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _play(_config(), _ScriptedServer(tokenizer), tokenizer, row)
