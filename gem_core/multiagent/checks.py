"""``check_multiagent_env``: the multi-agent contract, checked the way ``check_env`` checks a single-agent env."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from gem_core.errors import AgentError, EnvCheckError, MissingActions, NotYourTurn, ResetNeeded, UnknownAgent
from gem_core.multiagent.core import MultiAgentEnv

__all__ = ["check_multiagent_env"]

_FALLBACK_ACTIONS = ("1", "a", "\\boxed{1}", "hello")


def _fail(message: str) -> EnvCheckError:
    return EnvCheckError(message)


def _action(env: MultiAgentEnv, agent: str, i: int) -> str:
    try:
        return env.sample_random_action(agent)
    except NotImplementedError:
        return _FALLBACK_ACTIONS[i % len(_FALLBACK_ACTIONS)]


def _rollout(env: MultiAgentEnv, seed: int, max_steps: int) -> list[Any]:
    observations, infos = env.reset(seed=seed)
    trace: list[Any] = [(observations, sorted((a, sorted(i)) for a, i in infos.items()))]
    for i in range(max_steps):
        if env.episode_over:
            break
        actions = {agent: _action(env, agent, i) for agent in env.acting_agents()}
        obs, rewards, terms, truncs, infos = env.step(actions)
        for agent, reward in rewards.items():
            if not isinstance(reward, float):
                raise _fail(f"step reward of {agent!r} must be a float, got {type(reward).__name__}")
        trace.append((actions, obs, rewards, terms, truncs, sorted((a, sorted(x)) for a, x in infos.items())))
    return trace


def _expect(error: type[Exception], call: Callable[[], Any], what: str) -> None:
    try:
        call()
    except error:
        return
    except Exception as exc:
        raise _fail(f"{what} raised {type(exc).__name__}: {exc}; it must raise {error.__name__}") from exc
    raise _fail(f"{what} did not raise {error.__name__}")


def check_multiagent_env(
    env: MultiAgentEnv,
    *,
    seed: int = 0,
    max_steps: int = 60,
    fuzz: bool = True,
    env_factory: Callable[[], MultiAgentEnv] | None = None,
) -> None:
    """Check that ``env`` keeps the multi-agent contract (docs/multiagent.md).

    Checks: ``reset`` signature and briefings for every agent; wrong agents refused with typed errors
    (an unknown agent, out of turn, a missing action) and the env unchanged; a sampled episode ends
    within ``max_steps`` with float rewards; ``step`` after the end (and, on a fresh instance from
    ``env_factory``, before ``reset``) raises ``ResetNeeded``; determinism across resets and
    instances; the process-global RNGs untouched; every fuzz action survived by every acting agent;
    ``close`` twice.

    Raises:
        EnvCheckError: the first violation found, with what to fix.
    """
    from gem_core.testing import FUZZ_ACTIONS  # here: gem_core.testing imports much more

    if not isinstance(env, MultiAgentEnv):
        raise _fail(f"{type(env).__name__} is not a gem_core.multiagent.MultiAgentEnv")
    params = inspect.signature(env.reset).parameters
    for name in ("seed", "options"):
        p = params.get(name)
        if p is None or p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise _fail(f"reset() must take keyword-only '{name}'")
    py_state, np_state = random.getstate(), cast(Any, np.random.get_state())

    observations, _ = env.reset(seed=seed)
    if sorted(observations) != sorted(env.possible_agents) or env.agents != list(env.possible_agents):
        raise _fail(f"after reset every agent is live and briefed: agents={env.agents}, briefed={sorted(observations)}")
    _expect(UnknownAgent, lambda: env.step({"__no_such_agent__": "x"}), "step() for an unknown agent")
    live = env.agents
    if env.parallel:
        if live:
            _expect(MissingActions, lambda: env.step({}), "step({}) on a simultaneous-move env")
    else:
        others = [a for a in live if a != env.agent_selection]
        if others:
            _expect(NotYourTurn, lambda: env.step({others[0]: "x"}), f"step() for {others[0]!r} out of turn")
    if env.agent_turns != dict.fromkeys(env.possible_agents, 0):
        raise _fail(f"a refused step changed the env: agent_turns={env.agent_turns}")

    first = _rollout(env, seed, max_steps)
    if not env.episode_over:
        raise _fail(f"a sampled episode did not end within {max_steps} steps; give the env a turn limit")
    _expect(ResetNeeded, lambda: env.step({a: "x" for a in env.possible_agents}), "step() after the episode ended")
    second = _rollout(env, seed, max_steps)
    _check_global_rngs(py_state, np_state)  # first: it is the usual cause of non-determinism
    if first != second:
        raise _fail(_diff("the same instance reset twice", first, second))
    if env_factory is not None:
        other = env_factory()
        try:
            _expect(ResetNeeded, lambda: other.step("x"), "step() before reset() on a new instance")
            third = _rollout(other, seed, max_steps)
        finally:
            other.close()
        if first != third:
            raise _fail(_diff("two instances", first, third))

    if fuzz:
        env.reset(seed=seed + 1)
        for text in FUZZ_ACTIONS:
            if env.episode_over:
                env.reset()
            try:
                env.step(dict.fromkeys(env.acting_agents(), text))
            except AgentError:
                raise
            except Exception as exc:
                raise _fail(
                    f"step({text[:60]!r}) raised {type(exc).__name__}: {exc}; a model's text is never an error: judge "
                    "a malformed move (a penalty, a forfeit) and say so in the observation"
                ) from exc

    _check_global_rngs(py_state, np_state)
    try:
        env.close()
        env.close()
    except Exception as exc:
        raise _fail(f"close() must be idempotent; the second call raised {type(exc).__name__}: {exc}") from exc


def _check_global_rngs(py_state: Any, np_state: Any) -> None:
    if random.getstate() != py_state:
        raise _fail("the env changed the global `random` state: draw from self.py_random / self.np_random instead")
    after = cast(Any, np.random.get_state())
    if not (
        after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and tuple(after[2:]) == tuple(np_state[2:])
    ):
        raise _fail("the env changed the global `numpy.random` state: draw from self.np_random instead")


def _diff(what: str, a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            where = "reset" if i == 0 else f"step {i}"
            return (
                f"not deterministic across {what} with the same seed and actions: at {where}, {x!r:.300} != {y!r:.300}"
            )
    return f"not deterministic across {what}: episodes have different lengths ({len(a)} vs {len(b)})"
