"""The env module's rules, without RL2: text protocol, stops and cuts, limits, errors, threads."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from gem_rl2 import episodes as episodes_module
from gem_rl2.episodes import EPISODE_KEY, SETTINGS_ENV, RL2Episodes, Settings, default_episodes

from gem_core.chat import ChatRenderer
from gem_core.core import Env
from gem_core.episode import INVALID_ACTION
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.testing_tokenizers import build_chat_tokenizer

ROW = {"env_id": "core:NumberGuess-v0", "seed": 3, "env_kwargs": "", "wrappers": "", "options": "", "system_prompt": ""}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def table(tokenizer: Any, **settings: Any) -> RL2Episodes:
    return RL2Episodes(tokenizer, Settings(tokenizer="unused", **{"max_turns": 8, **settings}))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_reset_renders_the_first_prompt_and_tags_the_episode(tokenizer: Any) -> None:
    episodes = table(tokenizer)
    state, info = run(episodes.reset({**ROW, "system_prompt": "Be brief."}))
    assert state.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert state.endswith("<|im_start|>assistant\n")
    assert info[EPISODE_KEY].startswith("core:NumberGuess-v0/seed=3#")
    assert {k: info[k] for k in ROW} == {**ROW, "system_prompt": "Be brief."}
    assert episodes.running == 1


def test_a_stopped_action_extends_the_text_by_the_bridge_without_repeating_the_stop(tokenizer: Any) -> None:
    episodes = table(tokenizer)

    async def play() -> tuple[str, dict[str, Any]]:
        state, info = await episodes.reset(ROW)
        return state, await episodes.step(state, "My guess is 8<|im_end|>", info, "stop")

    state, out = run(play())
    episode_id = out["extra_info"][EPISODE_KEY]
    session = episodes._live[episode_id].session
    assert session.turns[0].action == "My guess is 8"
    reply = session.messages[-1]["content"]
    bridge = ChatRenderer(tokenizer).bridge_text([{"role": "user", "content": reply}])
    assert out["next_state"] == state + "My guess is 8" + bridge  # the template's own text, stop once
    assert out["done"] is False
    assert out["reward"] == session.turns[0].reward == out["score"]


def test_another_eos_of_the_model_also_ends_a_reply(tokenizer: Any) -> None:
    episodes = RL2Episodes(tokenizer, Settings(tokenizer="unused", max_turns=8), extra_stop_texts=["<|endoftext|>"])

    async def play() -> tuple[str, dict[str, Any]]:
        state, info = await episodes.reset(ROW)
        return state, await episodes.step(state, "My guess is 8<|endoftext|>", info, "stop")

    state, out = run(play())
    session = episodes._live[out["extra_info"][EPISODE_KEY]].session
    assert (session.turns[0].action, session.turns[0].stop_reason) == ("My guess is 8", "stop")
    # not the template's footer: the whole footer follows it, as the engine's token bridge would
    assert out["next_state"].startswith(state + "My guess is 8<|endoftext|><|im_end|>\n")


def test_the_generation_configs_eos_tokens_are_read(tmp_path: Any, tokenizer: Any) -> None:
    from transformers import GenerationConfig

    assert episodes_module._generation_eos_texts(str(tmp_path), tokenizer) == []
    GenerationConfig(eos_token_id=[tokenizer.convert_tokens_to_ids("<|endoftext|>"), 2]).save_pretrained(tmp_path)
    texts = episodes_module._generation_eos_texts(str(tmp_path), tokenizer)
    assert texts == ["<|endoftext|>", tokenizer.convert_ids_to_tokens(2)]


@pytest.mark.parametrize(("on_cut", "env_sees"), [("invalid", INVALID_ACTION), ("pass", "My guess is 12")])
def test_an_action_without_the_stop_was_cut(tokenizer: Any, on_cut: str, env_sees: str) -> None:
    episodes = table(tokenizer, on_cut=on_cut)

    async def play() -> tuple[str, dict[str, Any]]:
        state, info = await episodes.reset(ROW)
        return state, await episodes.step(state, "My guess is 12", info, "length")

    state, out = run(play())
    session = episodes._live[out["extra_info"][EPISODE_KEY]].session
    assert session.turns[0].action == env_sees
    assert session.turns[0].stop_reason == "length"
    # nothing was sampled after the cut: the whole footer follows
    assert out["next_state"].startswith(state + "My guess is 12<|im_end|>\n<|im_start|>user\n")


def test_on_cut_truncate_ends_the_episode_without_stepping(tokenizer: Any) -> None:
    episodes = table(tokenizer, on_cut="truncate")

    async def play() -> dict[str, Any]:
        state, info = await episodes.reset(ROW)
        return await episodes.step(state, "My guess", info, "length")

    out = run(play())
    episode = episodes.finished[out["extra_info"][EPISODE_KEY]]
    assert out["done"] is True and out["reward"] == 0.0
    assert episode.turns[-1].truncated and episode.metadata["end_reason"] == "cut"


def test_max_turns_truncates_at_rl2s_turn_limit(tokenizer: Any) -> None:
    episodes = table(tokenizer, max_turns=3)

    async def play() -> list[dict[str, Any]]:
        state, info = await episodes.reset({**ROW, "env_kwargs": json.dumps({"max_turns": 10})})
        outs = []
        for _ in range(3):
            out = await episodes.step(state, "My guess is 0<|im_end|>", info, "stop")
            outs.append(out)
            state, info = out["next_state"], out["extra_info"]
        return outs

    outs = run(play())
    assert [o["done"] for o in outs] == [False, False, True]
    episode = episodes.finished[outs[-1]["extra_info"][EPISODE_KEY]]
    assert [t.truncated for t in episode.turns] == [False, False, True]
    assert episode.metadata["end_reason"] == "max_turns"
    assert episodes.running == 0


def test_a_step_for_an_unknown_or_finished_episode_is_refused(tokenizer: Any) -> None:
    episodes = table(tokenizer)
    with pytest.raises(TrajectoryError, match="not running here"):
        run(episodes.step("s", "a", {**ROW, EPISODE_KEY: "nope"}, "stop"))
    with pytest.raises(TrajectoryError, match="reset"):
        run(episodes.step("s", "a", ROW, "stop"))


@pytest.mark.parametrize(
    ("row", "match"),
    [
        pytest.param({"seed": 1}, "no env_id", id="no-env-id"),
        pytest.param({**ROW, "seed": True}, "seed must be an int", id="bool-seed"),
        pytest.param({**ROW, "seed": "3"}, "seed must be an int", id="string-seed"),
        pytest.param({**ROW, "env_kwargs": "{bad"}, "env_kwargs is not JSON", id="bad-json"),
        pytest.param({**ROW, "env_kwargs": "[1]"}, "env_kwargs must be a JSON dict", id="kwargs-not-object"),
        pytest.param({**ROW, "wrappers": "{}"}, "wrappers must be a JSON list", id="wrappers-not-list"),
    ],
)
def test_bad_rows_are_named(tokenizer: Any, row: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        run(table(tokenizer).reset(row))


class Flaky(Env):
    """Fails on its second step; records the thread of each call."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.closed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.threads.append(threading.get_ident())
        return "Say something.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.threads.append(threading.get_ident())
        if len(self.threads) > 2:
            raise RuntimeError("backend went away")
        return "Again.", 0.5, False, False, {}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Flaky]]:
    made: list[Flaky] = []

    def make_env(row: Any) -> Flaky:
        made.append(Flaky())
        return made[-1]

    monkeypatch.setattr(episodes_module, "_make_env", make_env)
    yield made


@pytest.mark.parametrize("patched", [True, False], ids=["gem-rl2-train", "rl2-alone"])
def test_env_calls_run_off_the_event_loop_and_a_failing_env_ends_only_its_episode(
    tokenizer: Any, flaky: list[Flaky], patched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gem_rl2 import env_errors

    monkeypatch.setattr(env_errors, "_installed", patched)  # what gem-rl2-train's patch would have set
    episodes = table(tokenizer)
    loop_thread: list[int] = []

    async def play() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        loop_thread.append(threading.get_ident())
        (s1, i1), (s2, i2) = await asyncio.gather(episodes.reset(ROW), episodes.reset(ROW))
        first = await episodes.step(s1, "one<|im_end|>", i1, "stop")
        failed = await episodes.step(first["next_state"], "two<|im_end|>", first["extra_info"], "stop")
        other = await episodes.step(s2, "one<|im_end|>", i2, "stop")
        return [first, failed], other

    (_, failed), other = run(play())
    assert all(t != loop_thread[0] for env in flaky for t in env.threads)
    # the marker gem's compute_advantages drops the episode by; 0 where nothing would read it
    assert failed["done"] is True and failed["score"] == 0.0
    assert math.isnan(failed["reward"]) if patched else failed["reward"] == 0.0
    episode = episodes.finished[failed["extra_info"][EPISODE_KEY]]
    assert episode.metadata["error"] == "RuntimeError: backend went away"
    assert episode.metadata["error_phase"] == "step" and episode.num_turns == 1
    assert flaky[0].closed
    assert other["done"] is False and other["reward"] == 0.5
    assert episodes.running == 1


def test_the_module_needs_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    with pytest.raises(ConfigError, match="gem-rl2-train"):
        default_episodes()
    monkeypatch.setenv(SETTINGS_ENV, "{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        default_episodes()
    monkeypatch.setenv(SETTINGS_ENV, json.dumps({"tokenizer": "x"}))
    with pytest.raises(ConfigError, match="max_turns"):
        default_episodes()


def test_settings_round_trip() -> None:
    settings = Settings(tokenizer="/m", max_turns=4, on_cut="pass", chat_template_kwargs={"enable_thinking": False})
    assert Settings.from_json(settings.to_json()) == settings
