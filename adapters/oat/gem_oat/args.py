"""``GemOatArgs``: oat's ``PPOArgs`` plus the env settings, and the checks gem adds."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from oat.algorithms.ppo import PPOArgs

import gem_core
from gem_core.episode import EpisodeLimits
from gem_core.errors import ConfigError, EnvNotFound

__all__ = [
    "GemOatArgs",
    "check_args",
    "check_round_options",
    "episode_limits",
    "learner_ranks",
    "parse_env_kwargs",
    "parse_env_wrappers",
    "round_capacity",
]

#: Seeds of actor ``k`` start at ``env_seed + k * SEED_STRIDE``, so actors never replay each other's episodes.
SEED_STRIDE = 1_000_003


@dataclass
class GemOatArgs(PPOArgs):
    """oat's PPO flags plus what the gem actor needs (``--env_ids`` etc.).

    Three of oat's defaults are changed so that each learning round trains on exactly the
    transitions collected since the previous one (see :func:`check_round_options`).
    """

    # oat groups num_samples consecutive transitions in learning_step's metrics (a view that
    # fails on any other count); a multi-turn transition has no group: one sample per prompt.
    num_samples: int = field(default=1, metadata={"help": "Must be 1 with gem's multi-turn learner."})
    # 0: as many as one learning round can bring (rollout_batch_size / learner ranks).
    pi_buffer_maxlen_per_device: int = field(
        default=0, metadata={"help": "0 (default): what one learning round brings; else at least that."}
    )
    buffer_clear_every: float = field(
        default=1, metadata={"help": "Must be 1: every round trains on its own transitions only."}
    )

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


def learner_ranks(args: Any) -> int:
    """How many learner processes oat's ``get_program`` starts (its GPU split, mirrored; at least 1)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    devices = len(visible.split(",")) if visible else args.gpus
    per_group = devices if args.collocate else devices - args.gpus // 2
    return max(per_group, 1) * args.num_groups


def round_capacity(args: Any, world_size: int) -> int:
    """Transitions one learning round can bring to one learner rank.

    oat learns every ``update_interval = rollout_batch_size // (world_size *
    rollout_batch_size_per_device)`` collect steps, and each collect step keeps at most
    ``rollout_batch_size_per_device`` transitions per rank.

    Raises:
        ConfigError: ``rollout_batch_size`` is not a multiple of ``world_size * rollout_batch_size_per_device``.
    """
    per_step = args.rollout_batch_size_per_device
    if per_step < 1 or args.rollout_batch_size < world_size * per_step:
        raise ConfigError(
            f"--rollout_batch_size ({args.rollout_batch_size}) must be at least learner ranks ({world_size}) x "
            f"--rollout_batch_size_per_device ({per_step}) and the latter >= 1"
        )
    if args.rollout_batch_size % (world_size * per_step):
        raise ConfigError(
            f"--rollout_batch_size ({args.rollout_batch_size}) must be a multiple of learner ranks ({world_size}) x "
            f"--rollout_batch_size_per_device ({per_step}); oat's learner asserts it after loading the model"
        )
    return args.rollout_batch_size // (world_size * per_step) * per_step


def check_round_options(args: Any, world_size: int) -> None:
    """``--pi_buffer_maxlen_per_device`` against what one learning round brings: set (from 0) or refused.

    oat 0.2.4 trains on its whole ``pi_buffer``, a ``deque(maxlen=pi_buffer_maxlen_per_device)``
    (oat's default 16): a round bringing more than that would train on its last 16
    transitions only. At 0 (the default here) it is set to the round's capacity.

    Raises:
        ConfigError: Naming the option and the value to use.
    """
    capacity = round_capacity(args, world_size)
    if args.pi_buffer_maxlen_per_device == 0:
        args.pi_buffer_maxlen_per_device = capacity
    elif args.pi_buffer_maxlen_per_device < capacity:
        raise ConfigError(
            f"--pi_buffer_maxlen_per_device {args.pi_buffer_maxlen_per_device} keeps fewer transitions than one "
            f"learning round brings ({capacity} = --rollout_batch_size / learner ranks); the oldest would be dropped "
            f"unseen. Leave it at 0 (the default here: {capacity}) or use >= {capacity}"
        )


def check_args(args: GemOatArgs) -> GemOatArgs:
    """Gem's checks on top of oat's ``default_args_validation``; raise :class:`ConfigError` naming the flag.

    ``whiten_adv`` must stay off: the learner writes ReBN advantages itself (see
    :mod:`gem_oat.rebn` for why oat's float32 whitening is not used). ``critic_type``
    must not be ``ppo``: ReBN is critic-free. ``num_samples`` and ``buffer_clear_every``
    must be 1 and ``asynchronous`` off (see the table in docs/oat.md); the buffer's
    length is checked against the learner ranks by :func:`check_round_options`.
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
    if args.num_samples != 1:
        raise ConfigError(
            f"--num_samples {args.num_samples}: oat's learning_step groups that many transitions per prompt, which "
            "multi-turn transitions do not have (an odd count crashes after the gradient step); use --num_samples 1"
        )
    if args.buffer_clear_every != 1:
        raise ConfigError(
            f"--buffer_clear_every {args.buffer_clear_every}: gem's learner trains each round on exactly that round's "
            "transitions (ReBN is over them); older transitions would be trained again with stale advantages. "
            "Use --buffer_clear_every 1 (the default here)"
        )
    if args.asynchronous:
        raise ConfigError(
            "--asynchronous: oat's multi-turn learner replaces the asynchronous collector with a synchronous one; "
            "drop --asynchronous"
        )
    if args.pi_buffer_maxlen_per_device < 0:
        raise ConfigError(
            f"--pi_buffer_maxlen_per_device must be >= 0 (0: automatic), got {args.pi_buffer_maxlen_per_device}"
        )
    return args
