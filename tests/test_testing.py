"""check_env must pass good envs and catch each kind of contract violation with a useful message."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.errors import EnvCheckError
from gem_core.testing import GenericTestEnv, NumberGuessEnv, check_env


def test_reference_env_passes() -> None:
    check_env(NumberGuessEnv(), env_factory=NumberGuessEnv)


def test_generic_env_passes() -> None:
    check_env(GenericTestEnv(), env_factory=GenericTestEnv)


class GlobalRandomEnv(GenericTestEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        if seed is not None:
            random.seed(seed)  # the GEM mistake: reseeding the whole process
        return f"n={random.random()}", {}


class NumpyGlobalEnv(GenericTestEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        return f"n={np.random.random()}", {}


class UnseededEnv(GenericTestEnv):
    """Ignores the seed: draws from an RNG it never reseeds."""

    rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        return f"n={self.rng.random()}", {}


class PositionalResetEnv(Env):
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:  # type: ignore[override]
        return "", {}

    def step(self, action: str) -> StepReturn:
        return "", 0.0, True, False, {}


def _step_returning(result: Any) -> GenericTestEnv:
    return GenericTestEnv(step_func=lambda env, action: result)


def _raises_on(trigger: str) -> GenericTestEnv:
    def step(env: GenericTestEnv, action: str) -> StepReturn:
        if trigger in action:
            raise ValueError("could not parse")
        return "ok", 0.0, False, False, {}

    return GenericTestEnv(step_func=step)


class DoubleCloseEnv(GenericTestEnv):
    def close(self) -> None:
        super().close()
        if self.closed > 1:
            raise RuntimeError("already closed")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (GlobalRandomEnv(), "global `random` state"),
        (NumpyGlobalEnv(), "global `numpy.random` state"),
        (UnseededEnv(), "not deterministic across the same instance"),
        (PositionalResetEnv(), "keyword-only 'seed'"),
        (GenericTestEnv(reset_func=lambda env, s, o: ("obs", None)), "info must be dict"),  # type: ignore[arg-type, return-value]
        (GenericTestEnv(reset_func=lambda env, s, o: "obs"), "must return \\(obs, info\\)"),  # type: ignore[arg-type, return-value]
        (_step_returning(("o", 0.0, False, False)), "5-tuple"),
        (_step_returning((1, 0.0, False, False, {})), "observation must be str"),
        (_step_returning(("o", float("nan"), False, False, {})), "reward must be finite"),
        (_step_returning(("o", "1", False, False, {})), "reward must be a float"),
        (_step_returning(("o", True, False, False, {})), "reward must be a float"),
        (_step_returning(("o", 0.0, 1, False, {})), "terminated must be bool"),
        (_step_returning(("o", 0.0, False, False, {"success": "yes"})), "reserved for a bool"),
        (_raises_on("\x00"), "must never raise for a malformed action"),
        (_raises_on("x" * 1000), "must never raise"),
        (DoubleCloseEnv(), "close\\(\\) must be idempotent"),
    ],
    ids=[
        "global-random",
        "global-numpy",
        "ignores-seed",
        "positional-reset",
        "info-not-dict",
        "reset-not-tuple",
        "step-4-tuple",
        "obs-not-str",
        "nan-reward",
        "str-reward",
        "bool-reward",
        "int-terminated",
        "reserved-info-key",
        "raises-on-binary",
        "raises-on-huge",
        "double-close",
    ],
)
def test_check_env_catches(env: Env, message: str) -> None:
    state = random.getstate(), np.random.get_state()
    try:
        with pytest.raises(EnvCheckError, match=message):
            check_env(env)
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])


def test_cross_instance_determinism() -> None:
    counter = iter(range(100))

    def factory() -> GenericTestEnv:
        offset = next(counter)
        return GenericTestEnv(reset_func=lambda env, seed, options: (f"{offset}", {}))

    with pytest.raises(EnvCheckError, match="two instances"):
        check_env(factory(), env_factory=factory)


class EndlessAfterDoneEnv(GenericTestEnv):
    """Ends after two steps but answers normally when stepped again (GEM's envs did)."""

    def step(self, action: str) -> StepReturn:
        self.t += 1
        return "o", 0.0, self.t >= 2, False, {}


class WrongErrorAfterDoneEnv(GenericTestEnv):
    def step(self, action: str) -> StepReturn:
        if not self.running:
            raise RuntimeError("episode over")
        return super().step(action)


class StepsBeforeResetEnv(GenericTestEnv):
    """Refuses a step after done, but answers one before the first reset."""

    def step(self, action: str) -> StepReturn:
        if self.seed_used is None and not self.running:
            return "not started", 0.0, False, False, {}
        return super().step(action)


@pytest.mark.parametrize(
    ("env_cls", "message"),
    [
        (EndlessAfterDoneEnv, r"step\(\) after the episode ended .* returned .* instead of raising .*ResetNeeded"),
        (WrongErrorAfterDoneEnv, r"step\(\) after the episode ended .* raised RuntimeError: episode over"),
        (StepsBeforeResetEnv, r"step\(\) before reset\(\) on a new instance returned"),
    ],
    ids=["returns-after-done", "wrong-error-after-done", "steps-before-reset"],
)
def test_check_env_requires_reset_needed_outside_an_episode(env_cls: type[GenericTestEnv], message: str) -> None:
    with pytest.raises(EnvCheckError, match=message):
        check_env(env_cls(), env_factory=env_cls)
