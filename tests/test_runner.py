from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from gem_core.core import StepReturn
from gem_core.errors import ConfigError
from gem_core.runner import Episode, EpisodeRunner, Turn, run_episodes
from gem_core.testing import GenericTestEnv, NumberGuessEnv
from gem_core.vector import episode_seed


def bisect_policy(messages: list[dict[str, Any]]) -> str:
    """Plays NumberGuess from the chat history alone."""
    low, high = 1, 16
    for msg in messages:
        match = re.match(r"(\d+) is wrong; the number is (higher|lower)", msg["content"])
        if match:
            guess = int(match.group(1))
            low, high = (guess + 1, high) if match.group(2) == "higher" else (low, guess - 1)
    return str((low + high) // 2)


async def async_bisect(messages: list[dict[str, Any]]) -> str:
    await asyncio.sleep(0)
    return bisect_policy(messages)


def test_runs_episodes_and_returns_typed_records() -> None:
    episodes = asyncio.run(
        run_episodes("core:NumberGuess-v0", 5, policy=async_bisect, max_in_flight=3, seed=11, system_prompt="sys")
    )
    assert len(episodes) == 5
    assert sorted(e.metadata["index"] for e in episodes) == [0, 1, 2, 3, 4]
    for ep in episodes:
        assert isinstance(ep, Episode) and all(isinstance(t, Turn) for t in ep.turns)
        assert ep.env_id == "core:NumberGuess-v0"
        assert ep.seed == episode_seed(11, 0, ep.metadata["index"])
        assert ep.start_state_id == f"core:NumberGuess-v0/seed={ep.seed}"
        last = ep.turns[-1]
        assert last.terminated and last.reward == 1.0 and last.info["success"] is True
        assert not any(t.terminated or t.truncated for t in ep.turns[:-1])
        first = ep.turns[0]
        assert first.prompt_messages is not None and first.prompt_messages[0] == {"role": "system", "content": "sys"}
        for prev, turn in zip(ep.turns[:-1], ep.turns[1:], strict=True):
            assert turn.observation == prev.next_observation
            assert turn.prompt_messages is not None and prev.prompt_messages is not None
            # the whole history, growing by the assistant message and the env's reply
            assert turn.prompt_messages[: len(prev.prompt_messages)] == prev.prompt_messages
            assert turn.prompt_messages[len(prev.prompt_messages) :] == [
                {"role": "assistant", "content": prev.action},
                {"role": "user", "content": prev.next_observation},
            ]
        assert len(ep.metadata["policy_s"]) == len(ep.metadata["env_s"]) == len(ep.turns)
        assert ep.metadata["wall_s"] >= sum(ep.metadata["env_s"])


def test_same_seed_same_episodes_and_groups_share_a_start_state() -> None:
    def run(seed: int) -> list[tuple[str, list[str]]]:
        eps = asyncio.run(
            run_episodes(NumberGuessEnv, 6, policy=async_bisect, seed=seed, group_size=2, max_in_flight=4)
        )
        eps.sort(key=lambda e: e.metadata["index"])
        return [(e.start_state_id, [t.observation for t in e.turns]) for e in eps]

    first, second, other = run(3), run(3), run(4)
    assert first == second and first != other
    assert [s for s, _ in first[0::2]] == [s for s, _ in first[1::2]]  # pairs share a seed
    assert len({s for s, _ in first}) == 3


def length_env(env: GenericTestEnv, action: str) -> StepReturn:
    # episode length 1..6 from the env's seeded RNG: a mix of short and long episodes
    if env.t == 1:
        env.length = int(env.np_random.integers(1, 7))  # type: ignore[attr-defined]
    return f"t{env.t}", 1.0, env.t >= env.length, False, {}  # type: ignore[attr-defined]


def test_in_flight_bound_and_no_episode_thrown_away_at_batch_boundaries() -> None:
    active = 0
    peak = 0
    calls = 0

    async def policy(messages: list[dict[str, Any]]) -> str:
        nonlocal active, peak, calls
        active += 1
        calls += 1
        peak = max(peak, active)
        await asyncio.sleep(0.001)
        active -= 1
        return "go"

    async def main() -> None:
        runner = EpisodeRunner(lambda: GenericTestEnv(step_func=length_env), policy=policy, max_in_flight=4, seed=0)
        returned: list[Episode] = []
        for _ in range(3):
            batch = await runner.collect(5)
            assert len(batch) == 5 and all(e.turns[-1].terminated for e in batch)
            returned += batch
            paused_calls = calls
            await asyncio.sleep(0.02)
            assert calls == paused_calls  # episodes left over wait for the next collect
            # every started episode is either returned or still in flight: none was dropped
            assert runner._started == len(returned) + runner.in_flight + len(runner._done)
        assert peak == 4  # never more than max_in_flight, and the pool is used fully
        assert len({e.metadata["index"] for e in returned}) == 15
        assert runner._started <= 15 + 4  # episodes are started only as needed
        # long episodes started in one batch and finished in a later one are kept
        assert any(e.metadata["finished_in_batch"] > e.metadata["started_in_batch"] for e in returned)
        await runner.aclose()

    asyncio.run(main())


def test_max_turns_truncates_the_last_turn() -> None:
    async def never_right(messages: list[dict[str, Any]]) -> str:
        return "no number here"

    (episode,) = asyncio.run(run_episodes(NumberGuessEnv, 1, policy=never_right, max_turns=2, seed=0))
    assert len(episode.turns) == 2 and episode.turns[-1].truncated and not episode.turns[-1].terminated


def test_env_list_is_the_pool() -> None:
    envs = [NumberGuessEnv(), NumberGuessEnv()]
    episodes = asyncio.run(run_episodes(envs, 4, policy=async_bisect, max_in_flight=8, seed=1))
    assert len(episodes) == 4 and envs[0].target is not None and envs[1].target is not None


def test_policy_errors_surface_with_the_episode() -> None:
    async def broken(messages: list[dict[str, Any]]) -> str:
        raise RuntimeError("server down")

    async def main() -> None:
        async with EpisodeRunner(NumberGuessEnv, policy=broken, seed=0) as runner:
            with pytest.raises(RuntimeError, match="server down") as caught:
                await runner.collect(2)
            assert any("in episode" in note for note in getattr(caught.value, "__notes__", []))

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of policy"),
        ({"policy": async_bisect, "token_policy": async_bisect}, "exactly one of policy"),
        ({"token_policy": async_bisect}, "needs a tokenizer"),
        ({"policy": async_bisect, "max_in_flight": 0}, "max_in_flight must be >= 1"),
    ],
    ids=["no-policy", "two-policies", "token-without-tokenizer", "zero-in-flight"],
)
def test_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EpisodeRunner(NumberGuessEnv, **kwargs)


# ------------------------------------------------------------------ token in, token out


@pytest.fixture(scope="module")
def chat_tokenizer() -> Any:
    pytest.importorskip("transformers")
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer()


@pytest.mark.parametrize("with_logprobs", [False, True], ids=["ids", "ids-and-logprobs"])
def test_token_policy_sees_exactly_the_rendered_conversation(chat_tokenizer: Any, with_logprobs: bool) -> None:
    tok = chat_tokenizer
    seen: list[list[int]] = []

    async def token_policy(prompt_ids: list[int]) -> Any:
        seen.append(prompt_ids)
        text = tok.decode(prompt_ids, skip_special_tokens=False)
        messages = [
            {"role": role, "content": content}
            for role, content in re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", text, flags=re.S)
        ]
        ids = [*tok.encode(bisect_policy(messages), add_special_tokens=False), tok.eos_token_id]
        return (ids, [-0.5] * len(ids)) if with_logprobs else ids

    (episode,) = asyncio.run(
        run_episodes(NumberGuessEnv, 1, token_policy=token_policy, tokenizer=tok, seed=5, system_prompt="sys")
    )
    assert episode.turns[-1].terminated and len(episode.turns) >= 2
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for turn in episode.turns:
        messages.append({"role": "user", "content": turn.observation})
        full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert turn.prompt_token_ids == tok.encode(full, add_special_tokens=False)
        assert turn.action_token_ids is not None and turn.action_token_ids[-1] == tok.eos_token_id
        assert turn.action == tok.decode(turn.action_token_ids, skip_special_tokens=True)
        assert (turn.action_logprobs is not None) == with_logprobs
        assert turn.prompt_messages is None
        messages.append({"role": "assistant", "content": turn.action})
    assert seen == [t.prompt_token_ids for t in episode.turns]
