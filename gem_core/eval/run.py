"""Evaluate a model on envs: episodes through the episode engine, bounded concurrency, streamed traces, resume."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.core import AsyncEnv, to_async
from gem_core.episode import EpisodeEngine, EpisodeLimits, EpisodeSession, Generation, TurnRequest
from gem_core.errors import ConfigError
from gem_core.eval.backends import Backend
from gem_core.eval.traces import TraceWriter, episode_key, finished_keys, read_trace
from gem_core.registry import WrapperRef

__all__ = ["EnvSummary", "EvalSettings", "evaluate", "summarize"]


@dataclass
class EvalSettings:
    """What to evaluate.

    Attributes:
        env_ids: Registered env ids.
        num_episodes: Episodes per env.
        seed_start: Episode ``i`` of every env resets with seed ``seed_start + i``, so two
            runs (and two models) see the same start states.
        limits: The engine's budgets (``max_turns``, ``max_turn_tokens``, ...).
        concurrency: Most episodes in flight at once (over all envs).
        env_kwargs: Constructor overrides for every env.
        wrappers: Wrappers for every env (e.g. ``[("tools", {"tools": ["python"]})]``).
        trace_path: JSONL file of finished episodes (``None``: no trace, no resume). It
            must be new or empty unless ``resume`` is set.
        resume: Skip ``(env, seed)`` pairs already in ``trace_path`` (every record there is
            checked first; a bad one is a ``TrajectoryError`` naming ``file:line``).
    """

    env_ids: Sequence[str]
    num_episodes: int = 10
    seed_start: int = 0
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    concurrency: int = 8
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    wrappers: Sequence[WrapperRef] = ()
    trace_path: str | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise ConfigError("give at least one env id")
        if self.num_episodes < 1:
            raise ConfigError(f"num_episodes must be >= 1, got {self.num_episodes}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.resume and not self.trace_path:
            raise ConfigError("--resume needs --trace (the file that holds the finished episodes)")


#: ``progress(env_id, finished_record)``, called as each episode finishes.
Progress = Callable[[str, dict[str, Any]], None]


async def evaluate(backend: Backend, settings: EvalSettings, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Play ``settings.num_episodes`` episodes of every env with ``backend``; return one record per episode.

    An episode whose env, tool or model fails is recorded with its ``error`` and counts
    as unsuccessful; the run goes on. With a trace, each record is appended (and
    flushed) the moment its episode ends; with ``resume`` the episodes already in it are
    skipped and returned first.
    """
    from gem_core.api import make, spec

    for env_id in settings.env_ids:
        spec(env_id)  # an unknown id fails before any episode starts
    engine = EpisodeEngine(backend.tokenizer, settings.limits)
    done: list[dict[str, Any]] = []
    if settings.resume and settings.trace_path:
        done = read_trace(settings.trace_path, repair=True)  # every record checked: file:line errors
    elif settings.trace_path and os.path.exists(settings.trace_path) and os.path.getsize(settings.trace_path) > 0:
        # appending a second run would repeat its (env, seed) pairs, and the summary would count them twice
        raise ConfigError(
            f"the trace {settings.trace_path} already holds episodes: pass --resume to go on with it, "
            "or give a new --trace path"
        )
    skip = finished_keys(done)
    for record in done:
        if progress is not None:
            progress(record["env_id"], record)
    todo = [
        (env_id, settings.seed_start + i)
        for env_id in settings.env_ids
        for i in range(settings.num_episodes)
        if episode_key(env_id, settings.seed_start + i) not in skip
    ]
    gate = asyncio.Semaphore(settings.concurrency)
    described = backend.describe()

    async def one(env_id: str, seed: int) -> dict[str, Any]:
        async with gate:
            started = time.perf_counter()
            env: AsyncEnv | None = None
            session: EpisodeSession | None = None
            error: str | None = None
            key = f"{env_id}/seed={seed}"

            async def generate(request: TurnRequest) -> Generation:
                return await backend.generate(request, key)

            try:
                session = engine.session(env_id=env_id, seed=seed, episode_id=key)
                env = to_async(make(env_id, wrappers=list(settings.wrappers) or None, **settings.env_kwargs))
                await engine.play(env, generate, seed=seed, session=session)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one failing env, tool or request marks its episode only
                error = f"{type(exc).__name__}: {exc}"
            finally:
                if env is not None:
                    try:
                        await env.close()
                    except Exception as exc:
                        error = error or f"close failed: {type(exc).__name__}: {exc}"
            return _record(env_id, seed, session, error, time.perf_counter() - started, described)

    tasks = [asyncio.ensure_future(one(env_id, seed)) for env_id, seed in todo]
    try:
        with TraceWriter(settings.trace_path) if settings.trace_path else contextlib.nullcontext() as writer:
            for finished in asyncio.as_completed(tasks):
                record = await finished
                if writer is not None:
                    writer.write(record)
                done.append(record)
                if progress is not None:
                    progress(record["env_id"], record)
    finally:
        for task in tasks:
            task.cancel()
    order = {env_id: i for i, env_id in enumerate(settings.env_ids)}
    return sorted(done, key=lambda r: (order.get(r["env_id"], len(order)), r["seed"]))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _record(
    env_id: str,
    seed: int,
    session: EpisodeSession | None,
    error: str | None,
    wall_s: float,
    described: dict[str, Any],
) -> dict[str, Any]:
    turns = [] if session is None else session.turns
    usage_prompt = sum(int(g.extra.get("prompt_tokens", 0)) for g in (session.generations if session else []))
    usage_completion = sum(int(g.extra.get("completion_tokens", 0)) for g in (session.generations if session else []))
    generated = sum(len(t.action_token_ids or []) for t in turns)
    last = turns[-1] if turns else None
    return {
        "env_id": env_id,
        "seed": seed,
        **described,
        "error": error,
        "episode_return": math.fsum(t.reward for t in turns),
        "success": bool(last is not None and last.info.get("success", False)) and error is None,
        # games seen from one seat (multiagent:*-vs-*): the seat played and how the game ended for it
        "seat": _text_or_none(last.info.get("seat") if last is not None else None),
        "outcome": _text_or_none(last.info.get("outcome") if last is not None and error is None else None),
        "num_turns": len(turns),
        "terminated": bool(last and last.terminated),
        "truncated": bool(last and last.truncated),
        "end_reason": "error" if error else (session.end_reason if session else None),
        "completion_tokens": usage_completion or generated,
        "prompt_tokens": usage_prompt or (len(session.context) - generated if session and session.context else 0),
        "wall_s": wall_s,
        "policy_s": session.policy_seconds if session else [],
        "env_s": session.env_seconds if session else [],
        "messages": list(session.messages) if session else [],
        "turns": [
            {
                "action": t.action,
                "reward": t.reward,
                "terminated": t.terminated,
                "truncated": t.truncated,
                "stop_reason": t.stop_reason,
                "generated_tokens": len(t.action_token_ids or []),
                "info": t.info,
            }
            for t in turns
        ],
    }


@dataclass
class EnvSummary:
    """Aggregates of one env's records (errors count as failures, not as rewards)."""

    env_id: str
    episodes: int
    errors: int
    success: float
    success_ci: tuple[float, float]
    reward: float
    reward_ci: float
    turns: float
    completion_tokens: float
    #: Per seat, how many games ended ``win``/``draw``/``loss`` (records with an ``outcome``: games
    #: played from one seat); empty for other envs.
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "episodes": self.episodes,
            "errors": self.errors,
            "success": self.success,
            "success_ci95": list(self.success_ci),
            "mean_reward": self.reward,
            "reward_ci95": self.reward_ci,
            "mean_turns": self.turns,
            "mean_completion_tokens": self.completion_tokens,
            "outcomes_per_seat": self.outcomes,
        }


def _wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval: sensible at 0/n and n/n, unlike mean +- 1.96 se."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(records: Sequence[dict[str, Any]]) -> list[EnvSummary]:
    """One summary per env id, in first-seen order."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_env.setdefault(record["env_id"], []).append(record)
    out = []
    for env_id, rows in by_env.items():
        n = len(rows)
        rewards = [float(r["episode_return"]) for r in rows]
        mean = math.fsum(rewards) / n
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in rewards) / (n - 1)) if n > 1 else 0.0
        successes = sum(bool(r["success"]) for r in rows)
        outcomes: dict[str, dict[str, int]] = {}
        for r in rows:
            if r.get("outcome") in ("win", "draw", "loss"):
                counts = outcomes.setdefault(str(r.get("seat") or "-"), {"win": 0, "draw": 0, "loss": 0})
                counts[r["outcome"]] += 1
        out.append(
            EnvSummary(
                env_id=env_id,
                episodes=n,
                errors=sum(r.get("error") is not None for r in rows),
                success=successes / n,
                success_ci=_wilson(successes, n),
                reward=mean,
                reward_ci=1.96 * sd / math.sqrt(n) if n > 1 else 0.0,
                turns=math.fsum(r["num_turns"] for r in rows) / n,
                completion_tokens=math.fsum(r["completion_tokens"] for r in rows) / n,
                outcomes=dict(sorted(outcomes.items())),
            )
        )
    return out
