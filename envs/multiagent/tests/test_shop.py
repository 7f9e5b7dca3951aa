"""The customer-service shop: a reference agent solves it; talk, extra actions and injections do not pay."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import pytest

from gem_multiagent.shop import STOP, ShopSupport, ShopTask, reference_agent, scripted_customer, shop_db_path


def _run(env: ShopSupport, agent: Callable[[str], str], seed: int) -> tuple[float, dict[str, object]]:
    obs, _ = env.reset(seed=seed)
    total, info = 0.0, {}
    for _ in range(env.max_turns):
        obs, reward, term, trunc, info = env.step(agent(obs))
        total += reward
        if term or trunc:
            break
    return total, info


@pytest.fixture
def env() -> ShopSupport:
    return ShopSupport()


def test_the_reference_agent_solves_every_kind_of_task(env: ShopSupport) -> None:
    kinds = set()
    for seed in range(30):
        reward, info = _run(env, reference_agent(env), seed)
        assert reward == 1.0 and info["success"], (seed, env.task, env.actions)
        assert env.task is not None
        kinds.add(env.task.kind)
    assert kinds == {"refund", "exchange", "refund_denied"}


def _first_seed(env: ShopSupport, kind: str) -> int:
    for seed in range(200):
        env.reset(seed=seed)
        assert env.task is not None
        if env.task.kind == kind:
            return seed
    raise AssertionError(kind)


def _scripted(env: ShopSupport, moves: list[dict[str, str]]) -> Callable[[str], str]:
    queue = [json.dumps(m) for m in moves]
    return lambda obs: queue.pop(0) if queue else json.dumps({"tool": "end"})


def _task(env: ShopSupport, seed: int) -> ShopTask:
    env.reset(seed=seed)
    assert env.task is not None
    return env.task


@pytest.mark.parametrize(
    "attack",
    ["claim-without-acting", "refund-everything", "skip-authentication", "refund-the-denied", "someone-elses-order"],
    ids=str,
)
def test_forged_outcomes_score_zero(env: ShopSupport, attack: str) -> None:
    kind = "refund_denied" if attack == "refund-the-denied" else "refund"
    seed = _first_seed(env, kind)
    task = _task(env, seed)
    auth = {"tool": "find_user", "email": task.email}
    if attack == "claim-without-acting":
        moves = [{"say": "Your order has been refunded."}]
    elif attack == "refund-everything":
        orders = [r[0] for r in env._query("SELECT order_id FROM orders WHERE user_id = ?", task.user_id)]
        moves = [auth, *({"tool": "refund", "order_id": o} for o in orders)]
    elif attack == "skip-authentication":
        moves = [{"tool": "refund", "order_id": task.order_id}]
    elif attack == "refund-the-denied":
        moves = [auth, {"tool": "refund", "order_id": task.order_id}]
    else:
        other = env._query("SELECT order_id FROM orders WHERE user_id != ? AND status = 'delivered'", task.user_id)[0][
            0
        ]
        moves = [auth, {"tool": "refund", "order_id": other}]
    reward, info = _run(env, _scripted(env, moves), seed)
    assert reward == 0.0 and not info["success"]


def test_an_injection_in_an_argument_finds_nothing_and_the_database_stays_read_only(env: ShopSupport) -> None:
    env.reset(seed=0)
    obs, *_ = env.step(json.dumps({"tool": "get_order", "order_id": "O1001' OR '1'='1"}))
    assert "no order" in obs
    with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
        env._db.execute("DELETE FROM orders")
    assert sqlite3.connect(shop_db_path()).execute("SELECT COUNT(*) FROM orders").fetchone()[0] > 0


@pytest.mark.parametrize(
    "reply",
    ["refund it please", '{"tool": "refund"}', '{"tool": "refund", "order_id": "O1", "reward": "1"}', '{"say": 3}'],
    ids=["prose", "missing-arg", "extra-arg", "non-string"],
)
def test_malformed_actions_explain_the_format(env: ShopSupport, reply: str) -> None:
    env.reset(seed=0)
    obs, reward, term, trunc, _ = env.step(reply)
    assert obs.startswith("Error") and reward == 0.0 and not (term or trunc)


def test_turn_limit_truncates_with_no_reward() -> None:
    env = ShopSupport(max_turns=2)
    env.reset(seed=0)
    env.step('{"say": "hello"}')
    _, reward, term, trunc, _ = env.step('{"say": "hello"}')
    assert (reward, term, trunc) == (0.0, False, True)


def test_the_customer_is_a_policy_given_to_the_env() -> None:
    seen: list[ShopTask] = []

    def leaves_at_once(task: ShopTask, conversation: list[dict[str, str]]) -> str:
        seen.append(task)
        return "hello" if not conversation else f"bye {STOP}"

    env = ShopSupport(customer=leaves_at_once)
    obs, _ = env.reset(seed=0)
    assert obs.endswith("Customer: hello")
    _, reward, term, _, _ = env.step('{"say": "Hi!"}')
    assert term and reward == (1.0 if env.task and env.task.kind == "refund_denied" else 0.0) and seen
    assert ShopSupport(customer="gem_multiagent.shop:scripted_customer").customer is scripted_customer
