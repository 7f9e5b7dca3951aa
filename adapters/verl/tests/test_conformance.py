"""The conformance suite through ``gem_env_agent`` and verl's own storage and advantage code.

Each case's episodes are played by the agent loop against the stand-in server (which
answers the suite's scripted policy as verl's vLLM client would), stored by verl's v1
worker, and their advantages computed by verl's v1 trainer with ``rebn``; the records
read back from verl's samples must equal the engine's reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from verl_harness import Server, Storage, compute_advantage, config, play, row, store

from gem_core.conformance import CASES, ConformanceCase, ConformanceRecord, assert_conformant


def _records(case: ConformanceCase, layout: str) -> list[ConformanceRecord]:
    tokenizer = case.tokenizer()
    cfg = config(case, layout=layout)
    episodes = []
    for index, seed in enumerate(case.seeds):
        fields = row(case.env_id, seed, index=index)
        episodes.append((play(cfg, Server(case, tokenizer), tokenizer, fields), fields))
    storage = Storage()
    keys = store(storage, cfg, tokenizer, episodes)
    _, data = compute_advantage(storage, cfg, keys)
    advantages = [t.numpy().tolist() for t in data["advantages"].unbind()]
    records, position = [], 0
    for outputs, _ in episodes:
        last = outputs[-1]
        input_ids = last.prompt_ids + last.response_ids
        loss_mask = [0] * len(input_ids)
        token_advantages = [0.0] * len(input_ids)
        for out in outputs:  # sequence: one output; transition: one per turn, at its place in the sequence
            start = len(out.prompt_ids)
            assert input_ids[: start + len(out.response_ids)] == out.prompt_ids + out.response_ids
            for offset, (mask, adv) in enumerate(zip(out.response_mask, advantages[position], strict=True)):
                if mask:
                    loss_mask[start + offset] = 1
                    token_advantages[start + offset] = adv
            position += 1
        gem: dict[str, Any] = last.extra_fields["gem"]
        records.append(
            ConformanceRecord(
                start_state_id=gem["start_state_id"],
                actions=gem["actions"],
                rewards=last.extra_fields["turn_scores"],
                terminated=gem["turn_terminated"],
                truncated=gem["turn_truncated"],
                input_ids=input_ids,
                loss_mask=loss_mask,
                token_advantages=token_advantages,
            )
        )
    return records


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gem_env_agent_is_conformant(case: ConformanceCase, layout: str) -> None:
    records = _records(case, layout)
    assert_conformant(case, records)
    assert all(np.isfinite(r.token_advantages).all() for r in records)
