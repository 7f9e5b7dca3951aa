"""A worker serves one call and is never reused: whatever a call did or how it ended, the next one starts clean.

Calls end in every way a worker's state becomes unknown (timed out, killed, crashed, output
flood, a child left running, exit with an error) and leave traces behind (a file in the work
dir, a changed module, a process); each is followed by a probe call that must succeed in a
fresh worker: another uid (where calls get their own), its work dir empty, no trace in sight.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest
from gem_tool_python import SandboxPool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.errors import SandboxIsolationWarning, ToolError

LITTER = "open('left-behind', 'w').write('x')\nimport builtins\nbuiltins.gem_trace = 1\n"
ENDINGS = {
    "ok": ("print('fine')", "ok"),
    "error": ("raise ValueError('boom')", "error"),
    "exit": ("import sys; sys.exit(3)", "exit"),
    "timeout": ("while True: pass", "timeout"),
    "killed": ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", None),
    "output flood": ("print('y' * 100_000)", "output_limit"),
    "child left running": ("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent done')", "ok"),
}
PROBE = """
import builtins, json, os
print(json.dumps({"uid": os.getuid(), "files": sorted(os.listdir('.')), "trace": hasattr(builtins, 'gem_trace')}))
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        try:
            p = SandboxPool(pool_size=2, timeout_s=5.0, max_output_bytes=4096).start()
        except ToolError as exc:
            pytest.skip(f"no sandbox here: {exc}")
    yield p
    p.close()


def probe(pool: SandboxPool) -> dict[str, object]:
    result = pool.run(PROBE)
    assert result.ok, result
    seen: dict[str, object] = json.loads(result.stdout)
    return seen


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endings=st.lists(st.sampled_from(sorted(ENDINGS)), min_size=1, max_size=3))
def test_the_call_after_any_ending_runs_in_a_fresh_worker(pool: SandboxPool, endings: list[str]) -> None:
    uids = set()
    for ending in endings:
        code, status = ENDINGS[ending]
        result = pool.run(LITTER + code, timeout_s=0.5 if ending == "timeout" else None)
        assert status is None or result.status == status, (ending, result)
        assert result.status != "ok" or status == "ok"
        seen = probe(pool)
        assert seen["files"] == [] and seen["trace"] is False, (ending, seen)
        if pool.isolation != "rlimits":  # rlimits runs every call as the host user
            assert result.uid != seen["uid"] and seen["uid"] not in uids
            uids |= {result.uid, seen["uid"]}


@pytest.mark.parametrize("ending", sorted(ENDINGS), ids=lambda e: e.replace(" ", "-"))
def test_a_worker_is_never_handed_out_twice(pool: SandboxPool, ending: str) -> None:
    code, _ = ENDINGS[ending]
    first = pool.run(code, timeout_s=0.5 if ending == "timeout" else None)
    second = probe(pool)
    if pool.isolation != "rlimits":
        assert first.uid != second["uid"]
    assert second["files"] == []
