"""Property: for any replies, RL2's text protocol builds the engine's token context, turn by turn.

RL2 0.0.2's rollout encodes the first state text, appends the sampled ids, and encodes
only what ``next_state`` adds after ``state + action`` (``Rollout.rollout`` with RL2's
``initialize_state_dict``). The engine in token mode appends the sampled ids and its
token bridge. For every mix of stopped and cut replies, templates included, both must
give the same ids, and the env must get the same actions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gem_rl2.episodes import RL2Episodes, Settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeLimits, Generation, TurnRequest
from gem_core.testing_tokenizers import build_chat_tokenizer

TEMPLATES = ["chatml", "chatml_drop_think"]
reply_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 .,!?<>/\n", min_size=1, max_size=40)
replies_st = st.lists(st.tuples(reply_text, st.booleans()), min_size=1, max_size=6)  # (text, stopped)


@pytest.fixture(scope="module", params=TEMPLATES)
def tokenizer(request: pytest.FixtureRequest) -> Any:
    return build_chat_tokenizer(request.param)


def sampled(tokenizer: Any, text: str, stopped: bool) -> list[int]:
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    return [*ids, int(tokenizer.eos_token_id)] if stopped else ids


def engine_side(tokenizer: Any, replies: list[tuple[str, bool]]) -> tuple[list[int], list[str]]:
    engine = EpisodeEngine(tokenizer, EpisodeLimits(max_turns=len(replies)))
    job = EpisodeJob(env=make("core:NumberGuess-v0", max_turns=10), env_id="core:NumberGuess-v0", seed=0)

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        text, stopped = replies[requests[0].turn]
        return [Generation(token_ids=sampled(tokenizer, text, stopped), finish_reason="stop" if stopped else "length")]

    (session,) = engine.play_batch([job], generate)
    return list(session.context or []), [t.action for t in session.turns]


def rl2_side(tokenizer: Any, replies: list[tuple[str, bool]]) -> tuple[list[int], list[str]]:
    from RL2.datasets import initialize_state_dict

    episodes = RL2Episodes(tokenizer, Settings(tokenizer="unused", max_turns=len(replies)))

    async def play() -> tuple[list[int], str]:
        state, info = await episodes.reset(
            {"env_id": "core:NumberGuess-v0", "seed": 0, "env_kwargs": {"max_turns": 10}}
        )
        states = initialize_state_dict(tokenizer, state)["states"]
        for text, stopped in replies:
            ids = sampled(tokenizer, text, stopped)
            action = tokenizer.decode(ids, skip_special_tokens=False)  # SGLang with no_stop_trim, special tokens kept
            out = await episodes.step(state, action, info, "stop" if stopped else "length", ids[-1] if ids else None)
            states += ids
            if out["done"]:
                return states, info["gem_episode_id"]
            assert out["next_state"].startswith(state + action), "RL2 would start a new sequence"
            states += initialize_state_dict(tokenizer, out["next_state"][len(state + action) :])["states"]
            state, info = out["next_state"], out["extra_info"]
        raise AssertionError("the session must end at max_turns")

    states, episode_id = asyncio.run(play())
    return states, [t.action for t in episodes.finished[episode_id].turns]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(replies=replies_st)
def test_rl2_text_protocol_builds_the_engines_token_context(tokenizer: Any, replies: list[tuple[str, bool]]) -> None:
    assert rl2_side(tokenizer, replies) == engine_side(tokenizer, replies)
