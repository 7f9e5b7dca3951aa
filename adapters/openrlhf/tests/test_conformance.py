"""The conformance suite through OpenRLHF: gem's executor in OpenRLHF's rollout actor, ReBN in its experience maker.

Per case: every seed is one prompt row (``gem-openrlhf-dataset``'s JSON), played by
OpenRLHF's ``RolloutRayActor.generate_responses`` around a stand-in vLLM engine that
answers the suite's scripted policy; the responses become ``Experience`` objects in
OpenRLHF's sample generator, are batched (with padding) by its experience maker, and
get advantages from ``compute_advantages_and_returns`` with gem's ReBN installed.
The records are read back from those ``Experience`` tensors.

Mapping of the case's limits onto OpenRLHF's settings: ``max_turn_tokens`` and
``max_turns`` are executor settings (``--gem.config``); ``max_episode_tokens`` becomes
``--data.max_len`` = first-prompt length + ``max_episode_tokens`` (the cases' first
prompts have one length per case); ``gamma`` is ``--algo.advantage.gamma``.
"""

from __future__ import annotations

import json

import pytest
from gem_openrlhf.dataset import EpisodeRequest
from gem_openrlhf.executor import CONFIG_ENV, EpisodeLabel
from harness import (
    experience_maker_for,
    generate_responses,
    rollout_actor,
    sampling_params,
    to_experiences,
    trainer_args,
)
from standins import StandInLLM

from gem_core.conformance import (
    CASES,
    ConformanceCase,
    ConformanceRecord,
    assert_conformant,
    reference_episodes,
    scripted_generation,
)


def max_len_for(case: ConformanceCase) -> int:
    lengths = {len(ep.turns[0].prompt_token_ids or []) for ep in reference_episodes(case)}
    assert len(lengths) == 1, f"{case.name}: first prompts differ in length ({lengths}); one --data.max_len cannot map"
    assert case.limits.max_episode_tokens is not None
    return lengths.pop() + case.limits.max_episode_tokens


def records_from_experiences(experiences: list) -> list[ConformanceRecord]:
    records = []
    for experience in experiences:
        for row, raw in enumerate(experience.labels):
            label = EpisodeLabel.parse(raw)
            length = int(experience.attention_mask[row].sum())
            turns = len(label.turn_rewards)
            records.append(
                ConformanceRecord(
                    start_state_id=label.start_state_id,
                    actions=label.turn_actions,
                    rewards=label.turn_rewards,
                    terminated=[False] * (turns - 1) + [label.terminated],
                    truncated=[False] * (turns - 1) + [label.truncated],
                    input_ids=experience.sequences[row, :length].tolist(),
                    # OpenRLHF's action mask and advantages score token p at index p - 1
                    loss_mask=[0, *experience.action_mask[row, : length - 1].int().tolist()],
                    token_advantages=[0.0, *experience.advantages[row, : length - 1].double().tolist()],
                )
            )
    return records


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_openrlhf_adapter_conforms(case: ConformanceCase, rebn_patched, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = case.tokenizer()
    settings = {
        "max_turns": case.limits.max_turns,
        "max_turn_tokens": case.limits.max_turn_tokens,
        "on_cut": case.limits.on_cut,
        "env_kwargs": dict(case.env_kwargs),
        "wrappers": [list(w) if isinstance(w, tuple) else w for w in case.wrappers],
    }
    monkeypatch.setenv(CONFIG_ENV, json.dumps(settings))
    llm = StandInLLM(tokenizer, lambda ids, max_tokens: scripted_generation(case, tokenizer, ids, max_tokens))
    actor = rollout_actor(llm)
    max_len = max_len_for(case)
    responses = []
    for seed in case.seeds:
        prompt = EpisodeRequest(env_id=case.env_id, seed=seed).to_prompt()
        responses += generate_responses(actor, prompt, tokenizer, max_len=max_len, params=sampling_params())

    args = trainer_args(gamma=case.gamma, micro_batch_size=3)
    maker = experience_maker_for(args, tokenizer)
    batches = maker.split_rollout_samples(to_experiences(responses, args, max_len))
    experiences = maker.compute_advantages_and_returns(batches)

    assert_conformant(case, records_from_experiences(experiences))
    assert all(max_tokens >= 1 for _, params in llm.calls for max_tokens in [params.max_tokens])
