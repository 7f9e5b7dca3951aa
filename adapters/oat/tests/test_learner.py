"""GemOatLearner: each round trains on exactly its transitions, with float64 ReBN, through oat's own learn step."""

from __future__ import annotations

import inspect
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oat.types import Transition

from gem_core.errors import ConfigError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer

# oat's learn() asks for pinned memory, which needs a GPU.
pytestmark = pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")


def transition(reward: float, done: bool, tag: int = 0) -> Transition:
    return Transition(
        obs="o",
        action="a",
        rewards=reward,
        done=done,
        prompt="p",
        prompt_ids=[5, 6, 7 + tag % 50],
        response="r",
        response_ids=[8, 9],
        response_logprobs=[-0.1, -0.2],
        response_is_truncated=False,
        action_is_formatted=True,
        info={"gem/turn": 0.0, "gem/terminated": float(done), "gem/truncated": 0.0},
    )


def episodes_of(rewards: list[list[float]]) -> list[list[Transition]]:
    return [[transition(r, i == len(rs) - 1, i) for i, r in enumerate(rs)] for rs in rewards]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


@pytest.fixture(scope="module")
def model_dir(policy_dir: str) -> str:
    return policy_dir


def test_the_buffer_is_built_as_oats_learner_builds_it(make_learner: Any) -> None:
    """The tests' learner holds oat's buffer: the deque oat's ``LearnerBase._init`` makes, at the resolved length."""
    from oat.learners.base import LearnerBase

    assert "self.pi_buffer = deque(maxlen=args.pi_buffer_maxlen_per_device)" in inspect.getsource(LearnerBase._init)
    learner = make_learner()
    assert isinstance(learner.pi_buffer, deque)
    # oat's defaults: 128 per round over 16 per collect step and one rank: 8 steps of 16 fit.
    assert learner.pi_buffer.maxlen == learner.args.pi_buffer_maxlen_per_device == 128


@pytest.mark.parametrize("distributed", [False, True], ids=["one-process", "gloo-all-reduce"])
def test_advantages_are_rebn_of_per_turn_returns(
    distributed: bool, request: pytest.FixtureRequest, make_learner: Any
) -> None:
    if distributed:
        request.getfixturevalue("gloo_group")
    rewards = [[0.0, 0.0, 1.0], [-0.1, 0.5], [0.2]]
    learner = make_learner(gamma=0.9, rollout_batch_size_per_device=64, rollout_batch_size=64)
    data = episodes_of(rewards)
    learner.process_feedback_data(data)
    returns = [discounted_returns(r, 0.9) for r in rewards]
    np.testing.assert_allclose([t.info["returns"] for ep in data for t in ep], np.concatenate(returns), rtol=1e-12)
    assert all(np.isnan(t.info["advantages"]) for ep in data for t in ep)  # written when the round trains
    batch = learner.prepare_round()
    assert batch == [t for ep in data for t in ep]
    np.testing.assert_allclose([t.info["advantages"] for t in batch], rebn(np.concatenate(returns)), atol=1e-12)
    assert all(t.info["values"] == 0.0 for t in batch)
    assert learner.query_step == 6  # oat's own bookkeeping ran


@pytest.mark.parametrize("reward", [0.1, -0.1, 0.6561, -0.19, 0.0, 1.0], ids=str)
def test_equal_returns_give_exact_zeros(reward: float, make_learner: Any) -> None:
    learner = make_learner(gamma=1.0, rollout_batch_size_per_device=64, rollout_batch_size=128)
    learner.process_feedback_data(episodes_of([[reward]] * 37))
    assert [t.info["advantages"] for t in learner.prepare_round()] == [0.0] * 37


def test_rebn_is_over_the_subsampled_transitions_it_trains(make_learner: Any) -> None:
    learner = make_learner(gamma=1.0, rollout_batch_size_per_device=4, rollout_batch_size=4)
    data = episodes_of([[0.0, 1.0], [1.0, 0.0, 0.0], [0.5, 0.5]])
    learner.process_feedback_data(data)
    batch = learner.prepare_round()
    assert len(batch) == 4 and all(any(t is u for ep in data for u in ep) for t in batch)
    want = rebn([t.info["returns"] for t in batch])
    assert [t.info["advantages"] for t in batch] == pytest.approx(list(want), abs=1e-12)


def test_a_step_with_no_episode_is_kept_out(make_learner: Any) -> None:
    learner = make_learner()
    learner.process_feedback_data([])
    assert learner.prepare_round() == [] and learner.query_step == 0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("whiten_adv", True, "whiten_adv"),
        ("critic_type", "ppo", "critic_type ppo"),
        ("train_batch_size_per_device", 2, "train_batch_size_per_device"),
        ("env_ids", [], "env_ids"),
        ("num_samples", 2, "num_samples"),
        ("buffer_clear_every", float("inf"), "buffer_clear_every"),
    ],
    ids=["whiten_adv", "ppo-critic", "batch-per-device", "no-env", "num-samples", "never-cleared"],
)
def test_learner_refuses_settings_that_break_rebn(flag: str, value: Any, message: str, make_learner: Any) -> None:
    from gem_oat.learner import GemOatLearner

    learner = make_learner()
    setattr(learner.args, flag, value)
    with pytest.raises(ConfigError, match=message):
        learner._init(learner.args, [])
    with pytest.raises(ConfigError, match=message):
        GemOatLearner.resolve_args(learner.args)


def test_a_buffer_shorter_than_the_round_is_a_typed_error(make_learner: Any) -> None:
    learner = make_learner()
    learner.pi_buffer = deque(maxlen=3)  # what oat's default-16 buffer does to a bigger round
    with pytest.raises(ConfigError, match="pi_buffer_maxlen_per_device"):
        learner.process_feedback_data(episodes_of([[1.0, 0.0], [0.0, 0.0, 1.0]]))


def test_a_buffer_not_cleared_is_a_typed_error(make_learner: Any) -> None:
    learner = make_learner()
    learner.pi_buffer.append(transition(1.0, True))  # left over from an earlier round
    learner.process_feedback_data(episodes_of([[0.0, 1.0]]))
    with pytest.raises(ConfigError, match="buffer_clear_every 1"):
        learner.prepare_round()


# ---------------------------------------------------------------- oat's own learn() and learning_step


def run_like_oat(learner: Any, steps: list[list[list[Transition]]]) -> list[dict[str, Any]]:
    """Oat's ``LearnerBase.run`` loop body for these collect steps: feedback, learn every update_interval, clear."""
    infos = []
    for step, data in enumerate(steps, start=1):
        learner.process_feedback_data(data)
        if step % learner.update_interval == 0:
            infos.append(learner.learn(step // learner.update_interval))
            if (step // learner.update_interval) % learner.args.buffer_clear_every == 0:
                learner.pi_buffer.clear()
    return infos


class Recorder:
    """What oat's ``learn`` handed to its dataset and to ``learning_step``, per round (wraps, never replaces)."""

    def __init__(self, learner: Any) -> None:
        self.buffers: list[list[Transition]] = []
        self.batches: list[dict[str, Any]] = []
        build = self.build = learner.dataset_builder

        def dataset_builder(buffer: Any, tokenizer: Any, strategy: Any) -> Any:
            self.buffers.append(list(buffer))
            return build(buffer, tokenizer, strategy)

        def learning_step(data: dict[str, Any]) -> Any:
            self.batches.append(data)
            return type(learner).learning_step(learner, data)

        learner.dataset_builder, learner.learning_step = dataset_builder, learning_step


@pytest.mark.parametrize("per_round", [[1], [3], [0], [2, 1], [0, 0], [0, 3]], ids=str)
def test_oats_learning_step_runs_on_odd_one_and_zero_transitions(
    per_round: list[int],
    tokenizer: Any,
    model_dir: str,
    gloo_group: None,
    cpu_for_cuda: None,
    make_trainer: Any,
) -> None:
    """Several rounds in a row through oat's learn(): oat's default num_samples=2 crashed on odd counts."""
    learner = make_trainer(model_dir, gamma=0.9, num_ppo_epochs=2, rollout_batch_size=16)
    assert learner.update_interval == 1
    recorder = Recorder(learner)
    steps = [episodes_of([[0.5] * n] if n else []) for n in per_round]
    infos = run_like_oat(learner, steps)
    trained = [n for n in per_round if n]
    assert [len(b) for b in recorder.buffers] == trained
    assert [len(b["input_ids"]) for b in recorder.batches] == trained
    assert [i["train/gem_transitions"] for i in infos] == per_round
    assert all("train/pg_loss" in i for i, n in zip(infos, per_round, strict=True) if n)
    assert len(learner.pi_buffer) == 0 and learner.round_transitions == []


def test_oats_default_num_samples_fails_an_odd_round_after_the_gradient_step(
    model_dir: str, gloo_group: None, cpu_for_cuda: None, make_trainer: Any
) -> None:
    """Why ``--num_samples`` is 1 here: oat's default 2 reshapes the round's rewards into pairs."""
    learner = make_trainer(model_dir, rollout_batch_size=16)
    learner.args.num_samples = 2  # oat's default, set after the checks that refuse it
    learner.process_feedback_data(episodes_of([[0.0, 0.5, 1.0]]))
    with pytest.raises(RuntimeError, match="shape"):
        learner.learn(1)
    assert learner.model.model.optimizer_steps == 3  # the weights had already moved


def test_a_rank_with_fewer_transitions_is_padded_with_zero_weight(
    model_dir: str, gloo_group: None, cpu_for_cuda: None, make_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another rank brought 3 transitions, this one none: 3 micro-steps here too, and no weight moves."""
    import torch
    from gem_oat import learner as learner_module

    monkeypatch.setattr(learner_module, "_max_over_ranks", lambda n: max(n, 3))
    learner = make_trainer(model_dir, rollout_batch_size=16, beta=0.0)
    recorder = Recorder(learner)
    before = [p.detach().clone() for p in learner.model.model.module.parameters()]
    learner.process_feedback_data([])
    info = learner.learn(1)
    assert info["train/gem_transitions"] == 0.0 and info["train/gem_padding_transitions"] == 3.0
    assert recorder.batches[0]["loss_masks"] == [False, False, False]
    assert learner.model.model.micro_steps == 3
    after = list(learner.model.model.module.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


# A collect step: 0 to 3 episodes of 1 to 3 turns.
STEP = st.lists(st.lists(st.sampled_from([0.0, 1.0, -0.5]), min_size=1, max_size=3), max_size=3)


@pytest.fixture(scope="module")
def trainers(model_dir: str, make_trainer: Any) -> dict[int, Any]:
    """One trainer per per-step cap (2 collect steps per round), reused across examples: loading takes seconds."""
    return {
        per_step: make_trainer(
            model_dir,
            gamma=0.9,
            num_ppo_epochs=1,
            rollout_batch_size_per_device=per_step,
            rollout_batch_size=2 * per_step,
        )
        for per_step in (2, 4, 64)
    }


# A collect step: 0 to 3 episodes of 1 to 3 turns; a round: two collect steps.
STEP = st.lists(st.lists(st.sampled_from([0.0, 1.0, -0.5]), min_size=1, max_size=3), max_size=3)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rounds=st.lists(st.lists(STEP, min_size=2, max_size=2), min_size=1, max_size=3),
    per_step=st.sampled_from([2, 4, 64]),
)
def test_each_round_trains_on_exactly_its_transitions_each_once(
    rounds: list[list[list[list[float]]]],
    per_step: int,
    trainers: dict[int, Any],
    gloo_group: None,
    cpu_for_cuda: None,
) -> None:
    """Any transition counts per collect step (0, odd, above the per-step cap), rounds in a row."""
    learner = trainers[per_step]
    assert learner.update_interval == 2 and len(learner.pi_buffer) == 0 and learner.round_transitions == []
    recorder = Recorder(learner)
    steps = [episodes_of(step) for round_ in rounds for step in round_]
    infos = run_like_oat(learner, steps)

    assert [i["train/gem_transitions"] for i in infos] == [float(len(b)) for b in _per_round(recorder, rounds)]
    expected_rounds = [r for r in rounds if any(step for step in r)]
    assert len(recorder.buffers) == len(recorder.batches) == len(expected_rounds)
    for rewards, buffer, batch in zip(expected_rounds, recorder.buffers, recorder.batches, strict=True):
        counts = [sum(len(ep) for ep in step) for step in rewards]
        assert len(buffer) == sum(min(n, per_step) for n in counts)
        assert len({id(t) for t in buffer}) == len(buffer)  # each once
        returns = np.array([t.info["returns"] for t in buffer])
        assert batch["advantages"] == pytest.approx(list(rebn(returns)), abs=1e-6)  # ReBN over exactly this set
        assert batch["returns"] == [t.info["returns"] for t in buffer]
    # every trained transition came from its own round's collect steps, none from an earlier one
    nonempty = [i for i, r in enumerate(rounds) if any(step for step in r)]
    round_of = {id(t): i // 2 for i, data in enumerate(steps) for ep in data for t in ep}
    for k, buffer in enumerate(recorder.buffers):
        assert {round_of[id(t)] for t in buffer} == {nonempty[k]}
    learner.dataset_builder = recorder.build  # the trainer is reused: back to oat's own
    del learner.learning_step


def _per_round(recorder: Recorder, rounds: list[Any]) -> list[list[Transition]]:
    """The trained buffer of each round, an empty one for a round that brought nothing."""
    trained = iter(recorder.buffers)
    return [next(trained) if any(step for step in r) else [] for r in rounds]


def test_oats_dataset_carries_the_advantages(gloo_group: None, make_learner: Any) -> None:
    from oat.algorithms.ppo_multiturn import MultiTurnTransitionDataset
    from oat.utils.deepspeed import DeepspeedStrategy

    learner = make_learner(gamma=0.5)
    data = episodes_of([[0.0, 1.0], [0.25]])
    learner.process_feedback_data(data)
    batch_transitions = learner.prepare_round()
    dataset = MultiTurnTransitionDataset(
        learner.pi_buffer, tokenizer=build_chat_tokenizer("chatml"), strategy=DeepspeedStrategy(args=learner.args)
    )
    batch = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    assert batch["advantages"] == [t.info["advantages"] for t in batch_transitions]
    assert batch["returns"] == [0.5, 1.0, 0.25]


def test_padding_transitions_carry_no_weight(tokenizer: Any, make_learner: Any) -> None:
    learner = make_learner()
    learner.tokenizer = tokenizer
    pads = learner._padding(3)
    assert len(pads) == 3 and all(not p.loss_mask and p.info["advantages"] == 0.0 for p in pads)


# Per split: each rank's episodes (per-turn rewards); a rank may have none.
RANK_SPLITS = [
    [[], [[0.0, 1.0], [0.5]]],
    [[[1.0]], [[0.0, 0.0, 1.0]]],
    [[[0.2, 0.2], [1.0]], []],
    [[], []],
    [[[0.5]], [[0.5], [0.5]]],
]


def test_rank_splits_rebn_over_both_ranks_and_padding_to_the_larger(tmp_path: Path) -> None:
    """Two learner ranks (gloo, two processes): ReBN is over the union of the ranks' rounds, padding to the max."""
    import json
    import subprocess
    import sys

    worker = Path(__file__).with_name("two_ranks.py")
    store = tmp_path / "store"
    outs = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    procs = [
        subprocess.Popen([sys.executable, str(worker), str(r), str(store), json.dumps(RANK_SPLITS), str(outs[r])])
        for r in (0, 1)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    ranks = [json.loads(o.read_text()) for o in outs]
    for k, split in enumerate(RANK_SPLITS):
        returns = [[float(g) for ep in split[r] for g in discounted_returns(ep, 0.9)] for r in (0, 1)]
        want = rebn(np.array(returns[0] + returns[1])) if returns[0] + returns[1] else np.zeros(0)
        got = ranks[0][k]["advantages"] + ranks[1][k]["advantages"]
        assert got == pytest.approx(list(want), abs=1e-12), split
        assert ranks[0][k]["most"] == ranks[1][k]["most"] == max(len(returns[0]), len(returns[1]))
