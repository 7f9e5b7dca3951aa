"""A hostile or failing OpenEnv server never gives a gem env a wrong or stale result: typed errors only.

Malformed frames, a server restarted between turns (OpenEnv's client would reconnect to a new, empty
session), a slow server, error frames mid-step, and ``close()`` releasing the session server-side.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.errors import EnvServerError, EnvServerUnavailable, ResetNeeded
from gem_openenv.client import _BadReply, check_reply


def remote(url: str, **kwargs: object) -> gem_core.Env:
    return gem_core.make("openenv:Remote-v0", base_url=url, **kwargs)


scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) | st.text(max_size=5)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
)
data = st.fixed_dictionaries(
    {},
    optional={
        "observation": json_values
        | st.fixed_dictionaries({"reply": json_values}, optional={"terminated": json_values, "truncated": json_values}),
        "reward": json_values,
        "done": json_values,
        "metadata": json_values,
    },
)
frames = (
    st.fixed_dictionaries(
        {"type": st.sampled_from(["observation", "error", "state", "x"])}, optional={"data": data | json_values}
    ).map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=20)
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=frames)
def test_any_frame_is_a_faithful_result_or_a_typed_error(shared_server, frame: str) -> None:
    server = shared_server(native="mirror", sessions=4)
    try:
        expected = check_reply("step", json.loads(frame))
    except (ValueError, _BadReply):
        expected = None
    with remote(server.url) as env:
        env.reset()
        try:
            _, reward, terminated, truncated, _ = env.step(frame)
        except EnvServerError as exc:
            assert server.url in str(exc) and "step" in str(exc)
            assert expected is None or expected["type"] == "error"
            assert exc.code == "MALFORMED_REPLY" or expected is not None
            with pytest.raises(ResetNeeded):  # the episode is lost, never continued on an unknown state
                env.step("{}")
        else:
            assert expected is not None and expected["type"] == "observation"
            answer = expected["data"]
            assert reward == float(answer.get("reward") or 0.0)
            assert (terminated or truncated) == answer.get("done", False)  # the episode ends exactly when done
        assert env.reset()[0] == "ready"  # a fresh, sane session


def test_a_slow_server_is_a_typed_error_and_its_late_answer_is_never_read(shared_server) -> None:
    server = shared_server(native="mirror", sessions=4)
    with remote(server.url, message_timeout_s=0.5) as env:
        env.reset()
        with pytest.raises(EnvServerUnavailable, match=r"did not answer step within message_timeout_s=0.5s"):
            env.step("sleep")
        assert env.reset()[0] == "ready"
        fine = json.dumps({"type": "observation", "data": {"observation": {"reply": "fine"}, "reward": 0.5}})
        assert env.step(fine)[:2] == ("fine", 0.5)  # not the late "stale" frame


def test_a_server_restarted_between_turns_never_plays_on_in_a_new_session(start_server) -> None:
    server = start_server(native="target", sessions=2)
    port = int(server.url.rsplit(":", 1)[1])
    with remote(server.url) as env:
        env.reset(seed=3)
        env.step('{"op": "add", "amount": 1}')
        server.kill()
        start_server(native="target", sessions=2, port=port)
        # OpenEnv's client alone would reconnect and step a fresh env (a different episode): gem refuses.
        with pytest.raises(EnvServerUnavailable, match="episode is lost"):
            env.step('{"op": "add", "amount": 1}')
        with pytest.raises(ResetNeeded):
            env.step('{"op": "add", "amount": 1}')
        assert env.reset(seed=3)[0] == "reach 5 from 0"
        assert env.step('{"op": "add", "amount": 5}')[:3] == ("reached", 1.0, True)


def test_close_releases_the_session_on_the_server(start_server) -> None:
    server = start_server(native="target", sessions=1)
    first = remote(server.url)
    first.reset(seed=1)
    first.close()
    second = remote(server.url, capacity_wait_s=10)
    try:
        assert second.reset(seed=2)[0] == "reach 4 from 0"
        first_again = remote(server.url, capacity_wait_s=0)
        with pytest.raises(EnvServerError, match="CAPACITY_REACHED"):  # the one slot is the second's now
            first_again.reset(seed=1)
        first_again.close()
    finally:
        second.close()
    assert first is not None  # the first env object lives on: close(), not garbage collection, freed the slot


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=json_values.map(json.dumps)
    | st.text(max_size=20)
    | st.fixed_dictionaries(
        {"action": st.fixed_dictionaries({}, optional={"properties": json_values, "required": json_values})},
        optional={"observation": st.fixed_dictionaries({}, optional={"properties": json_values})},
    ).map(json.dumps)
)
def test_any_schema_answer_builds_an_env_or_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """``/schema`` answered with anything (not JSON, not an object, objects without the right parts)."""
    import httpx

    from gem_openenv.client import OpenEnvEnv

    def get(url: str, **_: object) -> httpx.Response:
        return httpx.Response(200, text=body, request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    try:
        env = OpenEnvEnv("http://127.0.0.1:9")
    except EnvServerError as exc:
        assert exc.code == "MALFORMED_REPLY" and "http://127.0.0.1:9" in str(exc)
    else:
        env.action_format.describe()  # usable: messages and examples never raise
        env.action_format.example()
        env.close()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, True, "5"], ids=repr)
@pytest.mark.parametrize("name", ["capacity_wait_s", "message_timeout_s"])
def test_waits_must_be_finite_seconds(name: str, value: object) -> None:
    """A NaN capacity wait never passes its deadline: the backoff would retry forever."""
    from gem_core.errors import ConfigError
    from gem_openenv.client import OpenEnvEnv

    with pytest.raises(ConfigError, match=name):
        OpenEnvEnv("http://127.0.0.1:9", **{name: value})  # type: ignore[arg-type]
