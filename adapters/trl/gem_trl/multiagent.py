"""Self-play and fixed-opponent training of multi-agent gem envs with TRL's ``GRPOTrainer``.

TRL trains one completion per prompt. Here a prompt is a *seat key*, ``"env_id#seed@seat"``
(:func:`seat_key`, :func:`make_seat_dataset`): one seat's trajectory of one game.
:class:`MultiAgentRollout` (a TRL ``rollout_func``) plays the games with the core's
:func:`~gem_core.multiagent.engine.play_multiagent`: the trainer's model in every seat that is
not a fixed opponent (self-play: the same model in all seats), each seat with its own token
context; the rows of one start state are paired across seats, so one self-play game fills a
row of every seat it has (a seat without a row in this batch is still played by the model, and
its trajectory dropped). Each row carries its ``seat``.

:class:`GemMultiAgentTrainer` replaces TRL's advantage by a role-conditioned one
(:mod:`gem_core.rl.roles`), chosen by :attr:`GemMultiAgentConfig.role_advantage`: ``"rebn"``
(per-turn ReBN, each role normalised among its own turns), ``"grpo"`` (groups of one start
state *and* one seat) or ``"baseline"`` (SPIRAL's moving average per (game, seat), kept across
steps). Before that it refuses, with a typed error, a row whose trajectory is not the seat its
key named and a TRL group (``num_generations`` rows of one prompt) that mixes seats.

Limits: one process (the role statistics are not all-reduced across ranks); games are played
one after the other, each turn one ``generate`` call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

import gem_core
from gem_core.episode import EpisodeSession, Generation, TurnRequest
from gem_core.errors import ConfigError, RLInputError, UnknownAgent
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multiagent.engine import Scripted, play_multiagent
from gem_core.multiagent.seat import SeatPolicy
from gem_core.registry import load_entry_point
from gem_core.rl.roles import RoleBaseline, check_role_groups, role_grpo_advantages, role_rebn_advantages
from gem_core.rl.types import Episode
from gem_trl.advantages import completion_spans
from gem_trl.rollout import (
    EPISODE_KEY_SEPARATOR,
    GemRollout,
    RolloutTimings,
    _Timed,
    episode_key,
    hf_generate,
    parse_episode_key,
    vllm_awake,
    vllm_generate,
)
from gem_trl.trainer import GemGRPOConfig, GemGRPOTrainer
from gem_trl.vision import episode_features

__all__ = [
    "ROLE_ADVANTAGES",
    "SEAT_SEPARATOR",
    "GemMultiAgentConfig",
    "GemMultiAgentTrainer",
    "MultiAgentRollout",
    "make_seat_dataset",
    "parse_seat_key",
    "seat_key",
]

#: Joins an episode key and a seat: ``"core:Nim-v0#3@first"``.
SEAT_SEPARATOR = "@"

#: Role-conditioned advantages :class:`GemMultiAgentTrainer` computes.
ROLE_ADVANTAGES = ("rebn", "grpo", "baseline")


def seat_key(env_id: str, seed: int, seat: str) -> str:
    """The prompt that asks :class:`MultiAgentRollout` for ``seat``'s trajectory of one game."""
    if not seat or SEAT_SEPARATOR in seat or EPISODE_KEY_SEPARATOR in seat:
        raise ConfigError(f"seat {seat!r} must be a non-empty agent name without {SEAT_SEPARATOR!r} or '#'")
    return f"{episode_key(env_id, seed)}{SEAT_SEPARATOR}{seat}"


def parse_seat_key(prompt: Any) -> tuple[str, int, str]:
    """Split a seat key into ``(env_id, seed, seat)``.

    Raises:
        ConfigError: ``prompt`` is not a seat key (a single-agent episode key, or a dataset not
            built with :func:`make_seat_dataset`).
    """
    if isinstance(prompt, str):
        key, sep, seat = prompt.rpartition(SEAT_SEPARATOR)
        if sep and seat and EPISODE_KEY_SEPARATOR in key:
            env_id, seed = parse_episode_key(key)
            return env_id, seed, seat
    raise ConfigError(
        f"prompt {prompt!r} is not a seat key like 'core:Nim-v0#3@first'; build the dataset with "
        "gem_trl.multiagent.make_seat_dataset(env_ids, seeds)"
    )


def _make_multiagent(env_id: str) -> MultiAgentEnv:
    env: Any = gem_core.make(env_id)
    if not isinstance(env, MultiAgentEnv):
        env.close()
        raise ConfigError(
            f"{env_id} is a single-agent env; train it with GemGRPOTrainer and make_prompt_dataset (a fixed "
            "opponent inside a single-agent env, e.g. the '-vs-scripted' ids, needs no multi-agent trainer)"
        )
    return env


def make_seat_dataset(
    env_ids: str | Sequence[str],
    seeds: int | Sequence[int] = 64,
    *,
    seats: Sequence[str] | None = None,
    opponents: Mapping[str, Any] | None = None,
    start_seed: int = 0,
) -> Any:
    """The training dataset: one row per (env id, seed, trained seat).

    Args:
        env_ids: Multi-agent env ids.
        seeds: How many seeds per env (from ``start_seed``) or the seeds themselves.
        seats: The seats to train; default every seat of the env not in ``opponents``.
        opponents: The seats a fixed policy plays (as given to :class:`MultiAgentRollout`).
        start_seed: First seed when ``seeds`` is a count.

    Returns:
        A ``datasets.Dataset`` with ``prompt`` (seat keys), ``env_id``, ``seed`` and ``seat`` columns;
        the seats of one seed are adjacent.

    Raises:
        ConfigError: An id that is not a multi-agent env, no seeds, or a seat the env does not have
            or that an opponent plays.
    """
    from datasets import Dataset

    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    if not ids:
        raise ConfigError("env_ids is empty; give at least one registered multi-agent env id")
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ConfigError(f"seeds must be >= 1 when it is a count, got {seeds}")
        seed_list = list(range(start_seed, start_seed + int(seeds)))
    else:
        seed_list = [int(s) for s in seeds]
    fixed = dict(opponents or {})
    rows: list[tuple[str, int, str]] = []
    for env_id in ids:
        env = _make_multiagent(env_id)
        agents = tuple(env.possible_agents)
        env.close()
        trained = list(seats) if seats is not None else [a for a in agents if a not in fixed]
        for seat in trained:
            _check_seat(env_id, seat, agents, fixed)
        rows += [(env_id, seed, seat) for seed in seed_list for seat in trained]
    return Dataset.from_dict(
        {
            "prompt": [seat_key(*row) for row in rows],
            "env_id": [r[0] for r in rows],
            "seed": [r[1] for r in rows],
            "seat": [r[2] for r in rows],
        }
    )


def _check_seat(env_id: str, seat: str, agents: Sequence[str], opponents: Mapping[str, Any]) -> None:
    if seat not in agents:
        raise UnknownAgent(f"{env_id} has no seat {seat!r}; its seats are {list(agents)}")
    if seat in opponents:
        raise ConfigError(
            f"seat {seat!r} of {env_id} is played by a fixed opponent, so it has no trajectory to train; "
            "drop it from the dataset or from opponents"
        )


def _policy(ref: Any) -> SeatPolicy:
    policy = load_entry_point(ref) if isinstance(ref, str) else ref
    if not callable(policy):
        raise ConfigError(f"opponent {ref!r} is not a callable (env, agent, news) -> str")
    return policy  # type: ignore[no-any-return]


class MultiAgentRollout(GemRollout):
    """A TRL ``rollout_func`` that plays multi-agent games and returns one seat's trajectory per prompt.

    Args:
        opponents: Seats a fixed policy plays: agent -> a
            :class:`~gem_core.multiagent.seat.SeatPolicy` or its ``"module:attr"``. Every other seat
            is the trainer's model (self-play when empty).
        system_prompt: A system message for every seat.
        **kwargs: :class:`~gem_trl.rollout.GemRollout`'s limits (``max_turns`` and
            ``max_turn_tokens`` per seat, ``max_completion_length`` per seat's completion, ``gamma``,
            ``on_cut``). Wrappers are single-agent: not taken.

    Each call returns what :class:`~gem_trl.rollout.GemRollout` returns, per row, plus ``seat``.
    A seat whose game ended before it acted gets one masked stop token (nothing to train).
    """

    def __init__(
        self, *, opponents: Mapping[str, Any] | None = None, system_prompt: str | None = None, **kwargs: Any
    ) -> None:
        if kwargs.get("wrappers"):
            raise ConfigError("MultiAgentRollout takes no wrappers (gem's wrappers are single-agent)")
        super().__init__(system_prompt=system_prompt, **kwargs)
        self.opponents: dict[str, SeatPolicy] = {seat: _policy(ref) for seat, ref in (opponents or {}).items()}

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if self.engine is None:
            self.setup(trainer)
        if trainer.accelerator.num_processes != 1:
            raise ConfigError(
                "gem_trl.multiagent trains on one process: its role statistics are not all-reduced across ranks "
                f"(got {trainer.accelerator.num_processes} processes)"
            )
        keys = [parse_seat_key(p) for p in prompts]
        if trainer.use_vllm:
            with vllm_awake(trainer):
                sessions = self.play_seats(keys, vllm_generate(trainer))
        else:
            sessions = self.play_seats(keys, hf_generate(trainer))
        started = time.perf_counter()
        out = self.to_trl_seats(sessions)
        self.last_timings.adapter += time.perf_counter() - started
        self._log(trainer, out)
        return out

    def play_seats(self, keys: Sequence[tuple[str, int, str]], generate: Any) -> list[EpisodeSession]:
        """Play the games the rows ask for; return each row's seat session, in row order.

        Rows of one ``(env_id, seed)`` are paired across seats (game ``j`` serves the ``j``-th row
        of every seat); each game is played with :func:`play_multiagent`.

        Raises:
            UnknownAgent: A key names a seat the env does not have.
            ConfigError: A key names a seat a fixed opponent plays, or an env that is not multi-agent.
        """
        if self.engine is None:
            raise RuntimeError("call setup(trainer) before play_seats(), or call the rollout as TRL does")
        timings = self.last_timings = RolloutTimings()
        started = time.perf_counter()
        timed = _Timed(generate, timings, None, self._filler_request)

        def one(request: TurnRequest) -> Generation | str:
            return timed([request])[0]

        games: dict[tuple[str, int], dict[str, list[int]]] = {}
        for row, (env_id, seed, seat) in enumerate(keys):
            games.setdefault((env_id, seed), {}).setdefault(seat, []).append(row)
        sessions: list[EpisodeSession | None] = [None] * len(keys)
        for (env_id, seed), rows_by_seat in games.items():
            env = _make_multiagent(env_id)
            try:
                for seat in rows_by_seat:
                    _check_seat(env_id, seat, env.possible_agents, self.opponents)
                policies: dict[str, Any] = {a: one for a in env.possible_agents}
                policies.update({a: Scripted(p) for a, p in self.opponents.items() if a in env.possible_agents})
                for game in range(max(len(rows) for rows in rows_by_seat.values())):
                    result = play_multiagent(
                        self.engine, env, policies, seed=seed, env_id=env_id, system_prompts=self.limits.system_prompt
                    )
                    for seat, rows in rows_by_seat.items():
                        if game < len(rows):
                            sessions[rows[game]] = result.sessions[seat]
            finally:
                env.close()
        timings.env = sum(sum(s.env_seconds) for s in sessions if s is not None)
        timings.adapter += time.perf_counter() - started - timings.generate - timings.env
        return [s for s in sessions if s is not None]

    def to_trl_seats(self, sessions: Sequence[EpisodeSession]) -> dict[str, Any]:
        """TRL's layout of each seat's trajectory (:meth:`GemRollout.to_trl`), plus ``seat`` per row."""
        played = [s for s in sessions if s.turns]
        out = self.to_trl(played)
        rows: dict[str, list[Any]] = {key: [] for key in out}
        taken = iter(range(len(played)))
        for session in sessions:
            if session.turns:
                index = next(taken)
                for key, values in out.items():
                    if values is not None:
                        rows[key].append(values[index])
            else:
                self._append_unplayed(rows, session)
        rows["seat"] = [s.metadata["seat"] for s in sessions]
        if out["logprobs"] is None:
            rows["logprobs"] = None  # type: ignore[assignment]
        return rows

    def _append_unplayed(self, rows: dict[str, list[Any]], session: EpisodeSession) -> None:
        """A seat the game ended before it acted (an opponent forfeited first): one masked stop token."""
        episode = session.episode()
        prompt = session.context if session.context is not None else self._placeholder_prompt()
        values: dict[str, Any] = {
            "prompt_ids": list(prompt),
            "completion_ids": [self._stop_token()],
            "env_mask": [0],
            "episode": episode,
            "turn_rewards": [],
            "turn_spans": [],
            "episode_return": 0.0,
            "num_turns": 0,
            "success": False,
            "terminated": True,
            "truncated": False,
            "end_reason": session.end_reason,
            "cut_turns": 0,
            "env_error": None,
            "logprobs": [0.0],
            # the prompt's images (an image game's first observation), as every played row carries them
            "image_inputs": episode_features(session.image_inputs) if session.context is not None else None,
        }
        for key in rows:
            if rows[key] is not None:
                rows[key].append(values[key])


@dataclass
class GemMultiAgentConfig(GemGRPOConfig):
    """:class:`~gem_trl.trainer.GemGRPOConfig` plus the role-conditioned advantage of multi-agent training."""

    role_advantage: str = field(
        default="rebn",
        metadata={
            "help": "'rebn': per-turn returns normalised per seat; 'grpo': groups of one start state and one seat; "
            "'baseline': SPIRAL's moving average of the return per (game, seat)."
        },
    )
    role_baseline_alpha: float = field(default=0.95, metadata={"help": "Decay of the 'baseline' average, in [0, 1)."})

    def __post_init__(self) -> None:
        if self.role_advantage not in ROLE_ADVANTAGES:
            raise ConfigError(f"role_advantage must be one of {ROLE_ADVANTAGES}, got {self.role_advantage!r}")
        if self.advantage_estimator != "rebn":
            raise ConfigError(
                "GemMultiAgentConfig computes role advantages itself: leave advantage_estimator='rebn' and choose "
                f"role_advantage in {ROLE_ADVANTAGES}"
            )
        super().__post_init__()
        if not 0.0 <= self.role_baseline_alpha < 1.0:
            raise ConfigError(f"role_baseline_alpha must be in [0, 1), got {self.role_baseline_alpha}")


class GemMultiAgentTrainer(GemGRPOTrainer):
    """``GRPOTrainer`` on multi-agent games: one seat's trajectory per row, role-conditioned advantages.

    Args:
        model: As for ``GRPOTrainer``.
        args: A :class:`GemMultiAgentConfig`.
        train_dataset: Seat keys, from :func:`make_seat_dataset`.
        opponents: Seats a fixed policy plays (see :class:`MultiAgentRollout`); none is self-play.
        system_prompt: A system message for every seat.
        **kwargs: Passed to ``GRPOTrainer`` (``processing_class``, ``callbacks``, ...).
    """

    def __init__(
        self,
        model: Any,
        args: GemMultiAgentConfig,
        train_dataset: Any,
        *,
        opponents: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, GemMultiAgentConfig):
            raise ConfigError(f"args must be a GemMultiAgentConfig, got {type(args).__name__}")
        rollout = kwargs.pop("rollout_func", None) or MultiAgentRollout(
            opponents=opponents,
            system_prompt=system_prompt,
            gamma=args.gamma,
            max_turns=args.max_turns,
            max_turn_tokens=args.max_turn_tokens,
            on_cut=args.on_cut,  # type: ignore[arg-type]
        )
        #: SPIRAL's baselines, kept across steps (``role_advantage="baseline"``).
        self.role_baseline = RoleBaseline(alpha=args.role_baseline_alpha)
        super().__init__(model=model, args=args, train_dataset=train_dataset, rollout_func=rollout, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        # TRL's own scoring (rewards, masks, log-probs), then the role advantages in place of its GRPO ones.
        output: dict[str, Any] = GRPOTrainer._generate_and_score_completions(self, inputs)
        episodes, seats = self._checked_rows(inputs)
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        per_turn = self.role_advantages(episodes, seats)
        width = output["completion_ids"].shape[1]
        advantages = torch.zeros((len(episodes), width), dtype=torch.float32)
        for row, (episode, values) in enumerate(zip(episodes, per_turn, strict=True)):
            if not episode.turns:
                continue  # a seat that never acted: nothing to train
            for (start, end), value in zip(completion_spans(episode), values, strict=True):
                advantages[row, start:end] = float(value)
        advantages = advantages.to(output["completion_ids"].device) * loss_mask
        output["advantages"] = advantages
        keep = [[True] * len(ep.turns) for ep in episodes]
        self._log_used_advantages(advantages, loss_mask, keep)
        return output

    def role_advantages(self, episodes: Sequence[Episode], seats: Sequence[str]) -> list[np.ndarray]:
        """Per-turn advantages of one batch by :attr:`GemMultiAgentConfig.role_advantage`."""
        kind = self.args.role_advantage
        if kind == "rebn":
            return role_rebn_advantages(episodes, roles=seats, gamma=self.args.gamma, eps=self.args.rebn_eps)
        if kind == "grpo":
            return role_grpo_advantages(episodes, roles=seats, gamma=self.args.gamma)
        return self.role_baseline.advantages(episodes, roles=seats, gamma=self.args.gamma)

    def _checked_rows(self, inputs: list[dict[str, Any]]) -> tuple[list[Episode], list[str]]:
        """Each row's episode and seat; refuses a forged seat and a TRL group that mixes seats."""
        if not inputs or "episode" not in inputs[0] or "seat" not in inputs[0]:
            raise ConfigError("GemMultiAgentTrainer needs the 'episode' and 'seat' fields of MultiAgentRollout")
        episodes: list[Episode] = [x["episode"] for x in inputs]
        seats: list[str] = []
        for row, x in enumerate(inputs):
            env_id, seed, asked = parse_seat_key(x["prompt"])
            played = x["episode"].metadata.get("seat")
            if x["seat"] != asked or played != asked or x["episode"].seed != seed:
                raise RLInputError(
                    f"row {row} asked for seat {asked!r} of {env_id} seed {seed} but carries seat {x['seat']!r} "
                    f"with a trajectory played from seat {played!r} (seed {x['episode'].seed}): a rollout must "
                    "return the trajectory of the seat its prompt names"
                )
            seats.append(asked)
        size = self.num_generations
        check_role_groups([(row // size) for row in range(len(inputs))], seats)
        return episodes, seats
