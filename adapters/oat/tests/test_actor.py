"""GemOatActor.collect_experience through oat's real actor, Transition, plasma IPC and feedback collector."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import pytest
from oat.types import Transition

from gem_core.episode import INVALID_ACTION
from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def guesser(tokenizer: Any, reply: str = "My guess is 8") -> Any:
    """A policy that always answers ``reply`` then the stop token, with made-up logprobs."""

    def policy(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        ids = [*tokenizer.encode(reply, add_special_tokens=False), int(tokenizer.eos_token_id)]
        return ids, [-0.5 - 0.01 * i for i in range(len(ids))]

    return policy


def test_collect_experience_returns_oat_transitions_with_token_in_token_out(
    tmp_path: Path, tokenizer: Any, make_actor: Any
) -> None:
    actor = make_actor(tmp_path, tokenizer, guesser(tokenizer), env_ids=[ENV_ID], episodes_per_step=3, max_turns=4)
    episodes, info = actor.collect_experience()
    assert len(episodes) == 3
    for episode in episodes:
        assert episode and all(isinstance(t, Transition) for t in episode)
        for previous, current in itertools.pairwise(episode):
            # Each prompt extends the previous prompt and its sampled ids: token in, token out.
            head = list(previous.prompt_ids) + list(previous.response_ids)
            assert list(current.prompt_ids[: len(head)]) == head
        for t in episode:
            assert t.response_ids[-1] == tokenizer.eos_token_id
            assert len(t.response_logprobs) == len(t.response_ids)
            assert t.action == "My guess is 8" == t.response
            assert not t.response_is_truncated and t.action_is_formatted
            assert t.prompt == tokenizer.decode(t.prompt_ids, skip_special_tokens=False)
            assert set(t.info) == {"gem/turn", "gem/terminated", "gem/truncated"}
        assert [t.done for t in episode] == [False] * (len(episode) - 1) + [True]
    assert info["actor/gem_episodes"] == 3.0
    assert info["actor/gem_dropped_episodes"] == 0.0


def test_one_vllm_call_per_turn_for_all_running_episodes(tmp_path: Path, tokenizer: Any, make_actor: Any) -> None:
    actor = make_actor(tmp_path, tokenizer, guesser(tokenizer), env_ids=[ENV_ID], episodes_per_step=4, max_turns=3)
    episodes, _ = actor.collect_experience()
    calls = actor.llm.calls
    assert len(calls) == max(len(ep) for ep in episodes)
    assert calls[0] == 4 and calls == sorted(calls, reverse=True)
    assert sum(calls) == sum(len(ep) for ep in episodes)


def test_seeds_count_up_across_steps_and_envs(tmp_path: Path, tokenizer: Any, make_actor: Any) -> None:
    actor = make_actor(
        tmp_path,
        tokenizer,
        guesser(tokenizer),
        env_ids=[ENV_ID, "core:NumberGuess-v0-hard"],
        episodes_per_step=2,
        env_seed=100,
        max_turns=1,
    )
    actor.collect_experience()
    first = [s.start_state_id for s in actor.last_sessions]
    actor.collect_experience()
    second = [s.start_state_id for s in actor.last_sessions]
    assert first == [f"{ENV_ID}/seed=100", "core:NumberGuess-v0-hard/seed=101"]
    assert second == [f"{ENV_ID}/seed=102", "core:NumberGuess-v0-hard/seed=103"]


def test_cut_generation_is_an_invalid_action(tmp_path: Path, tokenizer: Any, make_actor: Any) -> None:
    long_reply = guesser(tokenizer, "Let me think about this for a very long time before I guess 8")
    actor = make_actor(tmp_path, tokenizer, long_reply, env_ids=[ENV_ID], episodes_per_step=1, generate_max_length=6)
    episodes, info = actor.collect_experience()
    first = episodes[0][0]
    assert len(first.response_ids) == 6 and first.response_ids[-1] != tokenizer.eos_token_id
    assert first.response_is_truncated and not first.action_is_formatted
    assert first.action == INVALID_ACTION
    assert info["actor/gem_cut_turns"] >= 1


def test_step_ships_episodes_through_plasma_to_oats_collector(
    tmp_path: Path, tokenizer: Any, plasma_server: Any, gloo_group: None, make_actor: Any
) -> None:
    import torch.distributed as dist
    from oat.algorithms.ppo_multiturn import MultiTurnFeedbackCollector
    from oat.utils.ipc import PlasmaShmClient

    actor = make_actor(
        tmp_path, tokenizer, guesser(tokenizer), plasma_server, env_ids=[ENV_ID], episodes_per_step=2, max_turns=2
    )
    collector = MultiTurnFeedbackCollector(actor.args, [actor], PlasmaShmClient(plasma_server))
    episodes, metrics = collector.collect_feedback([""], [""], [""], dist.group.WORLD)
    assert [len(ep) for ep in episodes] == [len(s.turns) for s in actor.last_sessions]
    assert all(isinstance(t, Transition) for ep in episodes for t in ep)
    sent = actor.last_sessions[0].turns[0]
    assert episodes[0][0].prompt_ids == sent.prompt_token_ids
    assert episodes[0][0].rewards == sent.reward
    assert metrics["actor/num_transitions"] == sum(len(ep) for ep in episodes)
    # oat's step adds episode statistics to every transition's info; its collector averages them.
    assert "actor/mean_episode_return" in metrics and "actor/gem_episodes" in metrics


@pytest.mark.parametrize("slack", [-1, 0, 1], ids=["cut-before-stop", "stop-at-the-cap", "room-to-spare"])
def test_a_reply_ending_exactly_at_the_cap_is_complete(
    tmp_path: Path, tokenizer: Any, slack: int, make_actor: Any
) -> None:
    reply = "My guess is 8"
    length = len(tokenizer.encode(reply, add_special_tokens=False)) + 1  # with the stop token
    actor = make_actor(
        tmp_path,
        tokenizer,
        guesser(tokenizer, reply),
        env_ids=[ENV_ID],
        episodes_per_step=1,
        max_turns=1,
        generate_max_length=length + slack,
    )
    outputs = actor.llm.generate(prompt_token_ids=[[1, 2]], sampling_params=actor.sampling_params, use_tqdm=False)
    # vLLM's V1 engine reports "length" when the stop token is the last allowed token.
    assert outputs[0].outputs[0].finish_reason == ("stop" if slack > 0 else "length")
    episodes, _ = actor.collect_experience()
    first = episodes[0][0]
    assert first.response_is_truncated is (slack < 0)
    assert first.action == (INVALID_ACTION if slack < 0 else reply)


FAULTY = {"test:FaultyReset-v0": 0, "test:FaultyStep-v0": 2}


@pytest.fixture
def faulty_ids() -> list[str]:
    """NumberGuess envs that raise ``TimeoutError``: in ``reset``, and in the second ``step``."""
    import gem_core
    from gem_core.testing import faulty_number_guess

    for env_id, fail_at in FAULTY.items():
        kwargs = {"fail_at": fail_at, "error": "TimeoutError"}
        gem_core.register(env_id, faulty_number_guess, kwargs=kwargs, override=True)
    return list(FAULTY)


def test_a_step_with_failing_envs_ships_only_the_others(
    tmp_path: Path,
    tokenizer: Any,
    make_actor: Any,
    make_learner: Any,
    faulty_ids: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An env that raises ends its own episode; it never reaches the learner, so ReBN runs over the others only."""
    import numpy as np

    from gem_core.rl.advantages import rebn_advantages

    actor = make_actor(
        tmp_path, tokenizer, guesser(tokenizer), env_ids=[ENV_ID, *faulty_ids], episodes_per_step=6, max_turns=4
    )
    with caplog.at_level("WARNING", logger="gem_oat.actor"):
        episodes, info = actor.collect_experience()
    sessions = actor.last_sessions
    failed = [s for s in sessions if s.end_reason == "error"]
    assert {s.env_id for s in failed} == set(faulty_ids) and len(failed) >= 3
    assert all(s.episode().metadata["error_type"] == "TimeoutError" for s in failed)
    assert all(len(s.turns) == (0 if s.env_id.endswith("Reset-v0") else 1) for s in failed)
    assert info["actor/gem_env_errors"] == float(len(failed)) == info["actor/gem_end_error"]
    survivors = [s for s in sessions if s.end_reason != "error"]
    assert [[t.prompt_ids for t in ep] for ep in episodes] == [[t.prompt_token_ids for t in s.turns] for s in survivors]

    learner = make_learner(gamma=0.9)
    learner.process_feedback_data(episodes)
    learner.prepare_round()
    want = rebn_advantages([np.array([t.rewards for t in ep]) for ep in episodes], 0.9)
    got = [[t.info["advantages"] for t in ep] for ep in episodes]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(list(w), abs=1e-9)
    (warning,) = [r.getMessage() for r in caplog.records if "env error" in r.getMessage()]
    assert f"{len(failed)} of 6 episodes" in warning and "test:FaultyReset-v0 seed=1 in reset: TimeoutError" in warning


def test_on_env_error_raise_fails_the_step(
    tmp_path: Path, tokenizer: Any, make_actor: Any, faulty_ids: list[str]
) -> None:
    actor = make_actor(
        tmp_path, tokenizer, guesser(tokenizer), env_ids=[faulty_ids[0]], episodes_per_step=2, on_env_error="raise"
    )
    with pytest.raises(TimeoutError, match="injected failure in reset"):
        actor.collect_experience()


@pytest.mark.parametrize("survivors", [0, 1, 3], ids=["no-episode", "one-episode", "three-episodes"])
def test_a_step_with_zero_one_or_odd_episodes_reaches_the_learner(
    survivors: int,
    tmp_path: Path,
    tokenizer: Any,
    plasma_server: Any,
    gloo_group: None,
    make_actor: Any,
    make_learner: Any,
    faulty_ids: list[str],
) -> None:
    """Every env but ``survivors`` fails in reset: oat's step, plasma, gem's collector, the learner's round."""
    import torch.distributed as dist
    from gem_oat.learner import GemOatFeedbackCollector
    from oat.algorithms.ppo_multiturn import MultiTurnFeedbackCollector
    from oat.utils.ipc import PlasmaShmClient

    env_ids = [ENV_ID] * survivors + [faulty_ids[0]] * (4 - survivors)
    actor = make_actor(
        tmp_path, tokenizer, guesser(tokenizer), plasma_server, env_ids=env_ids, episodes_per_step=4, max_turns=1
    )
    collector = GemOatFeedbackCollector(actor.args, [actor], PlasmaShmClient(plasma_server))
    episodes, metrics = collector.collect_feedback([""], [""], [""], dist.group.WORLD)
    assert len(episodes) == survivors and metrics["actor/num_transitions"] == survivors
    if survivors:
        assert metrics["actor/mean_episode_len"] == 1.0 and metrics["actor/gem_env_errors"] == 4 - survivors
    else:  # oat's own collector averages the transitions' info (NaN means, then a crash with none)
        oats = MultiTurnFeedbackCollector(actor.args, [actor], PlasmaShmClient(plasma_server))
        with warnings.catch_warnings(), pytest.raises((TypeError, ValueError)):
            warnings.simplefilter("ignore", RuntimeWarning)
            oats.get_metrics(0.0, [])
    learner = make_learner(gamma=0.9)
    learner.process_feedback_data(episodes)
    batch = learner.prepare_round()
    assert batch == [t for ep in episodes for t in ep]
    from gem_core.rl.advantages import rebn

    want = rebn([t.info["returns"] for t in batch])
    assert [t.info["advantages"] for t in batch] == pytest.approx(list(want), abs=1e-12)
