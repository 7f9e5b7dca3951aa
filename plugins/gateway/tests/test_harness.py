"""gem_gateway.harness: one black-box harness run per episode, its reward checked, the session always closed."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import openai
import pytest

from gem_core.errors import TrajectoryError
from gem_gateway.capture import Gateway
from gem_gateway.errors import BadRequest, GenerateTimedOut
from gem_gateway.harness import HarnessTask, Outcome, capture
from gem_gateway.server import serve


def ask(task: HarnessTask, content: str = "hi") -> Any:
    with openai.OpenAI(base_url=task.base_url, api_key="unused", max_retries=0, timeout=30) as sdk:
        return sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])


def run(gateway: Gateway, harness: Any, key: str = "k", **kwargs: Any) -> Any:
    async def main() -> Any:
        async with serve(gateway) as url:
            return await capture(gateway, url, key, harness, **kwargs)

    return asyncio.run(main())


def test_the_harness_reward_and_the_sessions_own_generate(tokenizer: Any, scripted: Any) -> None:
    default, own = scripted(lambda r: "default"), scripted(lambda r: "own")
    gateway = Gateway(default, tokenizer)

    def harness(task: HarnessTask) -> float:
        assert (task.env_id, task.seed, task.extra) == ("core:NumberGuess-v0", 3, {"level": 2})
        return float(ask(task).choices[0].message.content == "own")

    episode = run(gateway, harness, generate=own, env_id="core:NumberGuess-v0", seed=3, extra={"level": 2})
    assert episode.total_reward == 1.0 and len(own.seen) == 1 and not default.seen
    assert (episode.start_state_id, episode.env_id, episode.seed) == (
        "core:NumberGuess-v0/seed=3",
        "core:NumberGuess-v0",
        3,
    )


def test_an_outcome_with_per_call_rewards_actions_and_a_cut(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "x"), tokenizer)

    def harness(task: HarnessTask) -> Outcome:
        ask(task, "a")
        ask(task, "b")
        return Outcome(rewards=[0.5, -1.0], truncated=True, actions=["A", "B"], info={"why": "budget"})

    episode = run(gateway, harness)
    assert [t.reward for t in episode.turns] == [0.5, -1.0]
    assert [t.action for t in episode.turns] == ["A", "B"]
    assert episode.truncated and not episode.terminated and episode.turns[-1].info["why"] == "budget"


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (True, "returned bool"),
        ("1.0", "returned str"),
        (None, "returned NoneType"),
        (math.nan, "not a finite number"),
        (Outcome(reward=1.0, rewards=[1.0]), "exactly one of"),
        (Outcome(), "exactly one of"),
        (Outcome(rewards=[math.inf]), "not a finite number"),
        (Outcome(rewards=[1.0, 2.0]), "made 1 calls but got 2 rewards"),
        (Outcome(reward=1.0, actions=["a", "b"]), "made 1 calls but got 2 actions"),
    ],
    ids=["bool", "str", "none", "nan", "both", "neither", "inf", "too-many-rewards", "too-many-actions"],
)
def test_a_bad_reward_is_refused_and_the_key_is_spent(tokenizer: Any, scripted: Any, result: Any, message: str) -> None:
    gateway = Gateway(scripted(lambda r: "x"), tokenizer)

    def harness(task: HarnessTask) -> Any:
        ask(task)
        return result

    with pytest.raises(BadRequest, match=message):
        run(gateway, harness)
    assert "k" not in gateway.sessions
    with pytest.raises(Exception, match="was finished"):
        gateway.open_session("k")


def test_a_harness_that_made_no_call_has_no_episode(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "x"), tokenizer)
    with pytest.raises(TrajectoryError, match="has no calls"):
        run(gateway, lambda task: 1.0)
    assert "k" not in gateway.sessions


def test_a_harness_past_its_timeout_is_cut_and_its_agent_refused(tokenizer: Any, scripted: Any) -> None:
    """The harness thread cannot be killed: closing its session makes the agent program's next call fail."""
    gateway = Gateway(scripted(lambda r: "x"), tokenizer)
    release, refused = threading.Event(), []

    def harness(task: HarnessTask) -> float:
        release.wait(30)
        try:
            ask(task)
        except openai.ConflictError as exc:  # HTTP 409: the session is closed
            refused.append(exc)
        return 1.0

    async def main() -> None:
        async with serve(gateway) as url:
            with pytest.raises(GenerateTimedOut, match=r"ran past timeout_s=0\.2"):
                await capture(gateway, url, "k", harness, timeout_s=0.2)
            release.set()
            for _ in range(300):  # the harness thread finishes on its own (its call refused)
                if refused:
                    break
                await asyncio.sleep(0.1)

    asyncio.run(main())
    assert len(refused) == 1 and "k" not in gateway.sessions


def test_what_the_harness_raised_reaches_the_trainer_and_the_key_is_spent(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "x"), tokenizer)

    def harness(task: HarnessTask) -> float:
        ask(task)
        raise RuntimeError("the agent program crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        run(gateway, harness)
    assert "k" not in gateway.sessions
