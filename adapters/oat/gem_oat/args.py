"""``GemOatArgs``: oat's ``PPOArgs`` plus the env settings, and the checks gem adds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from oat.algorithms.ppo import PPOArgs

import gem_core
from gem_core.episode import EpisodeLimits
from gem_core.errors import ConfigError, EnvNotFound

__all__ = ["GemOatArgs", "check_args", "episode_limits", "parse_env_kwargs", "parse_env_wrappers"]

#: Seeds of actor ``k`` start at ``env_seed + k * SEED_STRIDE``, so actors never replay each other's episodes.
SEED_STRIDE = 1_000_003


@dataclass
class GemOatArgs(PPOArgs):
    """oat's PPO flags plus what the gem actor needs (``--env_ids`` etc.)."""

    env_ids: list[str] = field(
        default_factory=lambda: ["core:NumberGuess-v0"],
        metadata={"help": "gem env ids; the episodes of each step cycle through them."},
    )
    env_kwargs: str = field(default="", metadata={"help": "JSON object of constructor overrides for every env."})
    env_wrappers: str = field(
        default="", metadata={"help": 'JSON list of wrappers, e.g. \'[["tools", {"tools": ["python"]}]]\'.'}
    )
    episodes_per_step: int = field(default=16, metadata={"help": "Episodes each actor plays per collect step."})
    env_seed: int = field(default=0, metadata={"help": "Seed of the first episode of actor 0; later ones count up."})
    max_turns: int = field(default=0, metadata={"help": "Turn limit per episode (0: the env's own)."})
    max_episode_tokens: int = field(
        default=0, metadata={"help": "Token budget after the first prompt: generated + env tokens (0: none)."}
    )
    on_cut: str = field(
        default="invalid",
        metadata={"help": "A generation cut at generate_max_length: invalid (GEM's rule), pass or truncate."},
    )
    system_prompt: str = field(default="", metadata={"help": "System message of every episode (empty: none)."})
    on_env_error: str = field(
        default="end",
        metadata={
            "help": "An env that raises in reset/step: end (only its episode ends; it is not sent to the learner "
            "and counts in actor/gem_env_errors) or raise (the collect step fails)."
        },
    )


def _json_flag(text: str, flag: str, kind: type, example: str) -> Any:
    """The JSON value of ``--flag``, which must be a ``kind`` (``dict`` or ``list``); empty text: an empty one."""
    if not text:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        value = exc
    if not isinstance(value, kind):
        what = "object" if kind is dict else "list"
        got = value if isinstance(value, json.JSONDecodeError) else f"got {type(value).__name__}"
        raise ConfigError(f"--{flag} must be a JSON {what}, e.g. '{example}': {got}")
    return value


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env_kwargs`` as a dict (empty string: no overrides)."""
    return dict(_json_flag(text, "env_kwargs", dict, '{"max_turns": 8}'))


def parse_env_wrappers(text: str) -> list[Any]:
    """``--env_wrappers`` as wrapper refs: names or ``[name, kwargs]`` pairs."""
    value = _json_flag(text, "env_wrappers", list, '[["tools", {"tools": ["python"]}]]')
    refs: list[Any] = []
    for item in value:
        if isinstance(item, str):
            refs.append(item)
        elif isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
            refs.append((item[0], item[1]))
        else:
            raise ConfigError(f"--env_wrappers: each entry is a name or [name, {{kwargs}}], got {item!r}")
    return refs


def episode_limits(args: GemOatArgs) -> EpisodeLimits:
    """The engine's budgets from the flags: the per-turn cap is oat's ``generate_max_length``."""
    return EpisodeLimits(
        max_turns=args.max_turns or None,
        max_turn_tokens=args.generate_max_length,
        max_episode_tokens=args.max_episode_tokens or None,
        on_cut=args.on_cut,  # type: ignore[arg-type]
        system_prompt=args.system_prompt or None,
        on_env_error=args.on_env_error,  # type: ignore[arg-type]
    )


def check_args(args: GemOatArgs) -> GemOatArgs:
    """Gem's checks on top of oat's ``default_args_validation``; raise :class:`ConfigError` naming the flag.

    ``whiten_adv`` must stay off: the learner writes ReBN advantages itself (see
    :mod:`gem_oat.rebn` for why oat's float32 whitening is not used). ``critic_type``
    must not be ``ppo``: ReBN is critic-free.
    """
    if args.whiten_adv:
        raise ConfigError(
            "--whiten_adv must stay off with gem's learner: it writes ReBN advantages itself in float64 "
            "(oat's float32 whitening gives NaN when all returns are equal); drop --whiten_adv"
        )
    if args.critic_type == "ppo":
        raise ConfigError("--critic_type ppo trains a critic; gem's learner uses critic-free ReBN: use drgrpo or grpo")
    if args.train_batch_size_per_device != 1 or args.num_gpus_per_actor != 1:
        raise ConfigError(
            "oat's multi-turn learner trains one transition at a time on one GPU per actor: "
            "use --train_batch_size_per_device 1 --num_gpus_per_actor 1 (the defaults)"
        )
    if not args.env_ids:
        raise ConfigError("--env_ids needs at least one gem env id, e.g. --env_ids core:NumberGuess-v0")
    for env_id in args.env_ids:
        try:
            gem_core.spec(env_id)  # resolves aliases; the error names close matches and installed plugins
        except EnvNotFound as exc:
            raise ConfigError(f"--env_ids: {exc}") from None
    if args.episodes_per_step < 1:
        raise ConfigError(f"--episodes_per_step must be >= 1, got {args.episodes_per_step}")
    if args.on_cut not in ("invalid", "pass", "truncate"):
        raise ConfigError(f"--on_cut must be invalid, pass or truncate, got {args.on_cut!r}")
    if args.on_env_error not in ("end", "raise"):
        raise ConfigError(f"--on_env_error must be end or raise, got {args.on_env_error!r}")
    if args.max_turns < 0 or args.max_episode_tokens < 0:
        raise ConfigError("--max_turns and --max_episode_tokens must be >= 0 (0: no limit)")
    parse_env_kwargs(args.env_kwargs)
    parse_env_wrappers(args.env_wrappers)
    episode_limits(args)
    return args
