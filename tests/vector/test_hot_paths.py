"""The fast paths of a batch step agree with the general one, whatever the envs do.

``SyncVectorEnv.step`` with a list goes straight to the members, ``Member.step`` and its
SAME_STEP final reset skip the request loop, a one-env batch skips the transposing, and the
thread backend hands off one job per thread. Each is held, over random scripts of actions
(episode ends, raising envs, contract breaches, every autoreset mode and ``on_error``), to the
general path: the same step served as a ``Step`` request through ``Member.handle``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gem_vector_testenvs import make_count_env
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ResetNeeded, VectorEnvError
from gem_core.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv
from gem_core.vector.member import Step

ACTIONS = ["a", "b", "end", "boom", "return:(1, 2)", "return:('o', 1.0, True, False, {})"]


def general_step(vec: VectorEnv, actions: list[str]) -> Any:
    """The step as ``Step`` requests through ``Member.handle`` (the general state machine)."""
    indices, acts = vec._prepare_step(actions)
    return vec._finish_step(indices, vec._run(indices, [Step(a) for a in acts], None))


def plain(value: Any) -> Any:
    """A comparable form: arrays as lists, tracebacks (whose frames differ by path) left out."""
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def outcome(call: Any, *args: Any) -> Any:
    try:
        return ("ok", plain(call(*args)))
    except VectorEnvError as exc:
        message = str(exc).replace("AsyncVectorEnv", "SyncVectorEnv")  # the message names the class
        return ("VectorEnvError", message, plain(exc.results), sorted(exc.failures))
    except ResetNeeded as exc:
        return ("ResetNeeded", str(exc))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 4),
    mode=st.sampled_from(["next_step", "same_step", "disabled"]),
    on_error=st.sampled_from(["raise", "reset"]),
    script=st.lists(st.lists(st.sampled_from(ACTIONS), min_size=4, max_size=4), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_fast_paths_match_the_general_one(n: int, mode: str, on_error: str, script: list[list[str]], seed: int) -> None:
    fn = functools.partial(make_count_env, 2)
    kwargs: dict[str, Any] = {"autoreset_mode": mode, "on_error": on_error}
    reference = SyncVectorEnv([fn] * n, **kwargs)
    fast = SyncVectorEnv([fn] * n, **kwargs)
    mapped = SyncVectorEnv([fn] * n, **kwargs)
    threaded = AsyncVectorEnv([fn] * n, max_threads=2, **kwargs)
    vecs: list[VectorEnv] = [reference, fast, mapped, threaded]
    try:
        for vec in vecs:
            vec.reset(seed=seed)
        for row in script:
            actions = row[:n]
            expected = outcome(general_step, reference, actions)
            assert outcome(fast.step, actions) == expected
            assert outcome(mapped.step, dict(enumerate(actions))) == expected
            assert outcome(threaded.step, tuple(actions)) == expected
            blocked = [i for i, stuck in enumerate(reference.needs_reset) if stuck]
            if blocked:  # failed or finished (autoreset disabled): start them over everywhere
                resets = {plain(vec.reset(indices=blocked)).__repr__() for vec in vecs}
                assert len(resets) == 1
    finally:
        for vec in vecs:
            vec.close()
