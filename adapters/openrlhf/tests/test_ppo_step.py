"""OpenRLHF's whole step past the rollout: what its loss trains on is exactly the step's samples, each once.

Driven through OpenRLHF's own ``train_step`` -> experience maker -> replay buffer ->
``ppo_train`` -> ``PolicyLoss`` on a tiny model (see :mod:`ppo_step`), several steps in a
row, with odd, one and zero trainable episodes per step.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from gem_openrlhf.dataset import EpisodeRequest
from gem_openrlhf.executor import CONFIG_ENV, EpisodeLabel
from gem_openrlhf.steps import StepShape, nonzero_loss_norm, rank_sample_counts, step_problem
from harness import generate_responses, rollout_actor, sampling_params, to_experiences
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ppo_step import InProcessHandle, PPOStep, openrlhf_args, tiny_policy
from standins import StandInLLM
from test_rebn import response_for

from gem_core.conformance import CASES, scripted_generation
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.advantages import rebn_advantages

CASE = CASES[0]  # NumberGuess bisection, chatml
MAX_LEN = 512
FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def flags(rollout_batch: int, n: int = 1, micro: int = 1, train_batch: int | None = None, rollout_micro: int = 1):
    """``gem-openrlhf-train`` flags for one CPU rank and a step of ``rollout_batch * n`` samples."""
    return [
        "--actor.model_name_or_path",
        "tiny",
        "--actor.num_gpus_per_node",
        "1",
        "--ref.num_gpus_per_node",
        "1",
        "--algo.advantage.estimator",
        "rebn",
        "--algo.advantage.gamma",
        "0.9",
        "--algo.kl.init_coef",
        "0",
        "--actor.adam.lr",
        "0.01",
        "--rollout.batch_size",
        str(rollout_batch),
        "--rollout.n_samples_per_prompt",
        str(n),
        "--rollout.micro_batch_size",
        str(rollout_micro),
        "--train.batch_size",
        str(train_batch or rollout_batch * n),
        "--train.micro_batch_size",
        str(micro),
        "--data.max_len",
        str(MAX_LEN),
    ]


@pytest.fixture(scope="module")
def parsed_args() -> Any:
    """OpenRLHF's own args for a 1-rank run (re-shaped per test: its code reads them from this namespace)."""
    return openrlhf_args(flags(3))


def shaped(args: Any, rollout_batch: int, n: int, micro: int, train_batch: int, rollout_micro: int = 1) -> Any:
    args.rollout.batch_size, args.rollout.n_samples_per_prompt = rollout_batch, n
    args.rollout.micro_batch_size, args.train.micro_batch_size = rollout_micro, micro
    args.train.batch_size = train_batch
    return args


def rollouts(
    seeds: list[int], n: int, env_id: str = CASE.env_id, env_kwargs: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Gem's executor in OpenRLHF's rollout actor (stand-in vLLM engine): ``n`` episodes per seed."""
    tokenizer = CASE.tokenizer()
    llm = StandInLLM(tokenizer, lambda ids, max_tokens: scripted_generation(CASE, tokenizer, ids, max_tokens))
    actor = rollout_actor(llm)
    out = []
    for seed in seeds:
        prompt = EpisodeRequest(env_id=env_id, seed=seed, env_kwargs=env_kwargs or {}).to_prompt()
        out += generate_responses(actor, prompt, tokenizer, max_len=MAX_LEN, n_samples=n, params=sampling_params())
    return out


def samples_of(responses: list[dict[str, Any]]) -> Counter[tuple[str, tuple[int, ...]]]:
    return Counter((r["label"], tuple(r["observation_tokens"])) for r in responses)


def trained_of(step: PPOStep, index: int) -> Counter[tuple[str, tuple[int, ...]]]:
    return Counter((s.label, s.tokens) for s in step.trained[index])


def weights(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("steps", "micro"),
    [
        pytest.param([(3, 1), (1, 1), (3, 1)], 1, id="odd-one-odd"),
        pytest.param([(1, 3), (3, 1)], 3, id="three-samples-one-prompt-then-three-prompts"),
        pytest.param([(2, 2), (1, 4)], 2, id="groups-of-two-then-one-group-of-four"),
    ],
)
def test_several_steps_each_train_on_exactly_their_episodes(
    steps: list[tuple[int, int]], micro: int, parsed_args: Any, rebn_patched, local_ray, monkeypatch
) -> None:
    monkeypatch.setenv(CONFIG_ENV, json.dumps({"max_turn_tokens": 16}))
    tokenizer = CASE.tokenizer()
    model = tiny_policy(tokenizer)
    first = steps[0]
    step = PPOStep(shaped(parsed_args, first[0], first[1], micro, first[0] * first[1]), tokenizer, model)
    seed = 0
    for index, (prompts, n) in enumerate(steps):
        shaped(parsed_args, prompts, n, micro, prompts * n)
        step.strategy.accumulated_gradient = max(prompts * n // micro, 1)  # DeepspeedStrategy's, for this shape
        responses = rollouts(list(range(seed, seed + prompts)), n)
        seed += prompts
        before = weights(model)
        status = step.step(to_experiences(responses, parsed_args, MAX_LEN))
        assert trained_of(step, index) == samples_of(responses)  # each sample once, none left out
        labels = [EpisodeLabel.parse(r["label"]) for r in responses]
        want = rebn_advantages([np.asarray(lb.turn_rewards) for lb in labels], 0.9)
        got = {s.label: s.advantages for s in step.trained[index]}
        for response, per_turn in zip(responses, want, strict=True):
            lengths = [end - start for start, end in EpisodeLabel.parse(response["label"]).turn_ranges]
            expected = [value for value, length in zip(per_turn, lengths, strict=True) for _ in range(length)]
            assert got[response["label"]] == pytest.approx(expected, abs=1e-5)
        assert math.isfinite(status["policy_loss"]) and status["rollout/num_samples"] == prompts * n
        assert not torch.equal(before, weights(model)) and torch.isfinite(weights(model)).all()
        assert step.strategy.pending == 0 and step.strategy.optimizer_steps == index + 1  # nothing left for later


@pytest.mark.slow
def test_a_step_whose_episodes_all_failed_leaves_the_weights_finite(parsed_args: Any, rebn_patched, local_ray) -> None:
    """Zero trainable episodes: every env failed, so OpenRLHF's loss normalisers are 0 (0/0 without gem's guard)."""
    import openrlhf.utils.loss_utils as loss_utils

    assert getattr(loss_utils._optimizer_step_loss_norm, "gem_guard", False)
    tokenizer = CASE.tokenizer()
    model = tiny_policy(tokenizer)
    step = PPOStep(shaped(parsed_args, 3, 1, 1, 3), tokenizer, model)
    step.strategy.accumulated_gradient = 3
    good = rollouts([0, 1, 2], 1)
    import gem_core
    from gem_core.testing import faulty_number_guess

    gem_core.register("test:Faulty-v0", faulty_number_guess, kwargs={"error": "TimeoutError"}, override=True)
    failed = rollouts([0, 1, 2], 1, env_id="test:Faulty-v0", env_kwargs={"fail_at": 0})  # every reset raises
    assert all(not r["action_ranges"] for r in failed)
    before = weights(model)
    step.step(to_experiences(failed, parsed_args, MAX_LEN))
    assert trained_of(step, 0) == samples_of(failed)
    assert torch.equal(before, weights(model))  # an empty update, not NaN
    step.step(to_experiences(good, parsed_args, MAX_LEN))  # and the next step trains normally
    assert torch.isfinite(weights(model)).all() and not torch.equal(before, weights(model))


def test_without_the_guard_a_window_of_failed_episodes_is_nan() -> None:
    """The defect the guard removes, on OpenRLHF's own normaliser and aggregate_loss."""
    import openrlhf.utils.loss_utils as loss_utils
    from openrlhf.models.loss import aggregate_loss

    original = getattr(loss_utils._optimizer_step_loss_norm, "__wrapped__", loss_utils._optimizer_step_loss_norm)
    mask = torch.zeros(2, 4)
    loss = torch.ones(2, 4, requires_grad=True)
    for norm, finite in ((original, False), (nonzero_loss_norm(original), True)):
        info = norm([mask], None, 1, 1)
        value = aggregate_loss(loss, mask, **info)
        value.backward()
        assert bool(torch.isfinite(value)) is finite and bool(torch.isfinite(loss.grad).all()) is finite
        loss.grad = None


shapes = st.builds(
    lambda micro, gas, rollout_micro, dp: StepShape(rollout_micro, micro * gas * dp, micro, dp),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 3),
)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, samples=st.integers(1, 40))
def test_rank_counts_are_openrlhfs_split(shape: StepShape, samples: int, local_ray) -> None:
    """Our count of each rank's samples equals OpenRLHF's own batching and ``async_run_method_batch`` deal-out."""
    from harness import experience_maker_for, trainer_args
    from openrlhf.trainer.ray.launcher import RayActorGroup

    args = trainer_args(micro_batch_size=shape.rollout_micro_batch_size)
    maker = experience_maker_for(args, tokenizer=SimpleNamespace(pad_token_id=0))
    responses = [response_for([1.0], [(2, 1)], 3, i) for i in range(samples)]
    experiences = maker.split_rollout_samples(to_experiences(responses, args, 100))

    class Rank:
        def __init__(self) -> None:
            self.samples = 0
            self.strategy = SimpleNamespace(is_rank_0=lambda: True)

        def execute_batch(self, method_name: str, all_data: Any, start: int, end: int) -> None:
            self.samples += sum(len(e.sequences) for e in all_data["experience"][start:end])

    ranks = [Rank() for _ in range(shape.dp)]
    group = RayActorGroup.__new__(RayActorGroup)
    group._actor_handlers = [InProcessHandle(rank) for rank in ranks]
    group.duplicate_actors = 1
    try:
        local_ray.get(group.async_run_method_batch(method_name="append", experience=experiences))
    except ValueError:  # OpenRLHF refuses fewer experiences than ranks
        assert len(experiences) < shape.dp and step_problem(samples, shape) is not None
        return
    assert [rank.samples for rank in ranks] == rank_sample_counts(samples, shape)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURES)
@given(
    micro=st.integers(1, 3),
    gas=st.integers(1, 3),
    samples=st.integers(1, 7),
    lengths=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=7, max_size=7),
)
def test_the_guard_refuses_exactly_the_steps_openrlhf_would_not_train_whole(
    micro: int, gas: int, samples: int, lengths: list[tuple[int, int]], parsed_args: Any, rebn_patched, local_ray
) -> None:
    """One rank: the guard passes a step iff OpenRLHF's ppo_train trains each sample once and ends on an update.

    (No sample dropped by its ``drop_last`` DataLoader, no gradient carried into the next step.)
    """
    from openrlhf.trainer.ppo_utils import experience_maker

    responses = [response_for([0.5 * i, 1.0], [lengths[i], (1, 1)], 2, i) for i in range(samples)]
    args = shaped(parsed_args, samples, 1, micro, micro * gas)
    tokenizer = CASE.tokenizer()
    step = PPOStep(args, tokenizer, tiny_policy(tokenizer))
    problem = step_problem(samples, StepShape.from_args(args))
    rollout = to_experiences(responses, args, 100)
    if problem is not None:
        with pytest.raises(TrajectoryError, match="whole number of optimizer steps"):
            step.step(rollout)
        # what OpenRLHF would have done without the guard: some sample not trained, or gradients carried over
        unguarded = experience_maker.RemoteExperienceMaker._openrlhf_make_experience_batch
        step.trainer.experience_maker.make_experience_batch = unguarded.__get__(step.trainer.experience_maker)
        step.step(to_experiences(responses, args, 100))
        whole = trained_of(step, -1) == samples_of(responses)
        assert not (whole and step.strategy.pending == 0)
    else:
        step.step(rollout)
        assert trained_of(step, 0) == samples_of(responses)
        assert step.strategy.pending == 0


def test_the_launcher_refuses_a_step_shape_the_guard_would_stop() -> None:
    with pytest.raises(ConfigError, match="whole number of optimizer steps"):
        openrlhf_args(flags(3, micro=2, train_batch=2))
