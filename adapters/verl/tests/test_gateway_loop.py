"""``gem_gateway_agent``: episodes a black-box harness plays through gem gateway, through verl's step.

The harness is the ``openai`` SDK's tool loop (``gateway_harnesses``) playing a gem env over
loopback HTTP; the policy is a tiny random Qwen2 sampling with ``model.generate`` behind a
server client in verl's ``TokenOutput`` format (verl's own servers need a GPU engine). The
loop is built from verl's registry, its samples stored by verl's v1 worker code, advantages
computed by verl's ``_compute_advantage`` (``rebn``), and the policy loss (verl's
``ppo_loss``) on the model's own log-probs of the stored sequences is back-propagated and
stepped. Everything is checked against the server's record of each request and reply.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import hydra
import numpy as np
import pytest
import torch
from gem_verl.gateway_loop import GATEWAY_AGENT_NAME, GatewayAgentLoop
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput
from verl.workers.utils.losses import ppo_loss
from verl_harness import Storage, compute_advantage, config, padded, row, store

from gem_core.errors import ConfigError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_models import build_tiny_model
from gem_core.testing_tokenizers import build_chat_tokenizer

# slow: a tiny model samples every call of 9 harness episodes (about 1-2 minutes here)
pytestmark = pytest.mark.slow

ENV_ID = "core:NumberGuess-v0"
GAMMA = 0.9


class TinyServer:
    """verl's ``LLMServerClient`` over a tiny model's ``generate`` (sampled, with the sampled tokens' logprobs)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.log: list[tuple[list[int], list[int], list[float]]] = []

    def _sample(self, prompt_ids: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
        with torch.no_grad():
            out = self.model.generate(
                input_ids=torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                do_sample=True,
                max_new_tokens=max_tokens,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self.tokenizer.eos_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, ids, strict=True)]
        return ids, logprobs

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        ids, logprobs = await asyncio.to_thread(self._sample, list(prompt_ids), int(sampling_params["max_tokens"]))
        self.log.append((list(prompt_ids), ids, logprobs))
        steps = {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3}
        return TokenOutput(
            token_ids=ids, log_probs=logprobs, stop_reason="completed", num_preempted=0, extra_fields=steps
        )


def make_loop(cfg: Any, server: Any, tokenizer: Any) -> GatewayAgentLoop:
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry[GATEWAY_AGENT_NAME],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, GatewayAgentLoop)
    return loop


def rollout(harness: str, seeds: list[int]) -> tuple[Any, Any, Any, Storage, list[tuple[list[Any], dict[str, Any]]]]:
    """Play one row per seed with ``harness`` through the loop; store the samples with verl's v1 worker."""
    tokenizer = build_chat_tokenizer("chatml_tools")
    model = build_tiny_model(tokenizer, seed=0, generation_tokens=True)
    server = TinyServer(model, tokenizer)
    cfg = config(layout="sequence", gamma=GAMMA, response_length=256, max_turn_tokens=8, harness=harness)
    played = []

    async def run(fields: dict[str, Any]) -> list[Any]:
        loop = make_loop(cfg, server, tokenizer)
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **fields)

    for index, seed in enumerate(seeds):
        fields = {**row(ENV_ID, seed, index=index), "agent_name": GATEWAY_AGENT_NAME}
        played.append((asyncio.run(run(fields)), fields))
    storage = Storage()
    store(storage, cfg, tokenizer, played)
    return model, server, cfg, storage, played


@pytest.fixture(scope="module")
def summarised() -> Any:
    return rollout("gateway_harnesses:summarising", [0, 1, 2])


@pytest.mark.parametrize("harness", ["append_only", "summarising"])
def test_every_sampled_token_is_in_exactly_one_sample_in_its_context(harness: str) -> None:
    _, server, _, _, played = rollout(f"gateway_harnesses:{harness}", [0, 1])
    calls = iter(server.log)
    for outputs, _ in played:
        summary = outputs[0].extra_fields["gem"]
        assert len(outputs) == 1 + len(summary["branch_points"])
        assert bool(summary["branch_points"]) == (harness == "summarising" and summary["num_turns"] > 1)
        for output in outputs:
            context = output.prompt_ids + output.response_ids
            mask = np.array(output.response_mask, dtype=bool)
            trained, logprobs = [], []
            for local in sorted(set(output.turn_ids) - {-1}):
                prompt, ids, lps = next(calls)
                # the call's prompt and reply, as the server got and sampled them, sit in this sample
                assert context[: len(prompt) + len(ids)] == prompt + ids
                trained += ids
                logprobs += lps
                assert [t for t, i in zip(output.response_ids, output.turn_ids, strict=True) if i == local] == ids
            assert np.array(output.response_ids)[mask].tolist() == trained
            assert np.array(output.response_logprobs)[mask].tolist() == pytest.approx(logprobs)
    assert next(calls, None) is None


def test_verls_rebn_on_segments_equals_the_whole_episodes(summarised: Any) -> None:
    _, _, cfg, storage, played = summarised
    keys = list(storage.samples and [k for (_, k) in storage.samples])
    assert len(keys) > len(played)  # branch points made several samples of one episode
    _, data = compute_advantage(storage, cfg, keys)
    advantages, turn_ids = padded(data["advantages"]), padded(data["gem_turn_ids"], fill=-1)
    # the reference: core ReBN over every turn of the whole episodes, by the harness's own rewards
    returns = [discounted_returns(outputs[0].extra_fields["turn_scores"], GAMMA) for outputs, _ in played]
    expected = iter(rebn(np.concatenate(returns)).tolist())
    for sample in range(len(keys)):
        for turn in sorted(set(turn_ids[sample].astype(int).tolist()) - {-1}):
            got = advantages[sample][turn_ids[sample] == turn]
            assert got == pytest.approx([next(expected)] * len(got), abs=1e-5)
    assert next(expected, None) is None


def test_a_policy_step_on_the_stored_samples(summarised: Any) -> None:
    """Verl's ppo_loss on the model's own log-probs of the stored sequences; the optimizer moves the weights."""
    model, _, cfg, storage, _ = summarised
    keys = [k for (_, k) in storage.samples]
    compute_advantage(storage, cfg, keys)
    fields = ["prompts", "responses", "response_mask", "advantages", "rollout_log_probs"]
    stored = storage.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
    rows = []
    model.train()
    for prompt, response in zip(stored["prompts"].unbind(), stored["responses"].unbind(), strict=True):
        ids = torch.cat([prompt, response]).long()
        logits = model(input_ids=ids[None]).logits[0, :-1].float()
        scored = torch.log_softmax(logits, -1).gather(1, ids[1:, None])[:, 0]
        rows.append(torch.cat([scored, torch.zeros(1)]))  # position t scores token t + 1, as verl's engine
    old = stored["rollout_log_probs"]
    data = TensorDict(
        {
            "prompts": stored["prompts"],
            "responses": stored["responses"],
            "response_mask": stored["response_mask"],
            "advantages": stored["advantages"],
            "old_log_probs": old,
        },
        batch_size=len(keys),
    )
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
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss, _ = ppo_loss(actor, {"log_probs": torch.nested.as_nested_tensor(rows, layout=torch.jagged)}, data)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize(
    ("harness", "message"),
    [
        (None, r"needs \+gem\.harness='module:function'"),
        ("gateway_harnesses:nowhere", "cannot be loaded: AttributeError"),
        ("gateway_harnesses:append_only|mistral", "unknown tool parser 'mistral'"),
    ],
    ids=["missing", "not-there", "unknown-parser"],
)
def test_a_bad_harness_is_a_config_error_naming_the_option(harness: str | None, message: str) -> None:
    tokenizer = build_chat_tokenizer("chatml_tools")
    harness, _, parser = (harness or "").partition("|")
    cfg = config(
        layout="sequence", gamma=GAMMA, response_length=64, harness=harness or None, tool_parser=parser or None
    )

    async def build() -> None:  # inside an event loop, as verl's worker builds loops (verl keeps a handle on it)
        make_loop(cfg, TinyServer(None, tokenizer), tokenizer)

    with pytest.raises(InstantiationException) as caught:  # what verl's worker sees: hydra wraps the loop's error
        asyncio.run(build())
    assert isinstance(caught.value.__cause__, ConfigError)
    assert re.search(message, str(caught.value.__cause__))
