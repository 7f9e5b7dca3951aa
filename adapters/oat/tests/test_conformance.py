"""The conformance suite through oat: actor, learner, then Transitions -> ConformanceRecords.

collect_experience runs with the stand-in vLLM answering the suite's policy, then
GemOatLearner.process_feedback_data and prepare_round write the returns and advantages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gem_oat.convert import episode_from_transitions

from gem_core.conformance import CASES, ConformanceCase, assert_conformant, record_from_episode, scripted_generation
from gem_core.rl.types import start_state_id


def oat_settings(case: ConformanceCase) -> dict[str, Any]:
    """The case's limits and env as oat / GemOatArgs flags."""
    limits = case.limits
    seeds = list(case.seeds)
    assert seeds == list(range(seeds[0], seeds[0] + len(seeds))), "the actor's seeds count up from env_seed"
    return {
        "env_ids": [case.env_id],
        "env_seed": seeds[0],
        "episodes_per_step": len(seeds),
        "generate_max_length": limits.max_turn_tokens,
        "max_episode_tokens": limits.max_episode_tokens or 0,
        "max_turns": limits.max_turns or 0,
        "on_cut": limits.on_cut,
        "system_prompt": limits.system_prompt or "",
        "env_kwargs": _json_arg(dict(case.env_kwargs)),
        "env_wrappers": _json_arg([list(w) if isinstance(w, tuple) else w for w in case.wrappers]),
        "gamma": case.gamma,
        "rollout_batch_size_per_device": 1024,  # no subsampling
        "rollout_batch_size": 1024,
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case: ConformanceCase, tmp_path: Path, make_actor: Any, make_learner: Any) -> None:
    reference_tokenizer = case.tokenizer()

    def policy(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        # The suite's policy, uncut: the stand-in vLLM applies max_tokens and the stop token itself.
        generation = scripted_generation(case, reference_tokenizer, prompt_ids, None)
        return list(generation.token_ids or []), list(generation.logprobs or [])

    settings = oat_settings(case)
    actor = make_actor(tmp_path, reference_tokenizer, policy, **settings)
    episodes, _ = actor.collect_experience()
    learner = make_learner(**settings)
    learner.process_feedback_data(episodes)
    learner.prepare_round()  # the round is this one collect step: ReBN over its transitions

    records = []
    for seed, transitions in zip(case.seeds, episodes, strict=True):
        episode = episode_from_transitions(
            transitions, start_state_id=start_state_id(case.env_id, seed), env_id=case.env_id, seed=seed
        )
        records.append(record_from_episode(episode, [t.info["advantages"] for t in transitions]))
    assert_conformant(case, records)


def _json_arg(value: Any) -> str:
    return json.dumps(value) if value else ""
