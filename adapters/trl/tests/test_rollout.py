"""GemRollout without a trainer: episode loop, token layout, limits, the vLLM path, ReBN across ranks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from gem_trl import GemRollout, build_tiny_tokenizer, episode_key, make_prompt_dataset, parse_episode_key
from gem_trl.rollout import RolloutTimings

from gem_core.errors import ConfigError, EnvNotFound
from gem_core.rl.advantages import rebn
from gem_core.rl.layouts import render_ids
from gem_core.rl.returns import discounted_returns

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def scripted(tokenizer: Any, answers: list[str], *, stop: bool = True) -> Any:
    """A stand-in for the model: turn k of every episode answers ``answers[k]`` (then the stop token)."""
    calls: list[list[list[int]]] = []

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list[float] | None]]:
        calls.append([list(c) for c in contexts])
        out = []
        for context in contexts:
            turn = (
                context.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) // 2 - 1
            )  # user + assistant header per turn
            ids = tokenizer.encode(answers[min(turn, len(answers) - 1)], add_special_tokens=False)
            if stop:
                ids = [*ids, tokenizer.eos_token_id]
            out.append((ids[:max_new_tokens], None))
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


def test_episode_is_laid_out_token_in_token_out(tokenizer: Any) -> None:
    rollout = GemRollout(max_turn_tokens=8, env_kwargs={"max_turns": 4})
    generate = scripted(tokenizer, ["guess 1", "no idea", "2"])
    (episode,) = rollout.play([(ENV_ID, 3)], generate, tokenizer, max_completion_length=512)
    out = rollout.to_trl([episode])
    # turn 0 saw exactly the templated first observation
    first = [{"role": "user", "content": episode.turns[0].observation}]
    assert out["prompt_ids"][0] == render_ids(tokenizer, first, add_generation_prompt=True)
    # every turn was prompted with the full sequence so far: prompt + completion up to its span
    full = out["prompt_ids"][0] + out["completion_ids"][0]
    prompt_length = len(out["prompt_ids"][0])
    for turn, (start, end) in zip(episode.turns, out["turn_spans"][0], strict=True):
        assert turn.prompt_token_ids == full[: prompt_length + start]
        assert out["completion_ids"][0][start:end] == turn.action_token_ids
    mask = out["env_mask"][0]
    assert sum(mask) == sum(len(t.action_token_ids or []) for t in episode.turns)
    assert [i for i, m in enumerate(mask) if m] == [i for a, b in out["turn_spans"][0] for i in range(a, b)]
    assert out["turn_rewards"][0] == [t.reward for t in episode.turns]
    assert episode.turns[1].reward == pytest.approx(-0.1)  # "no idea" is a format error
    assert out["logprobs"] is None


def test_generation_is_batched_across_running_episodes(tokenizer: Any) -> None:
    rollout = GemRollout(max_turn_tokens=8, max_turns=3, env_kwargs={"max_turns": 5})
    generate = scripted(tokenizer, ["100"])
    episodes = rollout.play([(ENV_ID, s) for s in range(5)], generate, tokenizer, max_completion_length=512)
    assert [len(c) for c in generate.calls] == [5, 5, 5]  # one call per turn, all episodes together
    assert all(ep.num_turns == 3 and not ep.terminated for ep in episodes)
    assert rollout.to_trl(episodes)["truncated"] == [True] * 5
    assert rollout.last_timings.turns == 3


def test_finished_episodes_leave_the_batch(tokenizer: Any) -> None:
    # guessing 1, 2, ..., 8 finds every target in [1, 8] at turn `target`
    rollout = GemRollout(max_turn_tokens=8, env_kwargs={"high": 8, "max_turns": 8})
    generate = scripted(tokenizer, ["1", "2", "3", "4", "5", "6", "7", "8"])
    episodes = rollout.play([(ENV_ID, s) for s in range(12)], generate, tokenizer, max_completion_length=4096)
    assert all(ep.terminated and ep.turns[-1].info["success"] for ep in episodes)
    sizes = [len(c) for c in generate.calls]
    assert sizes == [sum(ep.num_turns > turn for ep in episodes) for turn in range(len(sizes))]
    assert sizes[-1] < sizes[0] == 12


def test_completion_budget_ends_episode_on_model_tokens(tokenizer: Any) -> None:
    rollout = GemRollout(max_turn_tokens=8, env_kwargs={"max_turns": 10})
    generate = scripted(tokenizer, ["nothing"], stop=False)
    (episode,) = rollout.play([(ENV_ID, 1)], generate, tokenizer, max_completion_length=80)
    out = rollout.to_trl([episode])
    assert len(out["completion_ids"][0]) <= 80
    assert episode.metadata["cut_by_budget"]
    assert out["env_mask"][0][-1] == 1  # the completion ends with the model's own tokens
    assert 1 < episode.num_turns < 10


def test_bad_settings_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_turn_tokens"):
        GemRollout(max_turn_tokens=0)
    with pytest.raises(ConfigError, match="max_turns"):
        GemRollout(max_turns=0)
    with pytest.raises(ValueError, match="gamma"):
        GemRollout(gamma=1.5)


class FakeVLLMEngine:
    """Stands in for TRL's VLLMGeneration (needs a GPU): answers in its output format, records each call."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.max_completion_length = 4096
        self.seen_limits: list[int] = []

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int) -> tuple[Any, ...]:
        assert images is None and num_generations == 1
        self.seen_limits.append(self.max_completion_length)
        completions, logprobs = [], []
        for _ in prompts:
            ids = [*self.tokenizer.encode("12", add_special_tokens=False), self.tokenizer.eos_token_id]
            ids = ids[: self.max_completion_length]
            completions.append(ids)
            logprobs.append([[-0.5 - i, -9.0] for i in range(len(ids))])  # top-k lists, sampled token first
        return prompts, completions, logprobs, None


def test_vllm_path_passes_turn_limit_and_keeps_sampling_logprobs(tokenizer: Any) -> None:
    engine = FakeVLLMEngine(tokenizer)
    logged: dict[str, float] = {}
    trainer = SimpleNamespace(
        processing_class=tokenizer,
        use_vllm=True,
        vllm_generation=engine,
        eos_token_ids=[tokenizer.eos_token_id],
        max_completion_length=256,
        chat_template_kwargs={},
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
        assert on_generated[:3] == [-0.5, -1.5, -2.5]
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    assert out["completion_ids"][0] == out["completion_ids"][1]  # same key, same deterministic answers
    assert set(logged) >= {"gem/episode_return", "gem/time_generate", "gem/time_env", "gem/time_adapter"}


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


def test_timings_add_up(tokenizer: Any) -> None:
    rollout = GemRollout(max_turn_tokens=8, max_turns=2)
    rollout.play([(ENV_ID, 0)], scripted(tokenizer, ["4"]), tokenizer, max_completion_length=512)
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
    rollout = GemRollout(max_turn_tokens=4, max_turns=2)
    (episode,) = rollout.play([(ENV_ID, 0)], generate, tokenizer, 512, batch_size_across_ranks=most_on_any_rank)
    assert [len(c) for c in generate.calls] == [3, 3, 3, 3, 3]  # padded, and kept in step after it finished
    assert agreed == [3, 3, 3, 3, 3, 0]
    assert episode.num_turns == 2
