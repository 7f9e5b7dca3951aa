"""The verl options that interact with multi-turn episodes and ReBN, checked before any model loads.

:func:`check_trainer_config` runs in the driver: :mod:`gem_verl.plugin` wraps verl's
``verl.utils.config.validate_config``, which ``python -m verl.trainer.main_ppo`` calls
before it starts Ray, the rollout servers or any model. The agent loop runs the same
check when it is built (a second line for trainers started another way). Each option
is set right, refused with a :class:`~gem_core.errors.ConfigError` that names the
option and the fix, or supported; :data:`OPTIONS` is the table (``docs/verl.md`` shows
it, and a test runs every row).

It also holds the per-episode metrics the agent loop writes into each sample's
``reward_extra_info`` (:data:`EPISODE_METRICS`): verl's DAPO group filter
(``algorithm.filter_groups.metric``) reads them, and its validation step logs them.

This module imports no verl and no torch: the driver runs it before anything heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.returns import check_gamma

__all__ = [
    "EPISODE_METRICS",
    "GROUP_ESTIMATORS",
    "OPTIONS",
    "REWARD_METRIC",
    "GemLoopConfig",
    "Option",
    "check_trainer_config",
    "episode_metrics",
    "uses_gem",
]

#: The agent loop's name (also :data:`gem_verl.plugin.AGENT_NAME`; repeated to keep this module free of imports).
_AGENT_NAME = "gem_env_agent"
#: The advantage estimator gem registers.
_REBN = "rebn"

#: verl's own DAPO metric: the sum of each sample's ``rm_scores``.
REWARD_METRIC = "reward"

#: Estimators that compare the episodes of one group (one dataset row, ``rollout.n`` sessions).
GROUP_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_vectorized",
        "grpo_passk",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gdpo",
        "gpg",
        "reinforce_plus_plus_baseline",
    }
)


def _flag(value: Any) -> float:
    """1.0 for ``True`` or a positive number (an env's success score), else 0.0 (``None``, text, ...)."""
    if isinstance(value, bool):
        return float(value)
    return 1.0 if isinstance(value, int | float) and value > 0 else 0.0


#: Per-episode metrics in every sample's ``reward_extra_info`` (the same values on each sample of an
#: episode), from the loop's episode summary (``extra_fields["gem"]``). All floats, all always present.
EPISODE_METRICS: dict[str, tuple[str, Callable[[Mapping[str, Any]], float]]] = {
    "episode_return": ("sum of the episode's turn rewards (undiscounted)", lambda s: float(s["episode_return"])),
    "success": ("1 when the env's last `info['success']` is true, else 0", lambda s: _flag(s.get("success"))),
    "num_turns": ("turns played", lambda s: float(s["num_turns"])),
    "terminated": ("1 when the env ended the episode", lambda s: _flag(s["terminated"])),
    "truncated": ("1 when a limit ended it (max turns, budget, cut, abort)", lambda s: _flag(s["truncated"])),
    "cut_turns": ("replies cut at their token limit", lambda s: float(s.get("cut_turns") or 0)),
    "format_errors": ("turns the env flagged `info['format_error']`", lambda s: float(s.get("format_errors") or 0)),
    "env_error": ("1 when an env error ended it (on_env_error=end)", lambda s: float(s.get("error_phase") is not None)),
}


def episode_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The ``reward_extra_info`` of an episode's samples: :data:`EPISODE_METRICS` of its summary."""
    return {name: compute(summary) for name, (_, compute) in EPISODE_METRICS.items()}


class GemLoopConfig(BaseModel):
    """Settings of the loop, from the trainer config's top-level ``gem`` section (``+gem.layout=...``).

    Attributes:
        layout: ``"sequence"`` (one output per episode) or ``"transition"`` (one per turn).
        max_turns: Stop an episode after this many turns (its last turn counts as
            truncated); ``None`` leaves it to the env and the response budget.
        max_turn_tokens: Most tokens one turn may generate (``max_tokens`` of each
            request is this or what is left of ``rollout.response_length``, whichever is smaller).
        on_cut: What a generation cut at its token limit becomes: ``"invalid"`` (the
            env gets an invalid action and its penalty; GEM's rule), ``"pass"`` (the cut
            text is the action) or ``"truncate"`` (the episode ends there, reward 0).
        env_kwargs: Constructor overrides for every env (rows may add their own).
        wrappers: Wrappers applied to every env: registered names, or ``[name, kwargs]``
            pairs (``+gem.wrappers='[[tools, {tools: [echo]}]]'``).
        on_env_error: ``"end"`` (default): an env that raises in ``reset`` or ``step``
            ends only its episode, which becomes one sample with no trainable token
            (``response_mask`` all 0, no turn for ``rebn``, reward 0), counted as
            ``gem/env_errors``; ``"raise"``: the error propagates (verl fails the step).
        harness: ``gem_gateway_agent`` only: ``"module:function"``, the trainer code that
            runs a black-box agent program against the gateway for one row and returns its
            reward (:mod:`gem_gateway.harness`).
        harness_timeout_s: ``gem_gateway_agent``: longest one harness (and each of its calls) may run.
        tool_parser: ``gem_gateway_agent``: the model family's tool-call format (``hermes``, ``llama3``, ``none``).
        max_calls: ``gem_gateway_agent``: most chat calls one episode may make (past it: HTTP 429 to the agent).
    """

    model_config = ConfigDict(extra="forbid")

    layout: Literal["sequence", "transition"] = "sequence"
    max_turns: int | None = Field(default=None, ge=1)
    max_turn_tokens: int | None = Field(default=None, ge=1)
    on_cut: Literal["invalid", "pass", "truncate"] = "invalid"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    wrappers: list[str | tuple[str, dict[str, Any]]] = Field(default_factory=list)
    on_env_error: Literal["end", "raise"] = "end"
    harness: str | None = None
    harness_timeout_s: float = Field(default=600.0, gt=0)
    tool_parser: str = "hermes"
    max_calls: int = Field(default=64, ge=1)


@dataclass(frozen=True)
class Option:
    """One row of the options table.

    Attributes:
        key: The verl (or ``+gem``) option.
        when: The setting that interacts with multi-turn episodes or ReBN.
        handling: ``"refused"`` (a ``ConfigError`` naming the option and the fix) or ``"supported"``.
        why: What would go wrong, or how gem supports it.
    """

    key: str
    when: str
    handling: Literal["refused", "supported"]
    why: str


#: The table (``docs/verl.md``, "Options checked at launch"); one test case per row.
OPTIONS: tuple[Option, ...] = (
    Option("gem.*", "an unknown key or a bad value", "refused", "a typo would silently fall back to a default"),
    Option("trainer.use_v1", "`false`", "refused", "the legacy trainer keeps one reward per sample"),
    Option(
        "algorithm.adv_estimator",
        "anything but `rebn` with `+gem.layout=transition`",
        "refused",
        "a transition row's reward is its return G_t: verl's GRPO would train on the last turn only, the "
        "others would treat each turn as an episode of its own",
    ),
    Option(
        "actor_rollout_ref.rollout.n",
        "`1` with a group estimator (grpo, rloo, opo, ...)",
        "refused",
        "every group holds one episode: every advantage is 0 and nothing trains",
    ),
    Option("algorithm.gamma", "outside [0, 1]", "refused", "the per-turn discount of `rebn`"),
    Option(
        "algorithm.use_kl_in_reward",
        "`true` with `+gem.layout=transition`",
        "refused",
        "the penalty of later turns would never reach the earlier turns' returns; use "
        "`actor_rollout_ref.actor.use_kl_loss=true` or the sequence layout",
    ),
    Option(
        "reward.reward_model.enable",
        "`true`",
        "refused",
        "the env is the reward; verl's colocated reward model overwrites the per-turn rewards",
    ),
    Option(
        "algorithm.filter_groups.enable",
        "`true` with `actor_rollout_ref.rollout.n=1`",
        "refused",
        "a group of one episode has no spread: verl keeps every sequence-layout group and drops every multi-turn "
        "transition-layout group, refilling forever",
    ),
    Option(
        "algorithm.filter_groups.metric",
        "`reward` with `+gem.layout=transition`",
        "refused",
        "verl would compare per-turn returns, not episodes: use `episode_return`",
    ),
    Option(
        "algorithm.filter_groups.metric",
        "a name that is neither `reward` nor a gem episode metric",
        "refused",
        "verl's replay buffer would raise mid-run on the first finished group",
    ),
    Option(
        "algorithm.filter_groups.metric",
        "a gem episode metric (`episode_return`, `success`, `num_turns`, ...), either layout",
        "supported",
        "`reward_extra_info` carries it per episode: a group is kept iff its episodes differ",
    ),
    Option(
        "algorithm.rollout_correction.rollout_rs",
        "token-level (`token_k1`, ...) with `rebn`",
        "supported",
        "explicit turn boundaries: a turn keeps one advantage on its surviving tokens",
    ),
)


def _get(section: Any, path: str, default: Any = None) -> Any:
    """``section.a.b`` of a DictConfig, dict or dataclass; ``default`` when any part is missing."""
    value = section
    for name in path.split("."):
        if value is None:
            return default
        if isinstance(value, Mapping) or hasattr(value, "keys"):
            try:
                value = value.get(name, None)
            except Exception:  # a DictConfig in struct mode refuses unknown keys
                return default
        else:
            value = getattr(value, name, None)
    return default if value is None else value


def _plain(section: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(section):
            return OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        pass
    return section


def uses_gem(config: Any) -> bool:
    """Whether a trainer config trains with gem: a ``gem`` section, ``gem_env_agent`` or ``rebn`` selected."""
    return (
        _get(config, "gem") is not None
        or _get(config, "actor_rollout_ref.rollout.agent.default_agent_loop") == _AGENT_NAME
        or str(_get(config, "algorithm.adv_estimator", "")) == _REBN
    )


def gem_section(config: Any) -> GemLoopConfig:
    """The validated ``gem`` section of a trainer config (defaults when absent).

    Raises:
        ConfigError: An unknown key or a bad value, named.
    """
    section = _get(config, "gem")
    try:
        return GemLoopConfig.model_validate(_plain(section) if section is not None else {})
    except ValidationError as exc:
        raise ConfigError(f"bad `gem` section in the trainer config (the +gem.* overrides): {exc}") from None


def check_trainer_config(config: Any) -> GemLoopConfig:
    """Check the trainer options that interact with multi-turn episodes and ReBN (:data:`OPTIONS`).

    Args:
        config: verl's trainer config (the hydra ``DictConfig``; partial configs are
            read with verl's defaults for what is missing).

    Returns:
        The validated ``gem`` section.

    Raises:
        ConfigError: A refused setting, naming the option and the fix.
    """
    gem = gem_section(config)
    transition = gem.layout == "transition"
    if not _get(config, "trainer.use_v1", True):
        raise ConfigError(
            "trainer.use_v1=false: gem_env_agent needs verl's v1 trainer (the default); the legacy trainer keeps one "
            "reward per sample, so per-turn rewards would be lost. Set trainer.use_v1=true"
        )
    raw_estimator = _get(config, "algorithm.adv_estimator", _REBN)
    estimator = str(getattr(raw_estimator, "value", raw_estimator))  # verl's AdvantageEstimator enum or a str
    if transition and estimator != _REBN:
        raise ConfigError(
            f"algorithm.adv_estimator={estimator} with +gem.layout=transition: each transition row's reward is its "
            "return G_t, so verl's estimators would not see episodes (grpo trains on the last turn only). Use "
            "algorithm.adv_estimator=rebn or +gem.layout=sequence"
        )
    n = int(_get(config, "actor_rollout_ref.rollout.n", 1))
    if estimator in GROUP_ESTIMATORS and n < 2:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n={n} with algorithm.adv_estimator={estimator}: each group holds one "
            "episode, so every advantage is 0 and nothing trains. Set actor_rollout_ref.rollout.n>=2 or use "
            "algorithm.adv_estimator=rebn"
        )
    try:
        check_gamma(_get(config, "algorithm.gamma", 1.0))
    except RLInputError as exc:
        raise ConfigError(f"algorithm.gamma (the per-turn discount): {exc}") from None
    if transition and _get(config, "algorithm.use_kl_in_reward", False):
        raise ConfigError(
            "algorithm.use_kl_in_reward=true with +gem.layout=transition: the KL penalty of later turns would never "
            "reach the returns of earlier turns. Use actor_rollout_ref.actor.use_kl_loss=true (and "
            "algorithm.use_kl_in_reward=false) or +gem.layout=sequence"
        )
    if _get(config, "reward.reward_model.enable", False):
        raise ConfigError(
            "reward.reward_model.enable=true: with gem the env is the reward, and verl's reward model would "
            "overwrite the per-turn rewards (rm_scores). Set reward.reward_model.enable=false"
        )
    _check_filter_groups(config, transition)
    return gem


def _check_filter_groups(config: Any, transition: bool) -> None:
    if not _get(config, "algorithm.filter_groups.enable", False):
        return
    n = int(_get(config, "actor_rollout_ref.rollout.n", 1))
    if n < 2:
        raise ConfigError(
            f"algorithm.filter_groups.enable=true with actor_rollout_ref.rollout.n={n}: DAPO keeps the groups whose "
            "episodes differ, and a group of one episode cannot differ (verl would keep every group of the sequence "
            "layout and drop every multi-turn group of the transition layout, refilling forever). Set "
            "actor_rollout_ref.rollout.n>=2 or algorithm.filter_groups.enable=false"
        )
    metric = str(_get(config, "algorithm.filter_groups.metric", ""))
    known = ", ".join(EPISODE_METRICS)
    if metric == REWARD_METRIC and transition:
        raise ConfigError(
            "algorithm.filter_groups.metric=reward with +gem.layout=transition: verl would compare the per-turn "
            "returns of all the group's transitions, not its episodes. Use algorithm.filter_groups.metric="
            "episode_return (the same value on every transition of an episode)"
        )
    if metric != REWARD_METRIC and metric not in EPISODE_METRICS:
        raise ConfigError(
            f"algorithm.filter_groups.metric={metric or '(unset)'}: gem's samples carry no such metric, so verl's "
            f"replay buffer would fail on the first finished group. Use one of: reward, {known}"
        )
