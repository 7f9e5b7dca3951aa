"""gem-multiagent's plugin: declares the ``multiagent:*`` ids (nothing here imports an env)."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest

_GAMES = (
    ("TicTacToe", "tictactoe", "TicTacToe: x and o take cells 1-9, three in a row wins.", "zero-sum"),
    ("KuhnPoker", "kuhn_poker", "Kuhn Poker: J/Q/K, one bet; net chips as rewards.", "zero-sum"),
    ("ConnectFour", "connect_four", "Connect Four on a 6x7 grid.", "zero-sum"),
    ("Negotiation", "negotiation", "Split books, hats and balls under private values (general-sum).", "general-sum"),
    (
        "Clues",
        "clues",
        "Cooperative: a speaker who sees the secret gives a one-word clue; the listener guesses.",
        "cooperative",
    ),
)
_CLASSES = {
    "tictactoe": "gem_multiagent.tictactoe:TicTacToe",
    "kuhn_poker": "gem_multiagent.kuhn_poker:KuhnPoker",
    "connect_four": "gem_multiagent.connect_four:ConnectFour",
    "negotiation": "gem_multiagent.negotiation:Negotiation",
    "clues": "gem_multiagent.clues:Clues",
}


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1, namespaces=("multiagent",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    specs: list[EnvSpec] = []
    for name, key, description, kind in _GAMES:
        specs.append(
            EnvSpec(
                id=f"multiagent:{name}-v0",
                entry_point=_CLASSES[key],
                description=description,
                tags=("multi-agent", "turn-based", kind, "offline"),
            )
        )
        for opponent in ("scripted", "random"):
            specs.append(
                EnvSpec(
                    id=f"multiagent:{name}-v0-vs-{opponent}",
                    entry_point="gem_multiagent.versus:versus",
                    kwargs={"game": key, "opponent": opponent},
                    description=f"{description} One seat (drawn per episode) against the {opponent} player.",
                    tags=("multi-turn", "offline", "versus", kind),
                )
            )
    specs.append(
        EnvSpec(
            id="multiagent:ShopSupport-v0",
            entry_point="gem_multiagent.shop:ShopSupport",
            description="tau-bench-style customer service on a read-only SQLite shop; the customer is a policy.",
            tags=("multi-turn", "offline", "tools", "simulated-user"),
        )
    )
    return specs
