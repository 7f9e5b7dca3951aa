"""gem tool envs through TRL's own ``GRPOTrainer(environment_factory=...)``: schemas, episodes, real train() steps."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any, ClassVar

import gem_qa
import pytest
import torch
from gem_math.data import sample_path
from gem_trl import build_tiny_model
from gem_trl.environments import (
    GemToolEnvironment,
    final_answer,
    tool_environment_factories,
    tool_environment_factory,
    tool_method,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils import get_json_schema
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen3_chat_template

import gem_core
from gem_core.errors import ConfigError, ResetNeeded, ToolError
from gem_core.testing_tokenizers import build_chat_tokenizer
from gem_core.tools.base import Tool, ToolResult

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENV_ID = "math:Sample-v0-python"
# A budget of two calls: the three-call episodes below hit it on their last call.
ENV_KWARGS: dict[str, Any] = {"tool_wrapper": {"max_tool_calls": 2, "error_reward": -0.1}}
PROBLEMS = [json.loads(line) for line in Path(sample_path("math.jsonl")).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------- tool schemas


def _tool(name: str, parameters: dict[str, Any], description: str = "Does a thing.") -> Tool:
    class _T(Tool):
        async def execute(self, arguments: dict[str, Any]) -> ToolResult:
            return ToolResult(output=json.dumps(arguments, sort_keys=True))

    _T.name, _T.description, _T.parameters = name, description, parameters
    return _T()


_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in {"self", "reset", "get_reward"} and not __import__("keyword").iskeyword(s)
)
_SCALAR = st.sampled_from(["string", "integer", "number", "boolean"])
_WORDS = st.lists(st.from_regex(r"[A-Za-z0-9,.'()-]{1,10}", fullmatch=True), max_size=6).map(" ".join)


@st.composite
def _arg_schema(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """An argument's JSON schema and what get_json_schema gives back for it (TRL's view)."""
    kind = draw(st.sampled_from(["scalar", "array", "array-of", "object", "enum", "any"]))
    if kind == "scalar":
        t = draw(_SCALAR)
        schema, back = {"type": t}, {"type": t}
    elif kind == "array":
        schema, back = {"type": "array"}, {"type": "array"}
    elif kind == "array-of":
        t = draw(_SCALAR)
        schema, back = {"type": "array", "items": {"type": t}}, {"type": "array", "items": {"type": t}}
    elif kind == "object":  # nested properties are not expressible as a type hint: "object"
        schema, back = {"type": "object", "properties": {"x": {"type": "string"}}}, {"type": "object"}
    elif kind == "enum":
        values = draw(st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), min_size=1, max_size=3, unique=True))
        schema, back = {"type": "string", "enum": values}, {"type": "string", "enum": values}
    else:
        schema, back = {}, {}
    description = draw(_WORDS)
    if description:
        schema["description"] = description
    return schema, back


@given(
    name=_IDENT,
    description=_WORDS,
    args=st.dictionaries(_IDENT, _arg_schema(), max_size=4),
    required=st.sets(st.integers(0, 3)),
)
@settings(max_examples=60, deadline=None)
def test_tool_method_schema_is_the_tools_schema_as_trl_reads_it(
    name: str, description: str, args: dict[str, Any], required: set[int]
) -> None:
    names = list(args)
    required_names = [n for i, n in enumerate(names) if i in required]
    parameters = {"type": "object", "properties": {n: s for n, (s, _) in args.items()}, "required": required_names}
    schema = get_json_schema(tool_method(_tool(name, parameters, description)))["function"]
    assert schema["name"] == name
    assert schema["description"] == (" ".join(description.split()) or f"The {name} tool.")
    assert sorted(schema["parameters"].get("required", [])) == sorted(required_names)
    properties = schema["parameters"]["properties"]
    assert list(properties) == names
    for arg, (given_schema, back) in args.items():
        got = dict(properties[arg])
        expected = " ".join(given_schema.get("description", "").split()) or f"The {arg} argument."
        assert got.pop("description") == expected
        assert got == back


@pytest.mark.parametrize(
    ("name", "parameters", "match"),
    [
        ("reset", {"properties": {}}, "reserves"),
        ("get_reward", {"properties": {}}, "reserves"),
        ("web-search", {"properties": {}}, "Python method"),
        ("_hidden", {"properties": {}}, "Python method"),
        ("lookup", {"properties": {"class": {"type": "string"}}}, "Python method"),
        ("lookup", {"properties": {"self": {"type": "string"}}}, "'self'"),
        ("lookup", {"properties": {"q": {"type": "tensor"}}}, "unsupported JSON schema type"),
    ],
    ids=["reset", "get_reward", "dash", "private", "keyword-arg", "self-arg", "unknown-type"],
)
def test_tools_that_cannot_be_methods_are_config_errors(name: str, parameters: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        tool_method(_tool(name, parameters))


def test_an_env_without_tools_is_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigError, match="GemRollout"):
        tool_environment_factory("core:NumberGuess-v0")


# ---------------------------------------------------------------- episodes


@pytest.fixture
def factory() -> Any:
    with tool_environment_factory(ENV_ID, **ENV_KWARGS) as f:
        yield f


def test_the_class_exposes_exactly_reset_and_the_tools(factory: Any) -> None:
    import inspect

    public = {n for n, _ in inspect.getmembers(factory.environment_class, inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "python"}  # what TRL's environment_factory reads
    schema = get_json_schema(factory().python)["function"]
    assert schema["parameters"]["required"] == ["code"]


@pytest.mark.parametrize(
    ("env_id", "tool", "arguments", "expected"),
    [
        ("math:Sample-v0-python", "python", {"code": "print(2 ** 10)"}, "1024"),
        ("qa:Sample-v0-search", "search", {"query": "capital of France"}, "Paris"),
    ],
    ids=["math-python", "qa-search"],
)
def test_any_tool_env_gives_its_tools_schemas_to_trl(
    env_id: str, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    with tool_environment_factory(env_id) as factory:
        env = factory()
        own = env.tools[tool].parameters
        trl = get_json_schema(getattr(env, tool))["function"]
        assert trl["description"] == env.tools[tool].description
        assert trl["parameters"]["required"] == own["required"]
        for name, spec in own["properties"].items():
            assert trl["parameters"]["properties"][name]["type"] == spec["type"]
            assert trl["parameters"]["properties"][name]["description"] == spec["description"]
        env.reset(seed=0)
        assert expected in getattr(env, tool)(**arguments)
        assert env.episode.tool_calls == [{"name": tool, "ok": True, "error": None}]


def test_reset_needs_a_seed_and_is_deterministic(factory: Any) -> None:
    first, second = factory(), factory()
    with pytest.raises(ConfigError, match="seed"):
        first.reset(prompt=[{"role": "user", "content": ""}])
    assert first.reset(seed=3, prompt=[]) == second.reset(seed=3)
    assert "<python>" not in first.episode.observation  # the tools reach the model through the chat template


def test_tool_calls_keep_the_wrappers_budget_and_rewards(factory: Any) -> None:
    env = factory()
    with pytest.raises(ResetNeeded):
        env.python(code="print(1)")
    env.reset(seed=0)
    assert env.python(code="print(6 * 7)").strip() == "42"
    with pytest.raises(ToolError, match=r"missing|required|code"):
        env.python()  # a failed call: raised so TRL counts it, the model sees the message
    with pytest.raises(ToolError, match="no tool calls left"):
        env.python(code="print(1)")
    episode = env.episode
    assert [c["ok"] for c in episode.tool_calls] == [True, False, False]
    assert episode.tool_reward == pytest.approx(-0.1)  # error_reward of the one executed failure
    assert not episode.finished and episode.info == {}  # not graded yet
    graded = env._finish("\\boxed{0}")
    assert graded.finished and graded.terminated and not graded.truncated
    assert env._finish("ignored") is graded  # graded once
    with pytest.raises(ResetNeeded):
        env.python(code="print(1)")


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ([{"role": "assistant", "content": "\\boxed{3}"}], "\\boxed{3}"),
        ([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "ab"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}], None),
        ([{"role": "assistant", "content": "x", "tool_calls": []}, {"role": "tool", "content": "1"}], None),
        ([], None),
    ],
    ids=["text", "parts", "ends-on-call", "ends-on-tool-result", "empty"],
)
def test_final_answer(completion: list[dict[str, Any]], expected: str | None) -> None:
    assert final_answer(completion) == expected


def test_an_episode_without_final_answer_is_truncated_with_tool_reward_only(factory: Any) -> None:
    env = factory()
    env.reset(seed=1)
    with pytest.raises(ToolError):
        env.python(code="raise SystemExit(3)")
    episode = env._finish(None)
    assert episode.truncated and not episode.terminated and episode.reward == pytest.approx(-0.1)


# ---------------------------------------------------------------- a real GRPOTrainer


def _tool_call(code: str | None) -> str:
    arguments = {} if code is None else {"code": code}
    return "<tool_call>\n" + json.dumps({"name": "python", "arguments": arguments}) + "\n</tool_call>"


class ScriptedPolicy:
    """``model.generate`` for the tool loop: per problem a plan of tool calls, then a boxed answer.

    Plans by order of first appearance: no call; one call; three calls over two turns (two in one
    message, one of them malformed, the third over the budget of two); more call turns than TRL's
    ``max_tool_calling_iterations`` (the rollout ends on a call: no final answer). The answer is right
    or wrong at random (seeded), so a group's rewards differ and the loss has a signal.
    """

    PLANS: ClassVar[list[list[list[str | None]]]] = [
        [],
        [["print(6 * 7)"]],
        [["print(1)", None], ["print(2)"]],
        [["print(3)"]] * 5,  # more call turns than max_tool_calling_iterations: no final answer
    ]

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.rng = random.Random(0)
        self.first_seen: dict[int, int] = {}
        self.answers: list[tuple[int, bool]] = []

    def plan(self, problem: int) -> list[list[str | None]]:
        # by order of first appearance: the first problems trained on cover every plan
        order = self.first_seen.setdefault(problem, len(self.first_seen))
        return self.PLANS[order % len(self.PLANS)]

    def reply(self, prompt: str) -> str:
        problem = next(i for i, p in enumerate(PROBLEMS) if p["problem"] in prompt)
        # calls already made: in the conversation after the first assistant header (the system prompt names the tag)
        _, _, history = prompt.partition("<|im_start|>assistant")
        made_before = history.count("<tool_call>")
        turns_done, made = 0, 0
        for calls in self.plan(problem):
            if made >= made_before:
                break
            made += len(calls)
            turns_done += 1
        plan = self.plan(problem)
        if turns_done < len(plan):
            return "\n".join(_tool_call(code) for code in plan[turns_done])
        right = self.rng.random() < 0.5
        self.answers.append((problem, right))
        return f"The answer is \\boxed{{{PROBLEMS[problem]['answer'] if right else '-1'}}}"

    def generate(self, input_ids: Any, attention_mask: Any, generation_config: Any, **_: Any) -> Any:
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            prompt = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
            new = [*self.tokenizer.encode(self.reply(prompt), add_special_tokens=False), self.tokenizer.eos_token_id]
            rows.append(new[: generation_config.max_new_tokens])
        longest = max(len(r) for r in rows)
        pad = generation_config.pad_token_id
        new_ids = torch.tensor([r + [pad] * (longest - len(r)) for r in rows], dtype=torch.long)
        return torch.cat([input_ids, new_ids.to(input_ids.device)], dim=1)


def _tokenizer() -> Any:
    corpus = [p["problem"] for p in PROBLEMS] + [qwen3_chat_template, _tool_call("print(6 * 7)"), "The answer is"]
    tokenizer = build_chat_tokenizer("chatml", vocab_size=1200, corpus=corpus * 2)
    tokenizer.chat_template = qwen3_chat_template  # TRL knows its response template: tool calls get parsed
    return tokenizer


class RecordingTrainer(GRPOTrainer):
    records: list[tuple[list[dict[str, Any]], dict[str, Any], list[Any]]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        episodes = [env.episode for env in self.environments]
        summary = [(e.seed, e.reward, len(e.tool_calls), e.truncated) for e in episodes]
        self.records.append(([dict(x) for x in inputs], out, summary))
        # TRL's reward column for this batch (its log keeps the latest generation batch)
        self.trl_rewards.append(list(self._logs["rewards"][f"gem_reward:{ENV_ID}"]))
        return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tokenizer = _tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    policy = ScriptedPolicy(tokenizer)
    model.generate = policy.generate
    factory = tool_environment_factory(ENV_ID, **ENV_KWARGS)
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("env-factory")),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=2,
        learning_rate=5e-3,
        max_completion_length=384,
        max_tool_calling_iterations=3,
        seed=0,
    )
    trainer = RecordingTrainer(
        model=model,
        args=args,
        train_dataset=factory.dataset(6),
        processing_class=tokenizer,
        environment_factory=factory,
        reward_funcs=[factory.reward],
    )
    trainer.records, trainer.trl_rewards = [], []
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    yield trainer, factory, policy, before
    factory.close()


def test_several_real_steps_with_finite_loss_and_moved_weights(trained: Any) -> None:
    trainer, _, _, before = trained
    assert trainer.state.global_step == 3
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


def test_zero_one_and_odd_tool_call_episodes_are_graded_by_the_env(trained: Any) -> None:
    trainer, _, policy, _ = trained
    seen_calls = set()
    for (inputs, _, episodes), trl_rewards in zip(trainer.records, trainer.trl_rewards, strict=True):
        for x, (seed, _, calls, truncated) in zip(inputs, episodes, strict=True):
            assert seed == x["seed"]
            seen_calls.add((calls, truncated))
        # TRL's reward is the env's episode reward, row for row
        assert trl_rewards == pytest.approx([reward for _, reward, _, _ in episodes])
    # zero, one, odd (three, one over budget) calls, and a rollout TRL's iteration limit cut on a call
    assert {(0, False), (1, False), (3, False), (3, True)} <= seen_calls
    assert policy.answers, "the env never saw a final answer"


def test_rewards_are_the_envs_grades(trained: Any) -> None:
    trainer, _, _, _ = trained
    import gem_core

    grader = gem_core.make("math:Sample-v0")  # the same env without tools grades the same answer independently
    try:
        episodes = [env.episode for env in trainer.environments]  # the last batch's rollouts
        cut = [e for e in episodes if e.answer is None]
        assert all(e.truncated and not e.terminated and e.env_reward == 0 for e in cut)
        for episode in episodes:
            failed = [c for c in episode.tool_calls if not c["ok"] and "no tool calls left" not in c["error"]]
            assert episode.finished and episode.tool_reward == pytest.approx(-0.1 * len(failed))
            if episode.answer is None:
                continue
            assert episode.terminated and not episode.truncated
            assert "\\boxed{" in episode.answer
            grader.reset(seed=episode.seed)
            _, grade, _, _, _ = grader.step(episode.answer)
            assert episode.env_reward == grade
            assert episode.reward == pytest.approx(grade - 0.1 * len(failed))
    finally:
        grader.close()
    grades = {reward for _, _, episodes in trainer.records for _, reward, _, _ in episodes}
    assert len(grades) > 1, "every rollout got the same reward: no signal"
    logged = [e for e in trainer.state.log_history if f"rewards/gem_reward:{ENV_ID}/mean" in e]
    assert len(logged) == 3
    assert any(e.get("tools/call_frequency", 0) > 0 for e in logged)
    assert any(e.get("tools/failure_frequency", 0) > 0 for e in logged)  # the malformed and over-budget calls
    assert all(f"gem/{ENV_ID}/tool_calls" in e for e in logged)


def test_environment_objects_are_gem_tool_environments(trained: Any) -> None:
    trainer, factory, _, _ = trained
    assert all(isinstance(env, GemToolEnvironment) for env in trainer.environments)
    assert len(factory.environments) >= 4  # one per concurrent rollout, pooled by TRL


# ---------------------------------------------------------------- several envs in one run (TRL's dict factory)

QA_ID = "qa:Sample-v0-search"
QUESTIONS = [
    json.loads(line)
    for line in (Path(gem_qa.__file__).parent / "samples" / "qa.jsonl").read_text().splitlines()
    if line.strip()
]
# Different reward scales: math grades 0 or 1; QA grades the token F1 (fractions) and pays 0.25 per good search.
MULTI: dict[str, tuple[str, dict[str, Any]]] = {
    "math": (ENV_ID, {"tool_wrapper": {"max_tool_calls": 2}}),
    "qa": (QA_ID, {"metric": "f1", "tool_wrapper": {"success_reward": 0.25}}),
}
SEARCH_REWARD = 0.25


class TwoEnvPolicy:
    """``model.generate`` for both envs: math answers at once; QA searches once, then answers.

    Answers are right, half right (QA: the answer plus extra words, a fractional F1) or wrong, at
    random (seeded); each final answer is recorded with the env it was given to.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.rng = random.Random(1)
        self.answers: dict[tuple[str, str], str] = {}  # (env name, text of the problem) -> last answer given

    def reply(self, prompt: str) -> str:
        _, _, history = prompt.partition("<|im_start|>assistant")
        math = next((p for p in PROBLEMS if p["problem"] in prompt), None)
        if math is not None:
            answer = math["answer"] if self.rng.random() < 0.5 else "-1"
            text = f"The answer is \\boxed{{{answer}}}"
            self.answers[("math", math["problem"])] = text
            return text
        qa = next(q for q in QUESTIONS if q["question"] in prompt)
        if "<tool_call>" not in history:
            call = {"name": "search", "arguments": {"query": qa["question"]}}
            return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
        reference = qa["answer"][0] if isinstance(qa["answer"], list) else qa["answer"]
        answer = self.rng.choice([reference, f"{reference} or so they say", "nobody knows"])
        text = f"<answer>{answer}</answer>"
        self.answers[("qa", qa["question"])] = text
        return text

    def generate(self, input_ids: Any, attention_mask: Any, generation_config: Any, **_: Any) -> Any:
        return ScriptedPolicy.generate(self, input_ids, attention_mask, generation_config)  # type: ignore[arg-type]


class MultiRecordingTrainer(GRPOTrainer):
    """Keeps, per generation batch, the rows, their envs' episodes and TRL's per-function reward columns."""

    batches: list[tuple[list[dict[str, Any]], list[Any], dict[str, list[float]]]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        columns = {name: list(values) for name, values in self._logs["rewards"].items()}
        self.batches.append(([dict(x) for x in inputs], [env.episode for env in self.environments], columns))
        return out


def _true_reward(name: str, episode: Any) -> float:
    """What the episode is worth, graded again by a fresh env without tools, plus the search calls' pay."""
    env_id, kwargs = {"math": ("math:Sample-v0", {}), "qa": ("qa:Sample-v0", {"metric": "f1"})}[name]
    grader = gem_core.make(env_id, **kwargs)
    try:
        grader.reset(seed=episode.seed)
        _, grade, _, _, _ = grader.step(episode.answer)
    finally:
        grader.close()
    return float(grade) + SEARCH_REWARD * sum(call["ok"] for call in episode.tool_calls)


@pytest.fixture(scope="module")
def trained_two_envs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    corpus = [p["problem"] for p in PROBLEMS] + [q["question"] for q in QUESTIONS]
    corpus += [qwen3_chat_template, _tool_call("print(1)"), "The answer is", "<answer>nobody knows</answer>"]
    tokenizer = build_chat_tokenizer("chatml", vocab_size=1500, corpus=corpus * 2)
    tokenizer.chat_template = qwen3_chat_template
    model = build_tiny_model(tokenizer, seed=0)
    policy = TwoEnvPolicy(tokenizer)
    model.generate = policy.generate
    envs = tool_environment_factories(MULTI)
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("two-envs")),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=2,
        per_device_train_batch_size=8,  # every step: all four prompts (two per env), two rollouts each
        num_generations=2,
        learning_rate=1e-3,
        max_completion_length=384,
        max_tool_calling_iterations=2,
        seed=0,
    )
    trainer = MultiRecordingTrainer(
        model=model,
        args=args,
        train_dataset=envs.dataset(2),
        processing_class=tokenizer,
        environment_factory=envs.factories,
        reward_funcs=envs.rewards,
    )
    trainer.batches = []
    trainer.train()
    yield trainer, envs
    envs.close()


def test_two_envs_each_reward_function_scores_only_its_own_rows(trained_two_envs: Any) -> None:
    trainer, _ = trained_two_envs
    assert trainer.reward_func_names == ["gem_reward:math", "gem_reward:qa"]  # one log column set per env
    assert len(trainer.batches) == 2
    for inputs, episodes, columns in trainer.batches:
        assert sorted(x["environment"] for x in inputs) == ["math"] * 4 + ["qa"] * 4
        for i, (x, episode) in enumerate(zip(inputs, episodes, strict=True)):
            assert episode.seed == x["seed"] and episode.finished and episode.answer is not None
            mine = f"gem_reward:{x['environment']}"
            other = "gem_reward:qa" if mine == "gem_reward:math" else "gem_reward:math"
            assert columns[mine][i] == pytest.approx(_true_reward(x["environment"], episode))
            assert math.isnan(columns[other][i])  # None from the other env's function: TRL leaves it out
        qa_calls = [e.tool_calls for x, e in zip(inputs, episodes, strict=True) if x["environment"] == "qa"]
        assert all(calls == [{"name": "search", "ok": True, "error": None}] for calls in qa_calls)


def test_two_envs_logged_rewards_are_the_envs_true_values(trained_two_envs: Any) -> None:
    """The logged per-env means and the total are what the envs give: the bug logged about twice the true total."""
    trainer, _ = trained_two_envs
    logged = [e for e in trainer.state.log_history if "reward" in e and "loss" in e]
    assert len(logged) == 2
    scales = set()
    for entry, (inputs, episodes, _) in zip(logged, trainer.batches, strict=True):
        truth = {"math": [], "qa": []}  # type: dict[str, list[float]]
        for x, episode in zip(inputs, episodes, strict=True):
            truth[x["environment"]].append(_true_reward(x["environment"], episode))
        for name, values in truth.items():
            assert entry[f"rewards/gem_reward:{name}/mean"] == pytest.approx(sum(values) / len(values), abs=1e-6)
            assert f"gem/{name}/tool_calls" in entry
            scales.add((name, tuple(sorted(set(values)))))
        everything = truth["math"] + truth["qa"]
        assert entry["reward"] == pytest.approx(sum(everything) / len(everything), abs=1e-6)
    qa_values = {v for name, values in scales if name == "qa" for v in values}
    assert any(v % 1 for v in qa_values), "no fractional QA reward: the scales were not different"


def test_a_reward_function_gives_none_to_other_envs_rows_and_never_grades_them() -> None:
    """Forgery: another env's finished episode (worth a full reward) must not reach this function's column."""
    with tool_environment_factories(MULTI) as envs:
        math_env, qa_env = envs.factories["math"](), envs.factories["qa"]()
        problem = next(p for p in PROBLEMS if p["problem"] in math_env.reset(seed=0))
        question = next(q for q in QUESTIONS if q["question"] in qa_env.reset(seed=0))
        qa_answer = [{"role": "assistant", "content": f"<answer>{question['answer'][0]}</answer>"}]
        right = [{"role": "assistant", "content": f"\\boxed{{{problem['answer']}}}"}]
        math_rewards = envs.factories["math"].reward(completions=[right, qa_answer], environments=[math_env, qa_env])
        assert math_rewards == [1.0, None]
        assert not qa_env.episode.finished  # the math function did not grade the QA rollout
        qa_rewards = envs.factories["qa"].reward(completions=[right, qa_answer], environments=[math_env, qa_env])
        assert qa_rewards == [None, 1.0]


def test_two_factories_with_one_name_are_refused_at_the_first_batch() -> None:
    first, second = tool_environment_factory(ENV_ID), tool_environment_factory(ENV_ID)
    try:
        a, b = first(), second()
        a.reset(seed=0)
        b.reset(seed=0)
        done = [{"role": "assistant", "content": "\\boxed{1}"}]
        with pytest.raises(ConfigError, match="two environment factories are named 'math:Sample-v0-python'"):
            first.reward(completions=[done, done], environments=[a, b])
    finally:
        first.close()
        second.close()
    renamed = tool_environment_factory(ENV_ID, name="easy")
    try:
        assert renamed.reward.__name__ == "gem_reward:easy"
    finally:
        renamed.close()


@pytest.mark.parametrize(
    ("num_prompts", "match"),
    [({"math": 1}, "give every one"), (0, "num_prompts must be >= 1")],
    ids=["missing-env", "zero"],
)
def test_multi_env_dataset_refusals(num_prompts: Any, match: str) -> None:
    with tool_environment_factories(MULTI) as envs, pytest.raises(ConfigError, match=match):
        envs.dataset(num_prompts)
    with pytest.raises(ConfigError, match="at least one env"):
        tool_environment_factories({})
