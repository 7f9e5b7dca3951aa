from __future__ import annotations

from typing import Any

import pytest

from gem_core.core import StepReturn
from gem_core.errors import ConfigError
from gem_core.testing import GenericTestEnv
from gem_core.wrappers import CHAT_MODES, ChatHistory


def scripted(env: GenericTestEnv, action: str) -> StepReturn:
    """Turn 2 is answered by a tool (info['tool_calls'] > 0); turn 4 ends the episode."""
    info: dict[str, Any] = {"tool_calls": 1} if env.t == 2 else {}
    return f"obs{env.t}", 0.0, env.t >= 4, False, info


def make_env(**kwargs: Any) -> ChatHistory:
    return ChatHistory(GenericTestEnv(reset_func=lambda e, s, o: ("task", {}), step_func=scripted), **kwargs)


def play(env: ChatHistory, actions: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out = [env.reset(seed=0)]
    for action in actions:
        obs, *_, info = env.step(action)
        out.append((obs, info))
    return out


def test_messages_have_roles_including_tool() -> None:
    env = make_env(system_prompt="be brief")
    *_, (_, info) = play(env, ["a1", "a2", "a3"])
    assert info["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "obs1"},
        {"role": "assistant", "content": "a2"},
        {"role": "tool", "content": "obs2"},
        {"role": "assistant", "content": "a3"},
        {"role": "user", "content": "obs3"},
    ]


def test_chat_mode_without_tokenizer_returns_raw_observation() -> None:
    steps = play(make_env(), ["a1", "a2"])
    assert [obs for obs, _ in steps] == ["task", "obs1", "obs2"]
    assert "prompt_delta" not in steps[-1][1]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("observation", "task\nobs1\nobs2"),
        ("concat", "task\nobs1\nobs2"),
        ("observation_action", "task\na1\nobs1\na2\nobs2"),
        ("concat_with_action", "task\na1\nobs1\na2\nobs2"),
        ("chat_first_turn", "task\na1\nobs1\na2\nobs2"),
    ],
    ids=["observation", "gem-concat", "observation_action", "gem-concat_with_action", "chat_first_turn-no-tokenizer"],
)
def test_plain_text_modes(mode: str, expected: str) -> None:
    assert play(make_env(mode=mode), ["a1", "a2"])[-1][0] == expected


def test_history_limit_keeps_task_and_last_exchanges() -> None:
    env = make_env(mode="observation_action", max_history=1, system_prompt="sys")
    obs, info = play(env, ["a1", "a2", "a3"])[-1]
    assert obs == "sys\ntask\na3\nobs3"
    assert [m["content"] for m in info["messages"]] == ["sys", "task", "a3", "obs3"]
    assert len(env.conversation.messages) == 8  # the full history is kept, only the view is limited


def test_history_limit_zero_keeps_only_the_task() -> None:
    assert play(make_env(mode="observation", max_history=0), ["a1", "a2"])[-1][0] == "task"


def test_reset_starts_a_new_conversation() -> None:
    env = make_env()
    play(env, ["a1", "a2"])
    _, info = env.reset(seed=1)
    assert info["messages"] == [{"role": "user", "content": "task"}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "fancy"}, "unknown chat mode 'fancy'"),
        ({"max_history": -1}, "max_history must be >= 0"),
        ({"incremental": True}, "incremental=True needs mode='chat' and a tokenizer"),
    ],
    ids=["mode", "max_history", "incremental-without-tokenizer"],
)
def test_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_env(**kwargs)


def test_gem_mode_names_are_aliases() -> None:
    assert {CHAT_MODES[k] for k in ("concat", "concat_with_action", "concat_chat", "concat_chat_on_reset")} == {
        "observation",
        "observation_action",
        "chat",
        "chat_first_turn",
    }


# ------------------------------------------------------------------ with a real tokenizer


def test_chat_mode_renders_through_the_template(chat_tokenizer: Any) -> None:
    env = make_env(tokenizer=chat_tokenizer, system_prompt="sys")
    steps = play(env, ["a1", "a2", "a3"])
    for obs, info in steps:
        rendered = chat_tokenizer.apply_chat_template(info["messages"], tokenize=False, add_generation_prompt=True)
        assert obs == rendered
    assert steps[-1][0].endswith(
        "<|im_start|>tool\nobs2<|im_end|>\n<|im_start|>assistant\na3<|im_end|>\n"
        "<|im_start|>user\nobs3<|im_end|>\n<|im_start|>assistant\n"
    )


def test_prompt_delta_extends_the_previous_prompt(chat_tokenizer: Any) -> None:
    env = make_env(tokenizer=chat_tokenizer, system_prompt="sys")
    prompt, _ = env.reset(seed=0)
    for action in ["a1", "a2", "a3"]:
        obs, *_, info = env.step(action)
        assert prompt + action + info["prompt_delta"] == obs
        prompt = obs


def test_incremental_mode_returns_only_deltas(chat_tokenizer: Any) -> None:
    env = make_env(tokenizer=chat_tokenizer, incremental=True)
    text, _ = env.reset(seed=0)
    for action in ["a1", "a2"]:
        delta, *_, info = env.step(action)
        text += action + delta
    full = chat_tokenizer.apply_chat_template(info["messages"], tokenize=False, add_generation_prompt=True)
    assert text == full


def test_chat_first_turn_templates_only_the_opening(chat_tokenizer: Any) -> None:
    env = make_env(mode="chat_first_turn", tokenizer=chat_tokenizer)
    obs, _ = play(env, ["a1"])[-1]
    assert obs == "<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\na1\nobs1"
