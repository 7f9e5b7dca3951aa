"""gem envs through RL2's own rollout: conformance, RL2's token layout, per-turn rewards, one sequence per episode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gem_rl2.episodes import EPISODE_KEY, default_episodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rl2_harness import RolloutResult, run_rollout, unpadded
from standins import StandInSGLang

from gem_core.conformance import (
    CASES,
    ConformanceCase,
    ConformanceRecord,
    assert_conformant,
    reference_episodes,
    scripted_generation,
)
from gem_core.episode import INVALID_ACTION, Generation

pytestmark = pytest.mark.usefixtures("rl2_process_group", "event_loop_set")

# RL2 0.0.2 has no episode token budget (see docs/rl2.md); its turn limit must cover every case's episodes.
NO_TURN_LIMIT = 32


def play_case(
    case: ConformanceCase, tmp_path: Path, *, stop_in_text: bool = True
) -> tuple[RolloutResult, StandInSGLang]:
    tokenizer = case.tokenizer()

    def policy(input_ids: list[int], max_new_tokens: int | None) -> Generation:
        return scripted_generation(case, tokenizer, input_ids, max_new_tokens)

    with StandInSGLang(tokenizer, policy, ignore_skip_special_tokens=not stop_in_text) as server:
        result = run_rollout(
            tmp_path,
            tokenizer,
            server.url,
            env_id=case.env_id,
            seeds=case.seeds,
            max_turns=case.limits.max_turns or NO_TURN_LIMIT,
            max_new_tokens=case.limits.max_turn_tokens,
            env_kwargs=dict(case.env_kwargs),
            wrappers=case.wrappers,
            extra_overrides=[f"adv.gamma={case.gamma}"],
        )
    return result, server


def records_from_rl2(result: RolloutResult) -> list[ConformanceRecord]:
    """One record per episode, in seed order: the session's turns, RL2's tokens and advantages."""
    episodes = default_episodes().finished
    records = []
    bounds = result.cu_seqs.tolist()
    for index, data in enumerate(result.data_list):
        episode = episodes[data["extra_info"][EPISODE_KEY]]
        first, last = bounds[index], bounds[index + 1]
        assert last - first == 1, "next_state extends state + action: one RL2 sequence per episode"
        seq = unpadded(result.tensor_dict, first)
        records.append(
            ConformanceRecord(
                start_state_id=episode.start_state_id,
                actions=[t.action for t in episode.turns],
                rewards=[t.reward for t in episode.turns],
                terminated=[t.terminated for t in episode.turns],
                truncated=[t.truncated for t in episode.turns],
                input_ids=seq["input_ids"],
                loss_mask=seq["loss_mask"],
                token_advantages=seq["token_advantages"],
            )
        )
    return sorted(records, key=lambda r: int(r.start_state_id.rsplit("=", 1)[1]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case: ConformanceCase, tmp_path: Path) -> None:
    for episode in reference_episodes(case):  # the mapping below is exact only if the budget never binds
        assert episode.metadata["end_reason"] != "budget", "RL2 0.0.2 has no episode token budget to map it onto"
    result, _ = play_case(case, tmp_path)
    assert_conformant(case, records_from_rl2(result))


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: c.name)
def test_without_the_stop_in_the_text_the_finish_reason_still_tells_a_stop_from_a_cut(
    case: ConformanceCase, tmp_path: Path
) -> None:
    # SGLang's default (special tokens skipped): the text has no stop token, SGLang's finish
    # reason and the last sampled id say it stopped, and the bridge still leaves it out once.
    result, _ = play_case(case, tmp_path, stop_in_text=False)
    assert_conformant(case, records_from_rl2(result))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sampled_logprobs_reach_rl2_on_the_generated_tokens(case: ConformanceCase, tmp_path: Path) -> None:
    result, _ = play_case(case, tmp_path)
    by_seed = {int(r["extra_info"]["seed"]): i for i, r in enumerate(result.data_list)}
    for episode in reference_episodes(case):
        seq = unpadded(result.tensor_dict, by_seed[int(episode.seed or 0)])
        got = [lp for lp, m in zip(seq["llm_logps"], seq["action_mask"], strict=True) if m]
        want = [lp for t in episode.turns for lp in (t.action_logprobs or [])]
        assert got == pytest.approx(want, abs=1e-6)


def test_turn_rewards_sit_on_each_turns_last_generated_token(tmp_path: Path) -> None:
    case = CASES[0]
    result, _ = play_case(case, tmp_path)
    episodes = default_episodes().finished
    for index, data in enumerate(result.data_list):
        seq = unpadded(result.tensor_dict, int(result.cu_seqs[index]))
        mask, rewards = seq["loss_mask"], seq["token_rewards"]
        last_tokens = [i for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
        turns = episodes[data["extra_info"][EPISODE_KEY]].turns
        assert [rewards[i] for i in last_tokens] == pytest.approx([t.reward for t in turns])
        assert sum(rewards) == pytest.approx(sum(t.reward for t in turns))


def test_the_launcher_makes_sglang_keep_the_stop_token_in_the_text(tmp_path: Path) -> None:
    _, server = play_case(CASES[0], tmp_path)
    params = server.requests[0]["sampling_params"]
    assert params["skip_special_tokens"] is False
    assert params["no_stop_trim"] is True  # RL2 0.0.2's default


def test_a_cut_generation_reaches_the_env_as_invalid_and_the_episode_goes_on(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "cut-generation")
    result, _ = play_case(case, tmp_path)
    episodes = [default_episodes().finished[d["extra_info"][EPISODE_KEY]] for d in result.data_list]
    assert all(ep.turns[1].action == INVALID_ACTION and ep.turns[1].stop_reason == "length" for ep in episodes)
    assert all(len(ep.turns) > 2 for ep in episodes)


def test_responses_per_prompt_plays_each_row_as_independent_episodes_of_one_start_state(tmp_path: Path) -> None:
    case = CASES[0]
    tokenizer = case.tokenizer()

    def policy(input_ids: list[int], max_new_tokens: int | None) -> Generation:
        return scripted_generation(case, tokenizer, input_ids, max_new_tokens)

    with StandInSGLang(tokenizer, policy) as server:
        result = run_rollout(
            tmp_path,
            tokenizer,
            server.url,
            env_id=case.env_id,
            seeds=(0, 1),
            max_turns=NO_TURN_LIMIT,
            max_new_tokens=24,
            responses_per_prompt=3,
            extra_overrides=["rollout.dynamic_filtering=false"],
        )
    ids = [d["extra_info"][EPISODE_KEY] for d in result.data_list]
    assert len(set(ids)) == 6
    starts: dict[str, int] = {}
    for episode_id in ids:
        start = default_episodes().finished[episode_id].start_state_id
        starts[start] = starts.get(start, 0) + 1
    assert starts == {"core:NumberGuess-v0/seed=0": 3, "core:NumberGuess-v0/seed=1": 3}
    assert default_episodes().running == 0


def _summary(result: RolloutResult) -> dict[str, Any]:
    return {k: tuple(v.shape) for k, v in result.tensor_dict.items()}


def test_rl2_tensor_dict_has_its_usual_fields(tmp_path: Path) -> None:
    result, _ = play_case(CASES[0], tmp_path)
    shapes = _summary(result)
    assert set(shapes) == {
        "states",
        "actions",
        "action_mask",
        "eos_mask",
        "position_ids",
        "llm_logps",
        "rewards",
        "advantages",
    }
    assert len({s for s in shapes.values()}) == 1


FAULTY = {"test:FaultyReset-v0": 0, "test:FaultyStep-v0": 2}


@pytest.fixture
def faulty_ids() -> list[str]:
    """NumberGuess envs that raise ``TimeoutError``: in ``reset``, and in the second ``step``."""
    import gem_core
    from gem_core.testing import faulty_number_guess

    for env_id, fail_at in FAULTY.items():
        gem_core.register(
            env_id, faulty_number_guess, kwargs={"fail_at": fail_at, "error": "TimeoutError"}, override=True
        )
    return list(FAULTY)


def test_a_batch_with_failing_envs_trains_only_on_the_others(
    tmp_path: Path, faulty_ids: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """An env that raises ends its own episode; in RL2's tensors it has no loss weight and no place in ReBN."""
    import RL2.trainer.ppo as ppo
    import torch
    from RL2.utils.functions import aggregate_values

    case = CASES[0]
    tokenizer = case.tokenizer()

    def policy(input_ids: list[int], max_new_tokens: int | None) -> Generation:
        return scripted_generation(case, tokenizer, input_ids, max_new_tokens)

    def rollout(env_ids: list[str], path: Path) -> tuple[RolloutResult, dict[str, float], list[Any]]:
        path.mkdir()
        with StandInSGLang(tokenizer, policy) as server:
            result = run_rollout(
                path,
                tokenizer,
                server.url,
                env_id=env_ids,
                seeds=(1, 2),
                max_turns=NO_TURN_LIMIT,
                max_new_tokens=24,
                extra_overrides=["rollout.dynamic_filtering=false"],
            )
        episodes = [default_episodes().finished[d["extra_info"][EPISODE_KEY]] for d in result.data_list]
        return result, dict(ppo.compute_advantages.last_metrics), episodes

    with caplog.at_level("WARNING", logger="gem_rl2.advantages"):
        mixed, metrics, finished = rollout([case.env_id, *faulty_ids], tmp_path / "mixed")
    clean, clean_metrics, clean_finished = rollout([case.env_id], tmp_path / "clean")
    errors = [ep for ep in finished if ep.metadata["end_reason"] == "error"]
    # every reset failure, and each step failure whose episode lasted to its second step (bisection may win first)
    assert {ep.env_id for ep in errors} == set(faulty_ids) and len(errors) >= 3
    assert metrics == {"gem/env_errors": float(len(errors))} and clean_metrics == {"gem/env_errors": 0.0}
    td = mixed.tensor_dict
    assert not torch.isnan(td["rewards"]).any()

    def per_episode(result: RolloutResult, episodes: list[Any]) -> dict[str, list[float]]:
        out = {}
        for index, episode in enumerate(episodes):
            seq = unpadded(result.tensor_dict, int(result.cu_seqs[index]))
            kept = zip(seq["token_advantages"][1:], seq["action_mask"], strict=True)
            out[episode.start_state_id] = [a for a, m in kept if m]
        return out

    mixed_advantages = per_episode(mixed, finished)
    for start, advantages in per_episode(
        clean, clean_finished
    ).items():  # ReBN's mean and std come from the survivors only
        assert mixed_advantages[start] == pytest.approx(advantages, abs=1e-6)
    for index, episode in enumerate(finished):
        rows = slice(int(mixed.cu_seqs[index]), int(mixed.cu_seqs[index + 1]))
        if episode in errors:  # no token is trained on
            assert not td["action_mask"][rows].any() and not td["advantages"][rows].any()
            assert episode.num_turns == FAULTY[episode.env_id] - (FAULTY[episode.env_id] > 0)

    # RL2's actor loss reduction equals the one without the failed episodes (token level; at sequence level
    # their sequences add 0 to the sum but still count in RL2's divisor, eos_mask)
    def losses(td: dict[str, torch.Tensor]) -> list[float]:
        actions, sequences = float(td["action_mask"].sum()), float(td["eos_mask"].sum())
        return [
            float(aggregate_values(td["advantages"], td["action_mask"], "token", actions, sequences)),
            float(aggregate_values(td["advantages"], td["action_mask"], "sequence", actions, sequences)) * sequences,
        ]

    assert losses(td) == pytest.approx(losses(clean.tensor_dict), abs=1e-5)
    (warning,) = [r.getMessage() for r in caplog.records if "env error" in r.getMessage()]
    assert f"{len(errors)} of 6 episodes" in warning and "test:FaultyReset-v0 seed=1 in reset: TimeoutError" in warning


# ---------------------------------------------------------------------- SGLang's finish reasons: no cut read as a stop

LIMIT = 12  # max_new_tokens of the finish-reason property
TURN_KINDS = ["stop", "stop-at-limit", "cut", "cut-spelling-the-stop", "abort"]


def planned_generation(tokenizer: Any, kind: str) -> Generation:
    """One reply of ``kind``, as SGLang samples it with ``max_new_tokens=LIMIT``."""
    words = tokenizer.encode("My guess is 0" + " 0" * LIMIT, add_special_tokens=False)
    eos = int(tokenizer.eos_token_id)
    spelled = tokenizer.encode("<|im_", add_special_tokens=False) + tokenizer.encode("end|>", add_special_tokens=False)
    ids = {
        "stop": [*words[:6], eos],
        "stop-at-limit": [*words[: LIMIT - 1], eos],  # its stop token is the last allowed: SGLang says "length"
        "cut": words[:LIMIT],
        "cut-spelling-the-stop": [*words[: LIMIT - len(spelled)], *spelled],  # text ends "<|im_end|>", no stop id
        "abort": words[:2],
    }[kind]
    finish = {"stop": "stop", "stop-at-limit": "stop", "abort": "abort"}.get(kind, "length")
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=finish)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.sampled_from(TURN_KINDS), min_size=1, max_size=4), seed=st.integers(0, 50))
def test_sglangs_finish_reason_decides_and_no_cut_is_read_as_a_stop(
    tmp_path_factory: pytest.TempPathFactory, plan: list[str], seed: int
) -> None:
    tokenizer = CASES[0].tokenizer()

    def policy(input_ids: list[int], max_new_tokens: int | None) -> Generation:
        assert max_new_tokens == LIMIT
        turn = tokenizer.decode(input_ids, skip_special_tokens=False).count("<|im_start|>assistant") - 1
        return planned_generation(tokenizer, plan[turn])

    with StandInSGLang(tokenizer, policy) as server:
        result = run_rollout(
            tmp_path_factory.mktemp("finish"),
            tokenizer,
            server.url,
            env_id="core:NumberGuess-v0",
            seeds=[seed],
            max_turns=len(plan),
            max_new_tokens=LIMIT,
            env_kwargs={"max_turns": 10},
        )
    sent = [r["sampling_params"]["max_new_tokens"] for r in server.requests]
    assert sent == [LIMIT] * len(sent)
    episode = default_episodes().finished[result.data_list[0]["extra_info"][EPISODE_KEY]]
    played = plan[: plan.index("abort") + 1] if "abort" in plan else plan
    kept = [kind for kind in played if kind != "abort"]  # an abort ends the episode without a turn
    assert [t.stop_reason for t in episode.turns] == ["length" if k.startswith("cut") else "stop" for k in kept]
    assert [t.action == INVALID_ACTION for t in episode.turns] == [k.startswith("cut") for k in kept]
    assert episode.metadata["end_reason"] == ("abort" if "abort" in plan else "max_turns")
    seq = unpadded(result.tensor_dict, 0)
    assert sum(seq["token_rewards"]) == pytest.approx(sum(t.reward for t in episode.turns))  # none twice
    sampled = [planned_generation(tokenizer, k).token_ids for k in played]
    assert sum(seq["action_mask"]) == sum(len(ids or []) for ids in sampled)  # RL2 keeps every sampled token once
