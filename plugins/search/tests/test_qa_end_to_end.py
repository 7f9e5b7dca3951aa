"""QA with search, end to end: a scripted policy searches, reads the passages, then answers.

The env is a small QA task on ``gem_core.testing.GenericTestEnv`` (the real QA envs live in
another distribution); the tool goes through ``ToolEnvWrapper`` by its registered name.
The policy takes its answer out of the retrieved text, so a search that finds nothing scores 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from gem_tool_search import SearchTool

from gem_core.testing import GenericTestEnv, NumberGuessEnv, check_env
from gem_core.tools import ToolEnvWrapper

QUESTIONS = [
    ("What is the capital of Kenya?", "Nairobi"),
    ("What is the capital of Australia?", "Canberra"),
    ("What is the chemical symbol of silver?", "Ag"),
    ("What is the atomic number of iron?", "26"),
    ("What is the capital of Peru?", "Lima"),
]

#: How the scripted policy reads an answer out of the passages: question pattern -> passage pattern.
READERS = [
    (r"capital of (\w+)", r"{}[^<]*?Its capital is ([^.]+)\."),
    (r"symbol of (\w+)", r"(?i:{}) is a chemical element with the symbol (\w+)"),
    (r"atomic number of (\w+)", r"(?i:{}) is a chemical element[^.]*atomic number (\d+)"),
]


def qa_env(question: str, gold: str) -> GenericTestEnv:
    def reset(env: GenericTestEnv, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        return f"Answer the question. Put the answer in <answer></answer>.\nQuestion: {question}", {}

    def step(env: GenericTestEnv, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        found = re.findall(r"<answer>(.*?)</answer>", action, re.S)
        correct = bool(found) and found[-1].strip().lower() == gold.lower()
        return "", 1.0 if correct else 0.0, True, False, {"success": correct}

    return GenericTestEnv(reset_func=reset, step_func=step)


def scripted_policy(question: str, observation: str, turn: int, syntax: str) -> str:
    if turn == 0:
        if syntax == "json":
            call = json.dumps({"name": "search", "arguments": {"query": question}})
            return f"Let me look it up. <tool_call>{call}</tool_call>"
        return f"Let me look it up. <search>{question}</search>"
    for asks, reads in READERS:
        if (match := re.search(asks, question)) and (found := re.search(reads.format(match.group(1)), observation)):
            return f"<answer>{found.group(1)}</answer>"
    return "<answer>unknown</answer>"


def play(env: ToolEnvWrapper, question: str, syntax: str = "tag") -> tuple[float, list[dict[str, Any]]]:
    obs, info = env.reset(seed=0)
    assert "search" in obs and info["tools"][0]["function"]["name"] == "search"
    total, infos = 0.0, []
    for turn in range(4):
        obs, reward, terminated, truncated, info = env.step(scripted_policy(question, obs, turn, syntax))
        total += reward
        infos.append(info)
        if terminated or truncated:
            break
    return total, infos


@pytest.mark.parametrize(("question", "gold"), QUESTIONS, ids=[g for _, g in QUESTIONS])
@pytest.mark.parametrize("syntax", ["tag", "json"])
def test_search_then_answer_scores(question: str, gold: str, syntax: str) -> None:
    env = ToolEnvWrapper(qa_env(question, gold), tools=["search"], max_tool_calls=3)
    reward, infos = play(env, question, syntax)
    env.close()
    assert reward == 1.0
    assert infos[0]["tool_calls"] == 1 and infos[0]["observation_role"] == "tool" and infos[0]["tool_results"][0]["ok"]
    assert infos[-1]["success"] is True


def test_without_relevant_passages_the_policy_fails(tmp_path: Path) -> None:
    corpus = tmp_path / "unrelated.jsonl"
    corpus.write_text('{"id": "1", "title": "Cooking", "text": "Boil pasta in salted water."}\n')
    question, gold = QUESTIONS[0]
    tool = SearchTool(corpus=corpus)
    env = ToolEnvWrapper(qa_env(question, gold), tools=[tool])
    reward, infos = play(env, question)
    env.close()
    tool.close()
    assert reward == 0.0 and infos[-1]["success"] is False


def test_episode_reuses_one_tool_across_resets() -> None:
    tool = SearchTool(top_k=2)
    question, gold = QUESTIONS[1]
    env = ToolEnvWrapper(qa_env(question, gold), tools=[tool])
    assert [play(env, question)[0] for _ in range(3)] == [1.0, 1.0, 1.0]
    env.close()
    assert tool.batches_sent == 3
    tool.close()


def test_wrapped_env_with_search_passes_check_env() -> None:
    def factory() -> ToolEnvWrapper:
        return ToolEnvWrapper(NumberGuessEnv(), tools=["search"])

    check_env(factory(), env_factory=factory)
