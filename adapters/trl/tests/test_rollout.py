"""GemRollout without a trainer: the engine drives it, the adapter converts; limits, templates, vLLM, ReBN."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from gem_trl import GemRollout, build_tiny_tokenizer, episode_key, make_prompt_dataset, parse_episode_key
from gem_trl.advantages import completion_spans, rebn_token_advantages
from gem_trl.rollout import RolloutTimings, vllm_generate
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.episode import INVALID_ACTION, Generation, TurnRequest
from gem_core.errors import ConfigError, EnvNotFound, TemplatePrefixError
from gem_core.rl.advantages import rebn
from gem_core.rl.layouts import episode_to_sequence
from gem_core.rl.returns import discounted_returns
from gem_core.testing import engine_reading, sampled_reply
from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def trainer_like(tokenizer: Any, max_completion_length: int = 512, **extra: Any) -> Any:
    """The attributes of GRPOTrainer that GemRollout.setup reads."""
    return SimpleNamespace(
        processing_class=tokenizer, chat_template_kwargs={}, max_completion_length=max_completion_length, **extra
    )


def rollout_for(tokenizer: Any, max_completion_length: int = 512, **settings: Any) -> GemRollout:
    rollout = GemRollout(**settings)
    rollout.setup(trainer_like(tokenizer, max_completion_length))
    return rollout


def scripted(tokenizer: Any, answers: list[str], *, stop: bool = True) -> Any:
    """A stand-in for the model: turn k of every episode answers ``answers[k]`` (then the stop token)."""
    calls: list[list[TurnRequest]] = []

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        calls.append(list(requests))
        out = []
        for r in requests:
            ids = tokenizer.encode(answers[min(r.turn, len(answers) - 1)], add_special_tokens=False)
            ids = [*ids, tokenizer.eos_token_id] if stop else ids
            limit = r.max_tokens or len(ids)
            reason = "length" if len(ids) > limit or (not stop and len(ids) >= limit) else "stop"
            out.append(Generation(token_ids=ids[:limit], finish_reason=reason))
        return out

    generate.calls = calls  # type: ignore[attr-defined]
    return generate


@pytest.mark.parametrize(
    ("env_id", "seed"), [(ENV_ID, 0), ("game:GuessTheNumber-v0-easy", 12345)], ids=["core-env", "game-variant"]
)
def test_episode_key_round_trips(env_id: str, seed: int) -> None:
    assert parse_episode_key(episode_key(env_id, seed)) == (env_id, seed)


@pytest.mark.parametrize(
    "prompt",
    [
        "core:NumberGuess-v0",
        "core:NumberGuess-v0#",
        "#3",
        "core:NumberGuess-v0#-1",
        [{"role": "user", "content": "hi"}],
    ],
    ids=["no-seed", "empty-seed", "no-env", "negative-seed", "chat-messages"],
)
def test_prompts_that_are_not_episode_keys_name_the_fix(prompt: Any) -> None:
    with pytest.raises(ConfigError, match="make_prompt_dataset"):
        parse_episode_key(prompt)


def test_prompt_dataset_has_one_row_per_env_and_seed() -> None:
    ds = make_prompt_dataset([ENV_ID, "core:NumberGuess-v0"], [3, 5])
    assert ds["prompt"] == [f"{ENV_ID}#3", f"{ENV_ID}#3", f"{ENV_ID}#5", f"{ENV_ID}#5"]
    assert ds["seed"] == [3, 3, 5, 5]


def test_prompt_dataset_rejects_unknown_env_before_training() -> None:
    with pytest.raises(EnvNotFound):
        make_prompt_dataset("core:NumberGues-v0", 2)


@pytest.mark.parametrize("template", ["chatml", "chatml_drop_think"])
def test_episode_is_laid_out_token_in_token_out(template: str) -> None:
    tokenizer = build_chat_tokenizer(template)
    rollout = rollout_for(tokenizer, max_turn_tokens=24, env_kwargs={"max_turns": 4})
    answers = ["<think>\nlow\n</think>\n\nMy guess is 1", "no idea", "<think>\nx\n</think>\n\nMy guess is 2"]
    (session,) = rollout.play([(ENV_ID, 3)], scripted(tokenizer, answers))
    out = rollout.to_trl([session])
    episode = out["episode"][0]
    assert episode.start_state_id == f"{ENV_ID}/seed=3"  # the core's start state id
    # the layout is the core's: the same sequence, mask and spans as episode_to_sequence
    sequence = episode_to_sequence(episode)
    assert out["prompt_ids"][0] + out["completion_ids"][0] == sequence.input_ids.tolist()
    assert out["env_mask"][0] == sequence.loss_mask[sequence.prompt_length :].astype(int).tolist()
    p = sequence.prompt_length
    assert out["turn_spans"][0] == [[a - p, b - p] for a, b in sequence.turn_spans]
    assert out["turn_spans"][0] == [list(s) for s in completion_spans(episode)]
    for turn, (start, end) in zip(episode.turns, out["turn_spans"][0], strict=True):
        assert out["completion_ids"][0][start:end] == turn.action_token_ids  # as sampled, never re-encoded
    assert out["turn_rewards"][0] == [t.reward for t in episode.turns]
    assert episode.turns[1].reward == pytest.approx(-0.1)  # "no idea" is a format error
    assert out["logprobs"] is None
    # the earlier <think> block stays in the context even where the template would drop it from history
    assert "<think>\nlow\n</think>" in tokenizer.decode(out["completion_ids"][0])


def test_history_is_never_re_rendered() -> None:
    """Per turn the template renders a small, constant amount, at turn 2 as at turn 15."""
    inner = build_chat_tokenizer("chatml")
    rendered: list[int] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
            rendered.append(sum(len(m["content"]) for m in messages))
            return inner.apply_chat_template(messages, **kwargs)

    rollout = rollout_for(Counting(), 4096, max_turn_tokens=12, max_turns=16, env_kwargs={"max_turns": 20})
    rendered.clear()  # the start-up probe
    per_turn: list[int] = []
    generate = scripted(inner, ["My guess is 0"])

    def counting(requests: list[TurnRequest]) -> list[Generation]:
        per_turn.append(sum(rendered))
        rendered.clear()
        return generate(requests)

    (session,) = rollout.play([(ENV_ID, 1)], counting)
    assert session.episode().num_turns == 16
    assert max(per_turn[2:]) <= per_turn[1] * 1.5  # flat, not growing with the history


def test_generation_is_batched_across_running_episodes(tokenizer: Any) -> None:
    rollout = rollout_for(tokenizer, max_turn_tokens=8, max_turns=3, env_kwargs={"max_turns": 5})
    generate = scripted(tokenizer, ["100"])
    sessions = rollout.play([(ENV_ID, s) for s in range(5)], generate)
    assert [len(c) for c in generate.calls] == [5, 5, 5]  # one call per turn, all episodes together
    out = rollout.to_trl(sessions)
    assert out["num_turns"] == [3] * 5
    assert out["truncated"] == [True] * 5 == [ep.truncated for ep in out["episode"]]
    assert out["terminated"] == [False] * 5
    assert rollout.last_timings.turns == 3


def test_finished_episodes_leave_the_batch(tokenizer: Any) -> None:
    # guessing 1, 2, ..., 8 finds every target in [1, 8] at turn `target`
    rollout = rollout_for(tokenizer, 4096, max_turn_tokens=8, env_kwargs={"high": 8, "max_turns": 8})
    generate = scripted(tokenizer, ["1", "2", "3", "4", "5", "6", "7", "8"])
    out = rollout.to_trl(rollout.play([(ENV_ID, s) for s in range(12)], generate))
    assert all(out["terminated"]) and all(out["success"]) and not any(out["truncated"])
    sizes = [len(c) for c in generate.calls]
    assert sizes == [sum(n > turn for n in out["num_turns"]) for turn in range(len(sizes))]
    assert sizes[-1] < sizes[0] == 12


def test_completion_budget_ends_episode_on_model_tokens(tokenizer: Any) -> None:
    rollout = rollout_for(tokenizer, 80, max_turn_tokens=8, env_kwargs={"max_turns": 10})
    (session,) = rollout.play([(ENV_ID, 1)], scripted(tokenizer, ["nothing"]))
    out = rollout.to_trl([session])
    assert len(out["completion_ids"][0]) <= 80
    assert out["end_reason"] == ["budget"] and out["truncated"] == [True]
    assert out["env_mask"][0][-1] == 1  # the completion ends with the model's own tokens
    assert 1 < out["num_turns"][0] < 10


@pytest.mark.parametrize(
    ("on_cut", "action"), [("invalid", INVALID_ACTION), ("pass", "My guess")], ids=["invalid", "pass"]
)
def test_cut_reply_is_not_a_valid_move_by_default(tokenizer: Any, on_cut: str, action: str) -> None:
    rollout = rollout_for(tokenizer, max_turn_tokens=3, max_turns=2, on_cut=on_cut)
    (session,) = rollout.play([(ENV_ID, 0)], scripted(tokenizer, ["My guess is 12"]))
    out = rollout.to_trl([session])
    episode = out["episode"][0]
    assert episode.turns[0].stop_reason == "length" and out["cut_turns"] == [2]
    assert episode.turns[0].action.startswith(action)
    if on_cut == "invalid":
        assert episode.turns[0].reward < 0  # the env's penalty for a malformed action


def test_bad_settings_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_turn_tokens"):
        GemRollout(max_turn_tokens=0)
    with pytest.raises(ConfigError, match="max_turns"):
        GemRollout(max_turns=0)
    with pytest.raises(ConfigError, match="on_cut"):
        GemRollout(on_cut="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gamma"):
        GemRollout(gamma=1.5)


def test_template_that_cannot_be_bridged_fails_at_setup_naming_it() -> None:
    inner = build_chat_tokenizer("chatml")

    class CountsMessages:
        name_or_path = "tiny/counts-messages"

        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
            return f"[{len(messages)}]" + inner.apply_chat_template(messages, **kwargs)

    with pytest.raises(TemplatePrefixError, match=r"tiny/counts-messages.*processing_class"):
        GemRollout().setup(trainer_like(CountsMessages()))


class FakeVLLMEngine:
    """Stands in for TRL's VLLMGeneration (needs a GPU): answers in its output format, records each call."""

    def __init__(self, tokenizer: Any, text: str = "12") -> None:
        self.tokenizer = tokenizer
        self.text = text
        self.max_completion_length = 4096
        self.mode = "colocate"  # the attributes of TRL's engine the rollout reads (gem_trl.contract)
        self.tensor_parallel_size = 1
        self.enable_sleep_mode = False
        self.seen_limits: list[int] = []

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int) -> tuple[Any, ...]:
        assert images is None and num_generations == 1
        self.seen_limits.append(self.max_completion_length)
        completions, logprobs, token_ids = [], [], []
        for _ in prompts:
            ids = [*self.tokenizer.encode(self.text, add_special_tokens=False), self.tokenizer.eos_token_id]
            ids = ids[: self.max_completion_length]
            completions.append(ids)
            logprobs.append([[-0.5 - i] for i in range(len(ids))])  # sampled token's logprob (logprobs=0)
            token_ids.append([[t] for t in ids])
        return prompts, completions, logprobs, token_ids


def test_vllm_path_passes_turn_limit_and_keeps_sampling_logprobs(tokenizer: Any) -> None:
    engine = FakeVLLMEngine(tokenizer)
    logged: dict[str, float] = {}
    trainer = trainer_like(
        tokenizer,
        256,
        use_vllm=True,
        vllm_generation=engine,
        eos_token_ids=[tokenizer.eos_token_id],
        accelerator=SimpleNamespace(num_processes=1),
        _log_metric=logged.__setitem__,
    )
    rollout = GemRollout(max_turn_tokens=5, max_turns=2)
    out = rollout([episode_key(ENV_ID, 0), episode_key(ENV_ID, 0)], trainer)
    assert engine.seen_limits and set(engine.seen_limits) == {5}
    assert engine.max_completion_length == 4096  # restored
    for logprobs, mask in zip(out["logprobs"], out["env_mask"], strict=True):
        assert len(logprobs) == len(mask)
        on_generated = [lp for lp, m in zip(logprobs, mask, strict=True) if m]
        assert on_generated[:2] == [-0.5, -1.5]
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    assert out["completion_ids"][0] == out["completion_ids"][1]  # same key, same deterministic answers
    assert set(logged) >= {"gem/episode_return", "gem/time_generate", "gem/time_env", "gem/time_adapter"}


def test_vllm_reply_without_stop_token_at_the_limit_is_cut(tokenizer: Any) -> None:
    engine = FakeVLLMEngine(tokenizer, text="My guess is 123456789")
    trainer = trainer_like(
        tokenizer,
        256,
        use_vllm=True,
        vllm_generation=engine,
        eos_token_ids=[tokenizer.eos_token_id],
        accelerator=SimpleNamespace(num_processes=1),
    )
    out = GemRollout(max_turn_tokens=4, max_turns=1)([episode_key(ENV_ID, 0)], trainer)
    (turn,) = out["episode"][0].turns
    assert turn.stop_reason == "length" and turn.action == INVALID_ACTION
    assert len(out["completion_ids"][0]) == 4


RANK_SCRIPT = """
import json, sys
import torch.distributed as dist
from gem_core.rl.types import Episode, Turn
from gem_trl.advantages import rebn_token_advantages

rank, init_file, rewards_file, out_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
episodes = []
for rewards in json.load(open(rewards_file))[rank]:
    ids, turns = [1, 2, 3], []
    for r in rewards:  # token-in/token-out turns: each prompt extends the last one
        turns.append(Turn("obs", "act", r, prompt_token_ids=list(ids), action_token_ids=[7, 8]))
        ids += [7, 8, 9]
    episodes.append(Episode(turns, start_state_id="s"))
tokens, per_turn = rebn_token_advantages(episodes, 0.9, 64)
json.dump({"per_turn": [a.tolist() for a in per_turn], "tokens": tokens.tolist()}, open(out_file, "w"))
dist.destroy_process_group()
"""


def test_rebn_is_normalised_over_the_turns_of_every_rank(tmp_path: Any) -> None:
    """Two real processes (gloo): each rank's advantages equal ReBN over the union of both ranks' turns."""
    import json
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    rewards = [[rng.normal(size=rng.integers(1, 5)).round(3).tolist() for _ in range(3)] for _ in range(2)]
    rewards[1].append([5.0, 5.0])  # rank 1 alone would normalise very differently
    (tmp_path / "rewards.json").write_text(json.dumps(rewards))
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(tmp_path / "rank.py"),
                str(rank),
                str(tmp_path / "init"),
                str(tmp_path / "rewards.json"),
                str(tmp_path / f"out{rank}.json"),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    got = [a for rank in range(2) for a in json.loads((tmp_path / f"out{rank}.json").read_text())["per_turn"]]
    returns = [discounted_returns(r, 0.9) for part in rewards for r in part]
    expected = np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1])
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    tokens = json.loads((tmp_path / "out1.json").read_text())["tokens"]
    assert tokens[-1][:2] == pytest.approx([expected[-1][0]] * 2, rel=1e-5)  # turn 0 of the last episode, 2 tokens
    assert tokens[-1][2] == 0.0  # the env's token between the turns


def test_turns_left_out_of_the_loss_are_left_out_of_the_statistics(tokenizer: Any) -> None:
    rollout = rollout_for(tokenizer, max_turn_tokens=8, max_turns=3)
    out = rollout.to_trl(rollout.play([(ENV_ID, s) for s in range(4)], scripted(tokenizer, ["3", "no", "9"])))
    episodes = out["episode"]
    keep = [[True] * ep.num_turns for ep in episodes]
    keep[1] = [False] * episodes[1].num_turns  # e.g. TRL's mask_truncated_completions dropped episode 1
    tokens, per_turn = rebn_token_advantages(episodes, 0.9, 256, keep=keep, distributed=False)
    kept = [discounted_returns(ep, 0.9) for i, ep in enumerate(episodes) if i != 1]
    expected = np.split(rebn(np.concatenate(kept)), np.cumsum([len(r) for r in kept])[:-1])
    np.testing.assert_allclose(np.concatenate([per_turn[0], *per_turn[2:]]), np.concatenate(expected), atol=1e-9)
    assert not per_turn[1].any() and not tokens[1].any()


def test_timings_add_up(tokenizer: Any) -> None:
    rollout = rollout_for(tokenizer, max_turn_tokens=8, max_turns=2)
    rollout.play([(ENV_ID, 0)], scripted(tokenizer, ["4"]))
    t = rollout.last_timings
    assert isinstance(t, RolloutTimings) and t.generate > 0 and t.env > 0 and t.adapter > 0
    assert t.generated_tokens == 2 * 2  # "4" and the stop token, two turns


def test_collective_backend_gets_the_same_batch_size_on_every_rank(tokenizer: Any) -> None:
    # Another rank still runs 3 episodes for 5 turns; this rank's single episode ends after 2.
    other_rank = [3, 3, 3, 3, 3, 0]
    agreed: list[int] = []

    def most_on_any_rank(local: int) -> int:
        agreed.append(max(local, other_rank[len(agreed)]))
        return agreed[-1]

    generate = scripted(tokenizer, ["5"])
    rollout = rollout_for(tokenizer, max_turn_tokens=4, max_turns=2)
    (session,) = rollout.play([(ENV_ID, 0)], generate, batch_size_across_ranks=most_on_any_rank)
    assert [len(c) for c in generate.calls] == [3, 3, 3, 3, 3]  # padded, and kept in step after it finished
    assert agreed == [3, 3, 3, 3, 3, 0]
    assert session.episode().num_turns == 2


# TRL's vLLM engine returns only the sampled ids (no finish reason): gem reads the ending from them.
@settings(max_examples=40, deadline=None)
@given(ending=st.sampled_from(["stop", "stop-at-limit", "cut"]), max_tokens=st.integers(2, 24), overrun=st.booleans())
def test_no_cut_is_read_as_a_stop_from_trls_vllm_ids(ending: str, max_tokens: int, overrun: bool) -> None:
    tokenizer = build_chat_tokenizer("chatml")
    eos = int(tokenizer.eos_token_id)
    ids = sampled_reply(ending, max_tokens, eos, filler_id=47)
    sent = ids + [47, eos] * overrun  # a server that ran past the limit is cut back to it
    engine = SimpleNamespace(
        max_completion_length=None,
        generate=lambda prompts, images, num_generations: (None, [sent], None, None),
    )
    trainer = SimpleNamespace(vllm_generation=engine, eos_token_ids=[eos], max_completion_length=max_tokens)
    (generation,) = vllm_generate(trainer)([TurnRequest(0, 0, [1, 2], [], max_tokens)])
    expected = {"stop-at-limit": "stop"}.get(ending, ending)
    assert engine_reading(generation, tokenizer, max_tokens) == expected
