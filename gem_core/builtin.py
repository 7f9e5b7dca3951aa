"""gem_core's own registrations, made through the same hooks as any third-party plugin."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import CommandSpec, EnvSpec, PluginManifest, ToolSpec, WrapperSpec


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1, namespaces=("core",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            id="core:NumberGuess-v0",
            entry_point="gem_core.testing:NumberGuessEnv",
            description="Reference env: guess a secret number from higher/lower hints.",
            tags=("multi-turn", "offline", "reference"),
        ),
        EnvSpec(
            id="core:NumberGuess-v0-hard",
            entry_point="gem_core.testing:NumberGuessEnv",
            kwargs={"high": 100, "max_turns": 8},
            description="Reference env, 1 to 100 in 8 turns.",
            tags=("multi-turn", "offline", "reference"),
        ),
        EnvSpec(
            id="core:NumberGuess-v0-echo",
            entry_point="gem_core.testing:NumberGuessEnv",
            wrappers=(("tools", {"tools": ["echo"]}),),
            description="Reference tool env: NumberGuess with the echo tool (for tests, gem eval and conformance).",
            tags=("multi-turn", "offline", "reference", "tools"),
        ),
        EnvSpec(
            id="core:PictureNumberGuess-v0",
            entry_point="gem_core.conformance_images:PictureNumberGuess",
            description="Reference image env: NumberGuess with a new picture in every observation (image conformance).",
            tags=("multi-turn", "offline", "reference", "images"),
        ),
        EnvSpec(
            id="core:Nim-v0",
            entry_point="gem_core.multiagent.reference:NimEnv",
            description="Reference multi-agent env (agents in turn): two players take 1-3 stones, last stone wins.",
            tags=("multi-agent", "turn-based", "offline", "reference"),
        ),
        EnvSpec(
            id="core:RockPaperScissors-v0",
            entry_point="gem_core.multiagent.reference:RockPaperScissorsEnv",
            description="Reference multi-agent env (all at once): rock-paper-scissors over 3 rounds.",
            tags=("multi-agent", "simultaneous", "offline", "reference"),
        ),
    ]


@hookimpl
def register_commands() -> list[CommandSpec]:
    # gem's own commands, declared so that a plugin's command cannot take one of their names
    from gem_core.cli import COMMANDS

    return [
        CommandSpec(name=c.name, description=c.help, entry_point=c.run, arguments=c.arguments)
        for c in COMMANDS.values()
    ]


@hookimpl
def register_tools() -> list[ToolSpec]:
    return [
        ToolSpec(
            name="echo",
            entry_point="gem_core.testing:EchoTool",
            description="Reference tool: returns its text (for tests and the adapters' conformance suite).",
            tags=("reference",),
        )
    ]


@hookimpl
def register_wrappers() -> list[WrapperSpec]:
    return [
        WrapperSpec(
            name="chat",
            entry_point="gem_core.wrappers:chat_history",
            description="Chat history as messages; rendered by a chat template when a tokenizer is given.",
        ),
        WrapperSpec(
            name="episode_stats",
            entry_point="gem_core.wrappers:episode_statistics",
            description="Return, length, tool calls and success in the final info['episode'].",
        ),
        WrapperSpec(
            name="max_turns",
            entry_point="gem_core.wrappers:time_limit",
            description="Truncate after max_turns steps.",
        ),
        WrapperSpec(
            name="time_limit",
            entry_point="gem_core.wrappers:time_limit",
            description="Truncate after max_turns steps and/or max_seconds of wall time.",
        ),
        WrapperSpec(
            name="tools",
            entry_point="gem_core.tools.wrapper:ToolEnvWrapper",
            description="Run the model's tool calls between env turns; results come back as tool observations.",
        ),
    ]
