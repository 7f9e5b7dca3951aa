"""gem's AgentExecutor inside OpenRLHF's own rollout actor and sample generator (stand-in vLLM engine only)."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from gem_openrlhf.dataset import EpisodeRequest
from gem_openrlhf.executor import CONFIG_ENV, EXTRA_LOG_KEYS, EpisodeLabel, ExecutorConfig, GemAgentExecutor
from harness import (
    AGENT_FUNC_PATH,
    generate_responses,
    rollout_actor,
    sampling_params,
    to_experiences,
    trainer_args,
    vllm_engine,
)
from standins import StandInLLM

import gem_core
from gem_core.conformance import CASES, scripted_generation
from gem_core.core import Env
from gem_core.errors import ConfigError, EnvNotFound

CASE = CASES[0]  # NumberGuess bisection, chatml
KEYS = {
    "prompt",
    "label",
    "images",
    "mm_train_inputs",
    "observation_tokens",
    "action_ranges",
    "rollout_log_probs",
    "reward",
    "scores",
    "truncated",
    "extra_logs",
}


@pytest.fixture
def tokenizer():  # type: ignore[no-untyped-def]
    return CASE.tokenizer()


@pytest.fixture
def bisect_llm(tokenizer):  # type: ignore[no-untyped-def]
    return StandInLLM(tokenizer, lambda ids, max_tokens: scripted_generation(CASE, tokenizer, ids, max_tokens))


def prompt_for(seed: int, env_id: str = CASE.env_id) -> str:
    return EpisodeRequest(env_id=env_id, seed=seed).to_prompt()


def test_openrlhf_loads_the_agent_file() -> None:
    executor = vllm_engine._load_agent_executor(AGENT_FUNC_PATH)
    assert isinstance(executor, GemAgentExecutor)
    assert type(executor).__name__ == "AgentExecutor"


@pytest.mark.parametrize("logprobs", [False, True], ids=["no-logprobs", "logprobs"])
def test_a_sample_has_exactly_openrlhfs_fields(tokenizer, bisect_llm, logprobs: bool) -> None:
    actor = rollout_actor(bisect_llm)
    [response] = generate_responses(
        actor, prompt_for(0), tokenizer, max_len=400, params=sampling_params(logprobs=logprobs), label="row-label"
    )
    assert set(response) == KEYS
    tokens, ranges = response["observation_tokens"], response["action_ranges"]
    label = EpisodeLabel.parse(response["label"])
    assert label.label == "row-label" and label.start_state_id == f"{CASE.env_id}/seed=0"
    assert [tuple(r) for r in label.turn_ranges] == ranges
    assert response["reward"] == pytest.approx(sum(label.turn_rewards)) == response["scores"]
    assert set(response["extra_logs"]) == set(EXTRA_LOG_KEYS)
    assert response["extra_logs"]["gem_turns"] == len(ranges)
    # each range is exactly what the engine generated for that turn: the stand-in saw the context up to it
    for (start, end), (prompt_ids, _) in zip(ranges, bisect_llm.calls, strict=True):
        assert tokens[:start] == prompt_ids
        assert tokens[end - 1] == tokenizer.eos_token_id
    if logprobs:
        assert len(response["rollout_log_probs"]) == len(tokens)
        inside = {p for s, e in ranges for p in range(s, e)}
        assert all(v == 0.0 for p, v in enumerate(response["rollout_log_probs"]) if p not in inside)
        assert all(response["rollout_log_probs"][p] < 0 for p in inside)
    else:
        assert response["rollout_log_probs"] is None


def test_openrlhfs_sample_generator_masks_exactly_the_generated_tokens(tokenizer, bisect_llm) -> None:
    actor = rollout_actor(bisect_llm)
    responses = generate_responses(
        actor, prompt_for(1), tokenizer, max_len=400, params=sampling_params(logprobs=True), n_samples=2
    )
    args = trainer_args()
    for response, experience in zip(responses, to_experiences(responses, args, 400), strict=True):
        generated = {p for s, e in response["action_ranges"] for p in range(s, e)}
        mask = experience.action_mask[0].tolist()
        # OpenRLHF drops the first position: action_mask[i] marks token i + 1
        assert {i + 1 for i, m in enumerate(mask) if m} == generated
        assert experience.rollout_log_probs.shape == experience.action_mask.shape
        assert experience.rewards.item() == pytest.approx(response["reward"])
        assert experience.info["gem_turns"].item() == len(response["action_ranges"])
        assert experience.labels == [response["label"]]


def test_max_len_caps_the_whole_sample_and_every_request(tokenizer, bisect_llm) -> None:
    actor = rollout_actor(bisect_llm)
    max_len = 90
    [response] = generate_responses(actor, prompt_for(2), tokenizer, max_len=max_len)
    assert len(response["observation_tokens"]) <= max_len
    for prompt_ids, params in bisect_llm.calls:
        assert 1 <= params.max_tokens <= max_len - len(prompt_ids)
    label = EpisodeLabel.parse(response["label"])
    assert label.truncated or label.terminated


def test_rollout_max_new_tokens_is_the_per_turn_cap(tokenizer, bisect_llm) -> None:
    actor = rollout_actor(bisect_llm)
    [response] = generate_responses(
        actor, prompt_for(3), tokenizer, max_len=400, params=sampling_params(max_new_tokens=4)
    )
    assert all(params.max_tokens <= 4 for _, params in bisect_llm.calls)
    label = EpisodeLabel.parse(response["label"])
    assert "<\uff5cINVALID_ACTION\uff5c>" in label.turn_actions  # a cut reply is not a guess
    assert response["truncated"] == (response["action_ranges"][-1][1] - response["action_ranges"][-1][0] == 4)


class _Rendezvous(Env):
    """Every episode's first step waits until all episodes are stepping at once (fails if steps block the loop)."""

    barrier: threading.Barrier

    def reset(self, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        return "Say anything.", {}

    def step(self, action):  # type: ignore[no-untyped-def]
        self.barrier.wait()
        return "", 1.0, True, False, {}


def test_env_steps_run_off_the_event_loop(tokenizer) -> None:
    samples = 4
    _Rendezvous.barrier = threading.Barrier(samples, timeout=30)
    gem_core.register("test:Rendezvous-v0", _Rendezvous, override=True)
    eos = tokenizer.eos_token_id
    llm = StandInLLM(tokenizer, lambda ids, max_tokens: scripted_generation(CASE, tokenizer, ids, max_tokens))
    llm.policy = lambda ids, max_tokens: type(scripted_generation(CASE, tokenizer, ids, max_tokens))(
        token_ids=[*tokenizer.encode("ok", add_special_tokens=False), eos]
    )
    actor = rollout_actor(llm)
    responses = generate_responses(
        actor, prompt_for(0, "test:Rendezvous-v0"), tokenizer, max_len=200, n_samples=samples
    )
    assert [r["reward"] for r in responses] == [1.0] * samples


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv(CONFIG_ENV, json.dumps({"max_turns": 3, "system_prompt": "Be brief."}))
    assert GemAgentExecutor().config == ExecutorConfig(max_turns=3, system_prompt="Be brief.")
    path = tmp_path / "gem.json"
    path.write_text(json.dumps({"wrappers": [["tools", {"tools": ["echo"]}]]}))
    monkeypatch.setenv(CONFIG_ENV, str(path))
    assert GemAgentExecutor().config.wrappers == [("tools", {"tools": ["echo"]})]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"max_turn": 3}', "max_turn"),
        ('{"on_cut": "drop"}', "on_cut"),
        ("/no/such/gem.json", "neither a JSON object nor a readable file"),
    ],
    ids=["unknown-key", "bad-value", "missing-file"],
)
def test_bad_settings_fail_when_openrlhf_builds_the_executor(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv(CONFIG_ENV, value)
    with pytest.raises(ConfigError, match=message):
        vllm_engine._load_agent_executor(AGENT_FUNC_PATH)


@pytest.mark.parametrize(
    "prompt",
    ["Guess a number", "<|im_start|>user\n{}<|im_end|>", '{"gem": {"seed": 1}}', '{"env": "x"}'],
    ids=["plain-text", "chat-templated", "no-env-id", "no-gem-key"],
)
def test_a_prompt_that_names_no_episode_is_a_clear_error(tokenizer, bisect_llm, prompt: str) -> None:
    actor = rollout_actor(bisect_llm)
    with pytest.raises(ConfigError, match="gem-openrlhf-dataset"):
        generate_responses(actor, prompt, tokenizer, max_len=200)


def test_an_unknown_env_id_names_the_id(tokenizer, bisect_llm) -> None:
    actor = rollout_actor(bisect_llm)
    with pytest.raises(EnvNotFound, match="core:NoSuchGame-v0"):
        generate_responses(actor, prompt_for(0, "core:NoSuchGame-v0"), tokenizer, max_len=200)


FAULTY = "test:Faulty-v0"


@pytest.fixture
def faulty() -> str:
    """NumberGuess that raises ``TimeoutError`` at the turn a row's ``env_kwargs`` names (0: in reset)."""
    from gem_core.testing import faulty_number_guess

    gem_core.register(FAULTY, faulty_number_guess, kwargs={"error": "TimeoutError"}, override=True)
    return FAULTY


def test_a_batch_with_failing_envs_trains_only_on_the_others(
    tokenizer, bisect_llm, faulty: str, rebn_patched, caplog: pytest.LogCaptureFixture
) -> None:
    """An env that raises ends its own episode: no action token, out of ReBN's statistics, counted and named."""
    from harness import experience_maker_for
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import masked_mean
    from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

    actor = rollout_actor(bisect_llm)
    good = [prompt_for(seed) for seed in (1, 2)]
    failing = {
        EpisodeRequest(env_id=faulty, seed=3, env_kwargs={"fail_at": 0}).to_prompt(): "reset",
        EpisodeRequest(env_id=faulty, seed=4, env_kwargs={"fail_at": 2}).to_prompt(): "step",
    }
    params = sampling_params(logprobs=True)
    responses = {p: generate_responses(actor, p, tokenizer, max_len=400, params=params)[0] for p in [*good, *failing]}
    for prompt, phase in failing.items():
        response = responses[prompt]
        label = EpisodeLabel.parse(response["label"])
        assert response["action_ranges"] == [] and response["reward"] == 0.0 and response["observation_tokens"]
        assert label.error_phase == phase and label.env_error.startswith("TimeoutError: FaultyEnv")
        assert response["extra_logs"]["gem_env_errors"] == 1.0

    args = trainer_args(micro_batch_size=2)

    def advantages_of(prompts: list[str]) -> tuple[dict[str, torch.Tensor], list[float]]:
        maker = experience_maker_for(args, tokenizer)
        experiences = maker.split_rollout_samples(to_experiences([responses[p] for p in prompts], args, 400))
        for e in experiences:  # make_experience's per-sample KL mean (no reference model here: KL 0)
            e.info["kl"] = masked_mean(torch.zeros_like(e.action_mask, dtype=torch.float32), e.action_mask, dim=-1)
        experiences = maker.compute_advantages_and_returns(experiences)
        rows = [(e, r) for e in experiences for r in range(e.action_mask.shape[0])]
        assert all(torch.isfinite(e.advantages).all() and torch.isfinite(e.info["kl"]).all() for e in experiences)
        # OpenRLHF's loss reduction over one optimizer step (its own normalisers), in both modes
        losses = []
        for token_level in (True, False):
            window = iter_grad_accum_global_norm(experiences, None, len(experiences), lambda e: e.action_mask)
            total = sum(
                aggregate_loss(e.advantages, e.action_mask, token_level_loss=token_level, **info) for e, info in window
            )
            losses.append(float(total) / len(experiences))  # DeepSpeed scales each micro-batch by 1 / gas
        return {p: e.advantages[r][e.action_mask[r].bool()] for p, (e, r) in zip(prompts, rows, strict=True)}, losses

    with caplog.at_level("WARNING", logger="gem_openrlhf.rebn"):
        everything, losses = advantages_of([*good, *failing])
    alone, clean_losses = advantages_of(good)
    assert losses == pytest.approx(clean_losses, abs=1e-6)  # the failed samples weigh nothing in the loss
    for prompt in good:  # ReBN's mean and std come from the surviving episodes only
        torch.testing.assert_close(everything[prompt], alone[prompt])
    for prompt in failing:
        assert everything[prompt].numel() == 0
    (warning,) = [r.getMessage() for r in caplog.records if "env error" in r.getMessage()]
    assert "2 of 4 episodes" in warning and f"{faulty} seed=4 in step: TimeoutError" in warning


def test_on_env_error_raise_propagates(tokenizer, bisect_llm, faulty: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, json.dumps({"on_env_error": "raise"}))
    actor = rollout_actor(bisect_llm)
    prompt = EpisodeRequest(env_id=faulty, seed=3, env_kwargs={"fail_at": 1}).to_prompt()
    with pytest.raises(TimeoutError, match="injected failure in step 1"):
        generate_responses(actor, prompt, tokenizer, max_len=400)
