"""Our envs through PettingZoo's own API tests (pettingzoo is a test-only dependency of gem-core)."""

from __future__ import annotations

import pytest

from gem_core.errors import ConfigError
from gem_core.multiagent import MultiAgentChatHistory, MultiAgentTimeLimit
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv

pytest.importorskip("pettingzoo")  # installed by the core tox env (the pettingzoo extra)
from pettingzoo.test import api_test, parallel_api_test

from gem_core.multiagent.pettingzoo import to_pettingzoo_aec, to_pettingzoo_parallel

# PettingZoo's tests warn that text observations are not numpy arrays and that the spaces are not Box/Discrete:
# advice for numeric envs, not contract failures (those are assertions).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "wrapped"])
def test_turn_based_env_passes_pettingzoo_api_test(wrapped: bool) -> None:
    env = NimEnv()
    api_test(to_pettingzoo_aec(MultiAgentChatHistory(MultiAgentTimeLimit(env, max_turns=4)) if wrapped else env))


def test_simultaneous_env_passes_pettingzoo_parallel_api_test() -> None:
    parallel_api_test(to_pettingzoo_parallel(RockPaperScissorsEnv(rounds=4)), num_cycles=50)


def test_the_adapters_refuse_the_other_shape() -> None:
    with pytest.raises(ConfigError, match="to_pettingzoo_parallel"):
        to_pettingzoo_aec(RockPaperScissorsEnv())
    with pytest.raises(ConfigError, match="to_pettingzoo_aec"):
        to_pettingzoo_parallel(NimEnv())


def test_aec_iteration_accumulates_rewards_and_dead_steps() -> None:
    env = to_pettingzoo_aec(NimEnv(low=2, high=2))
    env.reset(seed=0)
    seen = []
    for agent in env.agent_iter():
        _obs, reward, terminated, truncated, _ = env.last()
        seen.append((agent, reward, terminated))
        env.step(None if terminated or truncated else "2")
    # first takes both stones and wins; both then take their dead step
    assert seen == [("first", 0.0, False), ("first", 1.0, True), ("second", -1.0, True)]
