"""Multi-agent games through verl: ``gem_multiagent_agent``, verl's v1 storage, the role estimators and the loss.

Per case, each seed is one dataset row whose game the loop plays against the stand-in server
(the suite's scripted policy answering every seat, as a shared model would); verl's v1 worker
stores the seats' samples and verl's ``PPOTrainer._compute_advantage`` computes ``role_rebn``
through gem's hook; the records read back from verl's samples must equal the engine's reference.
The step past the advantage is verl's actor ``ppo_loss`` on those samples (see test_steps).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import hydra
import numpy as np
import pytest
import torch
from gem_verl.agent_loop import GemEnvAgentLoop
from gem_verl.multiagent import GemMultiAgentLoop, make_multiagent_rows
from gem_verl.roles import compute_role_advantage
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.utils.losses import ppo_loss
from verl_harness import Server, Storage, compute_advantage, config, row, store

from gem_core.conformance import CASES
from gem_core.conformance_multiagent import (
    MA_CASES,
    MultiAgentCase,
    MultiAgentRecord,
    assert_multiagent_conformant,
)
from gem_core.errors import ConfigError, RLInputError, UnknownAgent
from gem_core.rl.roles import role_grpo_advantages

SELF_PLAY = MA_CASES[0]
TAKE_ONE = "gem_core.conformance_multiagent:take_one"


def _loop(cfg: Any, server: Server, tokenizer: Any, name: str) -> Any:
    """Instantiate a loop from verl's registry as ``AgentLoopWorker._run_agent_loop`` does."""
    return hydra.utils.instantiate(
        config=_agent_loop_registry[name],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def ma_fields(case: MultiAgentCase, seed: int, index: int, **kwargs: Any) -> dict[str, Any]:
    made = make_multiagent_rows(case.env_id, [seed], opponents=dict(case.opponents), start_index=index, **kwargs)[0]
    return {
        **made,
        "raw_prompt": made["prompt"],
        "index": index,
        "uid": f"uid{index}",
        "session_id": 0,
        "global_steps": 3,
    }


def play_ma(cfg: Any, server: Server, tokenizer: Any, fields: dict[str, Any]) -> list[Any]:
    async def run() -> list[Any]:
        loop = _loop(cfg, server, tokenizer, "gem_multiagent_agent")
        assert isinstance(loop, GemMultiAgentLoop)
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **fields)

    return asyncio.run(run())


def ma_config(case: MultiAgentCase, estimator: str = "role_rebn") -> Any:
    """The harness's trainer config with the case's limits (per seat) and gamma."""
    return config(
        estimator=estimator,
        gamma=case.gamma,
        response_length=case.limits.max_episode_tokens,
        max_turns=case.limits.max_turns,
        max_turn_tokens=case.limits.max_turn_tokens,
    )


def played(case: MultiAgentCase) -> tuple[Storage, Any, list[str], list[Any]]:
    tokenizer = case.tokenizer()
    cfg = ma_config(case)
    episodes = []
    for index, seed in enumerate(case.seeds):
        fields = ma_fields(case, seed, index)
        episodes.append((play_ma(cfg, Server(case, tokenizer), tokenizer, fields), fields))  # type: ignore[arg-type]
    storage = Storage()
    keys = store(storage, cfg, tokenizer, episodes)
    return storage, cfg, keys, episodes


def records(case: MultiAgentCase, estimator: str = "role_rebn") -> list[MultiAgentRecord]:
    storage, _, keys, episodes = played(case)
    # the loop refuses non-role estimators when it is built: the advantage step alone gets the asked one
    _, data = compute_advantage(storage, ma_config(case, estimator), keys)
    advantages = [t.numpy().tolist() for t in data["advantages"].unbind()]
    out = []
    outputs = [o for outs, _ in episodes for o in outs]
    assert len(outputs) == len(keys)
    for output, adv in zip(outputs, advantages, strict=True):
        input_ids = output.prompt_ids + output.response_ids
        start = len(output.prompt_ids)
        loss_mask = [0] * start + list(output.response_mask)
        token_advantages = [0.0] * start + [a if m else 0.0 for a, m in zip(adv, output.response_mask, strict=True)]
        gem = output.extra_fields["gem"]
        out.append(
            MultiAgentRecord(
                start_state_id=gem["start_state_id"],
                actions=gem["actions"],
                rewards=output.extra_fields["turn_scores"],
                terminated=gem["turn_terminated"],
                truncated=gem["turn_truncated"],
                input_ids=input_ids,
                loss_mask=loss_mask,
                token_advantages=token_advantages,
                role=gem["seat"],
            )
        )
    return out


@pytest.mark.parametrize("case", MA_CASES, ids=lambda c: c.name)
def test_gem_multiagent_agent_is_conformant(case: MultiAgentCase) -> None:
    assert_multiagent_conformant(case, records(case))


def test_plain_rebn_pools_the_seats_and_is_caught() -> None:
    with pytest.raises(AssertionError, match="role ReBN"):
        assert_multiagent_conformant(SELF_PLAY, records(SELF_PLAY, estimator="rebn"))


def test_role_grpo_groups_by_row_and_seat() -> None:
    rewards = torch.zeros((4, 3))
    rewards[:, 0] = torch.tensor([1.0, -1.0, 0.0, 1.0])
    mask = torch.ones((4, 3))
    turn_ids = torch.tensor([[0, -1, -1]] * 4)
    seats, uids = ["first", "second", "first", "second"], np.array(["a", "a", "a", "a"], dtype=object)
    advantages, _ = compute_role_advantage(
        rewards, mask, index=uids, turn_ids=turn_ids, seats=seats, estimator="role_grpo"
    )
    want = role_grpo_advantages(
        [np.array([1.0]), np.array([-1.0]), np.array([0.0]), np.array([1.0])], seats, list(uids)
    )
    assert advantages[:, 0].tolist() == pytest.approx([float(w[0]) for w in want])
    assert advantages[0, 0] > 0 > advantages[2, 0]  # first: 1 vs 0 among the firsts (pooled, 1 would be average)


def test_the_loss_step_past_the_rollout_gets_per_seat_gradients() -> None:
    """Verl's actor ppo_loss on the stored seats' samples with role_rebn advantages: finite, non-zero gradient."""
    storage, cfg, keys, _ = played(SELF_PLAY)
    compute_advantage(storage, cfg, keys)
    fields = ["prompts", "responses", "response_mask", "advantages", "rollout_log_probs"]
    stored = storage.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
    old = stored["rollout_log_probs"]
    shift = torch.full((int(old.values().numel()),), 0.01, requires_grad=True)
    rows, start = [], 0
    for prompt, old_row in zip(stored["prompts"].unbind(), old.unbind(), strict=True):
        rows.append(
            torch.cat([torch.zeros(len(prompt) - 1), old_row + shift[start : start + len(old_row)], torch.zeros(1)])
        )
        start += len(old_row)
    data = TensorDict({**{f: stored[f] for f in fields[:4]}, "old_log_probs": old}, batch_size=len(keys))
    tu.assign_non_tensor(
        data, batch_num_tokens=int(data["response_mask"].values().sum()), dp_size=1, global_batch_size=len(keys)
    )
    actor = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
            "loss_scale_factor": None,
            "policy_loss": {"loss_mode": "vanilla"},
            "use_kl_loss": False,
            "global_batch_info": {},
        }
    )
    loss, _ = ppo_loss(actor, {"log_probs": torch.nested.as_nested_tensor(rows, layout=torch.jagged)}, data)
    loss.backward()
    assert shift.grad is not None and torch.isfinite(shift.grad).all() and shift.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"seats": '["referee"]'}, UnknownAgent, "no seat 'referee'"),
        (
            {"seats": '["second"]', "opponents": '{"second": "gem_core.conformance_multiagent:take_one"}'},
            ConfigError,
            "fixed opponent",
        ),
        ({"opponents": '{"referee": "gem_core.conformance_multiagent:take_one"}'}, UnknownAgent, "referee"),
        ({"env_id": "core:NumberGuess-v0"}, ConfigError, "single-agent"),
        ({"seats": "[first"}, ConfigError, "not valid JSON"),
    ],
    ids=["unknown-seat", "opponent-seat", "unknown-opponent-seat", "single-agent-env", "bad-json"],
)
def test_a_forged_row_is_a_typed_error(change: dict[str, str], error: type[Exception], match: str) -> None:
    tokenizer = SELF_PLAY.tokenizer()
    fields = ma_fields(SELF_PLAY, 0, 0)
    fields["extra_info"]["gem"].update(change)
    with pytest.raises(error, match=match):
        play_ma(ma_config(SELF_PLAY), Server(SELF_PLAY, tokenizer), tokenizer, fields)  # type: ignore[arg-type]


def test_a_batch_mixing_seat_samples_with_seatless_ones_is_refused() -> None:
    storage, cfg, keys, _ = played(SELF_PLAY)
    single = CASES[0]
    tokenizer = single.tokenizer()

    async def run() -> list[Any]:
        loop = _loop(cfg, Server(single, tokenizer), tokenizer, "gem_env_agent")
        assert isinstance(loop, GemEnvAgentLoop)
        fields = row(single.env_id, 0, index=9)
        return await loop.run({"temperature": 1.0, "logprobs": True}, **fields)

    fields = row(single.env_id, 0, index=9)
    keys += store(storage, cfg, tokenizer, [(asyncio.run(run()), fields)])[len(keys) :]
    with pytest.raises(RLInputError, match="names no seat"):
        compute_advantage(storage, cfg, keys)


def test_role_estimators_called_without_seats_say_how_to_fix_it() -> None:
    with pytest.raises(ConfigError, match="needs each sample's seat"):
        compute_role_advantage(torch.zeros((1, 2)), torch.ones((1, 2)))


def test_a_seat_the_game_ended_before_it_acted_gets_one_masked_sample() -> None:
    # the first player's first reply is cut (an invalid action: a forfeit), so the second never acts
    case = dataclasses.replace(SELF_PLAY, name="first-forfeits", reply=lambda turn, text: "x" * 80)
    tokenizer = case.tokenizer()
    outputs = play_ma(ma_config(case), Server(case, tokenizer), tokenizer, ma_fields(case, 0, 0))  # type: ignore[arg-type]
    seats = [o.extra_fields["gem"]["seat"] for o in outputs]
    assert seats == ["first", "second"]
    assert sum(outputs[0].response_mask) > 0 and sum(outputs[1].response_mask) == 0


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"algorithm.adv_estimator": "grpo"}, "adv_estimator=grpo"),
        ({"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "episode_return"}, "filter"),
    ],
    ids=["group-estimator", "dapo-filter"],
)
def test_options_that_would_mix_the_seats_are_refused_when_the_loop_is_built(
    overrides: dict[str, Any], match: str
) -> None:
    cfg = ma_config(SELF_PLAY)
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.n", 2)  # what the group options need on their own
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    tokenizer = SELF_PLAY.tokenizer()

    async def build() -> None:  # inside an event loop, as verl's worker builds loops (verl keeps a handle on it;
        # built outside one, verl's constructor makes a loop of its own that nothing closes)
        _loop(cfg, Server(SELF_PLAY, tokenizer), tokenizer, "gem_multiagent_agent")  # type: ignore[arg-type]

    with pytest.raises(hydra.errors.InstantiationException, match=match) as raised:
        asyncio.run(build())
    assert isinstance(raised.value.__cause__, ConfigError)  # hydra wraps the loop's own typed error
