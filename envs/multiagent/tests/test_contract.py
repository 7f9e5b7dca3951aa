"""Every multiagent:* id through gem's contract checks, and the games through PettingZoo's own API test."""

from __future__ import annotations

from collections.abc import Callable

import gem_core
import pytest
from gem_core.multiagent import MultiAgentEnv


@pytest.mark.gem_envs(namespace="multiagent")
def test_env_contract(gem_env_id: str, gem_check_env: Callable[..., None]) -> None:
    gem_check_env(gem_env_id)


GAME_IDS = ["TicTacToe", "KuhnPoker", "ConnectFour", "Negotiation", "Clues"]


@pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")
@pytest.mark.parametrize("name", GAME_IDS, ids=str)
def test_pettingzoo_api_test(name: str) -> None:
    pytest.importorskip("pettingzoo")
    from gem_core.multiagent.pettingzoo import to_pettingzoo_aec
    from pettingzoo.test import api_test

    env = gem_core.make(f"multiagent:{name}-v0")
    assert isinstance(env, MultiAgentEnv)
    api_test(to_pettingzoo_aec(env), num_cycles=200)
