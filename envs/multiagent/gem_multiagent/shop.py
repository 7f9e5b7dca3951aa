"""A tau-bench-style customer-service env on a read-only SQLite shop; the customer is a policy given to the env.

From the trainer's side this is a single-agent env: the model is the support agent, and the customer
(a scripted one by default, any callable, e.g. a model in ``gem eval``) answers inside ``step``.
The agent replies with one JSON action per turn:

* ``{"say": "..."}``: talk to the customer (the customer answers);
* ``{"tool": "find_user", "email": "..."}``: authenticates the customer it finds;
* ``{"tool": "list_orders", "user_id": "..."}`` and ``{"tool": "get_order", "order_id": "..."}``;
* ``{"tool": "refund", "order_id": "..."}`` and
  ``{"tool": "exchange", "order_id": "...", "item_id": "...", "new_product_id": "..."}``: only for the
  authenticated customer's own delivered orders; an exchange keeps the product, changes the variant;
* ``{"tool": "end"}``: ends the conversation.

The shop database is opened read-only (``mode=ro`` and ``query_only``): refunds and exchanges are
recorded in the episode, never written. The reward, at the end, is 1 when the recorded actions are
exactly the task's (the one refund or exchange it asks for, or none when the request breaks policy)
and the agent attempted no refund or exchange against policy (unauthenticated, another customer's
order, an order not delivered), else 0: what the agent says does not count, only what it did. An
agent that ends at once scores on the ``refund_denied`` tasks alone (their right outcome is no change).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gem_core.core import Env, ResetReturn, StepReturn

__all__ = ["ShopSupport", "ShopTask", "scripted_customer", "shop_db_path"]

_FIRST = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea")
_LAST = ("Moss", "Park", "Quinn", "Reyes", "Stone", "Tran", "Ueda", "Voss")
_PRODUCTS = (
    ("tshirt", ("S", "M", "L"), 20.0),
    ("headphones", ("black", "white"), 80.0),
    ("mug", ("blue", "red"), 12.0),
)
SCHEMA_VERSION = 1
STOP = "###STOP###"


def _build(path: str) -> None:
    rng = np.random.default_rng(20260101)  # the shop is the same everywhere
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE users(user_id TEXT PRIMARY KEY, name TEXT, email TEXT UNIQUE);"
        "CREATE TABLE products(product_id TEXT PRIMARY KEY, name TEXT, variant TEXT, price REAL);"
        "CREATE TABLE orders(order_id TEXT PRIMARY KEY, user_id TEXT, status TEXT);"
        "CREATE TABLE order_items(item_id TEXT PRIMARY KEY, order_id TEXT, product_id TEXT);"
    )
    products = []
    for name, variants, price in _PRODUCTS:
        for variant in variants:
            pid = f"P-{name}-{variant}".lower()
            products.append(pid)
            db.execute("INSERT INTO products VALUES (?,?,?,?)", (pid, name, variant, price))
    order_no, item_no = 1000, 5000
    for u in range(24):
        first, last = _FIRST[u % len(_FIRST)], _LAST[(u * 5) % len(_LAST)]
        uid = f"U{100 + u}"
        db.execute(
            "INSERT INTO users VALUES (?,?,?)", (uid, f"{first} {last}", f"{first}.{last}{u}@example.com".lower())
        )
        for _ in range(int(rng.integers(2, 4))):
            order_no += 1
            status = ("delivered", "delivered", "processing", "cancelled")[int(rng.integers(4))]
            db.execute("INSERT INTO orders VALUES (?,?,?)", (f"O{order_no}", uid, status))
            for _ in range(int(rng.integers(1, 3))):
                item_no += 1
                db.execute(
                    "INSERT INTO order_items VALUES (?,?,?)",
                    (f"I{item_no}", f"O{order_no}", products[int(rng.integers(len(products)))]),
                )
    db.commit()
    db.close()


def shop_db_path() -> str:
    """The shop database, built once per machine (in the temp dir, named by its schema) and then only read."""
    tag = hashlib.sha256(f"gem-multiagent-shop-{SCHEMA_VERSION}".encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"gem-multiagent-shop-{tag}.sqlite")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(suffix=".sqlite", dir=tempfile.gettempdir())
        os.close(fd)
        os.unlink(tmp)
        _build(tmp)
        os.replace(tmp, path)  # atomic: a concurrent builder's copy is identical
    return path


@dataclass
class ShopTask:
    """What the customer wants (known to the customer, not to the agent).

    Attributes:
        kind: ``"refund"``, ``"exchange"`` or ``"refund_denied"`` (asks a refund the policy forbids).
        user_id: The customer's id; ``email`` and ``name`` theirs.
        order_id: The order it is about; ``item_id`` and ``new_product_id`` for an exchange.
        expected: The actions a correct agent records: ``("refund", order)`` or ``("exchange", order, item, new)``.
    """

    kind: str
    user_id: str
    email: str
    name: str
    order_id: str
    item_id: str = ""
    product_name: str = ""
    new_product_id: str = ""
    expected: list[tuple[str, ...]] = field(default_factory=list)


#: A customer: given the task and the conversation so far (``{"role": "agent"|"customer", "content"}``), its next line.
CustomerPolicy = Callable[[ShopTask, list[dict[str, str]]], str]


def scripted_customer(task: ShopTask, conversation: list[dict[str, str]]) -> str:
    """Reference customer: states the request, answers what it is asked, ends once the agent reports back."""
    if not conversation:
        if task.kind == "exchange":
            return f"Hi, I'm {task.name}. I'd like to exchange the {task.product_name} in my order {task.order_id}."
        return f"Hi, I'm {task.name}. I want a refund for my order {task.order_id}."
    said = conversation[-1]["content"].lower()
    if any(w in said for w in ("refunded", "exchanged", "has been", "not eligible", "cannot", "can't", "unable")):
        return f"Thanks, that's all. {STOP}"
    if "email" in said:
        return f"My email is {task.email}."
    if "item" in said and task.item_id:
        return f"It's item {task.item_id}."
    if any(w in said for w in ("variant", "size", "colour", "color", "which one", "replace")) and task.new_product_id:
        return f"I'd like {task.new_product_id} instead."
    if "order" in said:
        return f"The order is {task.order_id}."
    if any(w in said for w in ("confirm", "proceed", "shall i", "go ahead", "?")):
        return "Yes, please go ahead."
    return "Could you please help me with my request?"


class ShopSupport(Env):
    """Customer support on a read-only shop; see the module docstring for the actions and the reward.

    Args:
        customer: The customer policy (default :func:`scripted_customer`); a dotted ``"module:attr"``
            string is imported.
        max_turns: Agent actions before the episode is truncated (reward 0).
    """

    metadata = {"multi_turn": True}

    def __init__(self, customer: CustomerPolicy | str | None = None, max_turns: int = 16) -> None:
        if isinstance(customer, str):
            from gem_core.registry import load_entry_point

            customer = load_entry_point(customer)
        self.customer: CustomerPolicy = scripted_customer if customer is None else customer  # type: ignore[assignment]
        self.max_turns = max_turns
        self._db = sqlite3.connect(f"file:{shop_db_path()}?mode=ro", uri=True, check_same_thread=False)
        self._db.execute("PRAGMA query_only = ON")
        self.task: ShopTask | None = None
        self.actions: list[tuple[str, ...]] = []
        self.violations: list[str] = []
        self.conversation: list[dict[str, str]] = []
        self.authenticated: str | None = None
        self.turns = 0

    # ------------------------------------------------------------------ data

    def _query(self, sql: str, *args: str) -> list[tuple[Any, ...]]:
        return list(self._db.execute(sql, args).fetchall())

    def _items(self, order_id: str) -> list[dict[str, str]]:
        rows = self._query(
            "SELECT i.item_id, p.product_id, p.name, p.variant FROM order_items i JOIN products p "
            "ON i.product_id = p.product_id WHERE i.order_id = ? ORDER BY i.item_id",
            order_id,
        )
        return [{"item_id": r[0], "product_id": r[1], "name": r[2], "variant": r[3]} for r in rows]

    def _draw_task(self) -> ShopTask:
        orders = self._query(
            "SELECT o.order_id, o.status, u.user_id, u.email, u.name FROM orders o JOIN users u "
            "ON o.user_id = u.user_id WHERE o.status IN ('delivered', 'processing') ORDER BY o.order_id"
        )
        order_id, status, user_id, email, name = orders[int(self.np_random.integers(len(orders)))]
        if status == "processing":
            return ShopTask("refund_denied", user_id, email, name, order_id)
        if self.np_random.random() < 0.5:
            return ShopTask("refund", user_id, email, name, order_id, expected=[("refund", order_id)])
        items = self._items(order_id)
        item = items[int(self.np_random.integers(len(items)))]
        variants = [
            r[0]
            for r in self._query(
                "SELECT product_id FROM products WHERE name = ? AND product_id != ? ORDER BY product_id",
                item["name"],
                item["product_id"],
            )
        ]
        new = variants[int(self.np_random.integers(len(variants)))]
        task = ShopTask("exchange", user_id, email, name, order_id, item["item_id"], item["name"], new)
        task.expected = [("exchange", order_id, item["item_id"], new)]
        return task

    # ------------------------------------------------------------------ the env

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.task = self._draw_task()
        self.actions, self.conversation, self.authenticated, self.turns = [], [], None, 0
        self.violations = []
        opening = self._customer_says()
        rules = (
            "You are a shop's support agent. Reply with one JSON action per turn: "
            '{"say": "..."} to talk to the customer; {"tool": "find_user", "email": "..."} (authenticates them); '
            '{"tool": "list_orders", "user_id": "..."}; {"tool": "get_order", "order_id": "..."}; '
            '{"tool": "refund", "order_id": "..."}; '
            '{"tool": "exchange", "order_id": "...", "item_id": "...", "new_product_id": "..."}; {"tool": "end"}. '
            "Policy: authenticate the customer by email first; refund or exchange only their own delivered "
            "orders; an exchange keeps the product and changes its variant."
        )
        return f"{rules}\n\nCustomer: {opening}", {}

    def _customer_says(self) -> str:
        assert self.task is not None
        text = str(self.customer(self.task, list(self.conversation)))
        self.conversation.append({"role": "customer", "content": text})
        return text

    def _score(self) -> float:
        assert self.task is not None
        return 1.0 if sorted(self.actions) == sorted(self.task.expected) and not self.violations else 0.0

    def step(self, action: str) -> StepReturn:
        self.turns += 1
        parsed = self._parse(action)
        if isinstance(parsed, str):
            obs, done = f"Error: {parsed}", False
            info: dict[str, Any] = {"format_error": True}
        else:
            obs, done = self._act(parsed)
            info = {"parsed_action": json.dumps(parsed, sort_keys=True)}
        if done:
            reward = self._score()
            done_info = {"success": reward == 1.0, "actions": list(self.actions), "violations": list(self.violations)}
            return obs, reward, True, False, {**info, **done_info}
        if self.turns >= self.max_turns:
            return obs, 0.0, False, True, {**info, "success": False, "actions": list(self.actions)}
        return obs, 0.0, False, False, info

    @staticmethod
    def _parse(action: str) -> dict[str, str] | str:
        tail = action[-2000:]
        start = tail.rfind("{")
        while start != -1:
            try:
                value, _ = json.JSONDecoder().raw_decode(tail[start:])
            except ValueError:
                start = tail.rfind("{", 0, start)
                continue
            if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
                return {str(k): v for k, v in value.items()}
            break
        return 'reply with one JSON object of string values, e.g. {"say": "Hello"} or {"tool": "end"}'

    def _act(self, act: dict[str, str]) -> tuple[str, bool]:
        assert self.task is not None
        if set(act) == {"say"}:
            self.conversation.append({"role": "agent", "content": act["say"]})
            reply = self._customer_says()
            if STOP in reply:
                return f"Customer: {reply.replace(STOP, '').strip()}\n(The customer left.)", True
            return f"Customer: {reply}", False
        tool = act.get("tool")
        args = {k: v for k, v in act.items() if k != "tool"}
        expected_args = {
            "find_user": {"email"},
            "list_orders": {"user_id"},
            "get_order": {"order_id"},
            "refund": {"order_id"},
            "exchange": {"order_id", "item_id", "new_product_id"},
            "end": set(),
        }
        if tool not in expected_args:
            return f"Error: unknown action {act!r}; use say or a tool: {sorted(expected_args)}", False
        if set(args) != expected_args[tool]:
            return f"Error: {tool} takes exactly {sorted(expected_args[tool])}, got {sorted(args)}", False
        if tool == "end":
            return "Conversation ended.", True
        if tool == "find_user":
            rows = self._query("SELECT user_id, name FROM users WHERE email = ?", args["email"].strip().lower())
            if not rows:
                return "Tool result: no user with that email.", False
            self.authenticated = rows[0][0]
            return f"Tool result: {json.dumps({'user_id': rows[0][0], 'name': rows[0][1]})} (authenticated)", False
        if tool == "list_orders":
            rows = self._query(
                "SELECT order_id, status FROM orders WHERE user_id = ? ORDER BY order_id", args["user_id"]
            )
            return f"Tool result: {json.dumps([{'order_id': r[0], 'status': r[1]} for r in rows])}", False
        order = self._query("SELECT order_id, user_id, status FROM orders WHERE order_id = ?", args["order_id"])
        if not order:
            return f"Tool result: no order {args['order_id']!r}.", False
        order_id, owner, status = order[0]
        if tool == "get_order":
            body = {"order_id": order_id, "user_id": owner, "status": status, "items": self._items(order_id)}
            return f"Tool result: {json.dumps(body)}", False
        refusal = None
        if self.authenticated is None:
            refusal = "authenticate the customer with find_user first"
        elif owner != self.authenticated:
            refusal = "that order belongs to another customer"
        elif status != "delivered":
            refusal = f"order {order_id} is {status}; only delivered orders can be refunded or exchanged"
        if refusal is not None:
            self.violations.append(f"{tool} {order_id}: {refusal}")  # an attempt against policy fails the task
            return f"Tool error: {refusal}.", False
        if any(a[1] == order_id for a in self.actions):
            return f"Tool error: order {order_id} was already refunded or exchanged in this conversation.", False
        if tool == "refund":
            self.actions.append(("refund", order_id))
            return f"Tool result: order {order_id} refunded.", False
        items = {i["item_id"]: i for i in self._items(order_id)}
        item = items.get(args["item_id"])
        if item is None:
            return f"Tool error: order {order_id} has no item {args['item_id']!r}.", False
        new = self._query("SELECT name FROM products WHERE product_id = ?", args["new_product_id"])
        if not new or new[0][0] != item["name"] or args["new_product_id"] == item["product_id"]:
            return "Tool error: an exchange must be another variant of the same product.", False
        self.actions.append(("exchange", order_id, args["item_id"], args["new_product_id"]))
        return f"Tool result: item {args['item_id']} exchanged for {args['new_product_id']}.", False

    def sample_random_action(self) -> str:
        options = ('{"say": "Can I have your email?"}', '{"tool": "get_order", "order_id": "O1001"}', '{"tool": "end"}')
        return options[int(self.np_random.integers(len(options)))]

    def close(self) -> None:
        self._db.close()


def reference_agent(env: ShopSupport) -> Callable[[str], str]:
    """A scripted support agent that solves every task (for tests and as the reward's reference)."""
    plan: list[str] = []

    def act(observation: str) -> str:
        task = env.task
        assert task is not None
        if not plan:
            plan.extend(
                [
                    json.dumps({"say": "Sure, what is your email?"}),
                    json.dumps({"tool": "find_user", "email": task.email}),
                    json.dumps({"tool": "get_order", "order_id": task.order_id}),
                ]
            )
            if task.kind == "refund":
                plan.append(json.dumps({"tool": "refund", "order_id": task.order_id}))
                plan.append(json.dumps({"say": "Your order has been refunded."}))
            elif task.kind == "exchange":
                call = {"tool": "exchange", "order_id": task.order_id, "item_id": task.item_id}
                plan.append(json.dumps({**call, "new_product_id": task.new_product_id}))
                plan.append(json.dumps({"say": "Your item has been exchanged."}))
            else:
                plan.append(json.dumps({"say": "Sorry, that order is not eligible for a refund yet."}))
            plan.reverse()
        return plan.pop()

    return act
