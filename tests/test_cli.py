from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.cli import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PLUGIN_ERROR,
    Command,
    main,
)
from gem_core.registry import EnvSpec, PluginManifest
from gem_core.testing import NumberGuessEnv

if TYPE_CHECKING:
    from tests.conftest import Fakes

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out, stdin=io.StringIO(stdin))
    return code, out.getvalue()


def test_list() -> None:
    code, out = run("list")
    assert code == EXIT_OK
    assert "core:NumberGuess-v0" in out and "gem-core" in out


@pytest.mark.parametrize(
    ("args", "present", "absent"),
    [
        (("--namespace", "core"), "core:NumberGuess-v0", None),
        (("--tag", "reference"), "core:NumberGuess-v0-hard", None),
        (("--namespace", "nothing"), "no envs match namespace='nothing'", "core:"),
    ],
    ids=["namespace", "tag", "no-match"],
)
def test_list_filters(args: tuple[str, ...], present: str, absent: str | None) -> None:
    code, out = run("list", *args)
    assert code == EXIT_OK and present in out
    assert absent is None or absent not in out


def test_list_json() -> None:
    _, out = run("list", "--json")
    rows = json.loads(out)
    by_id = {row["id"]: row for row in rows}
    assert by_id["core:NumberGuess-v0-hard"]["distribution"] == "gem-core"


def test_info() -> None:
    code, out = run("info", "core:NumberGuess-v0-hard")
    assert code == EXIT_OK
    assert "gem_core.testing:NumberGuessEnv" in out and '"high": 100' in out


def test_info_unknown_id_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("info", "core:NumberGues-v0")
    assert code == EXIT_BAD_INPUT
    assert "Did you mean 'core:NumberGuess-v0'" in capsys.readouterr().err


def test_plugins() -> None:
    code, out = run("plugins")
    assert code == EXIT_OK
    assert "gem_core.builtin" in out and "envs: core:NumberGuess-v0" in out
    code, out = run("plugins", "--json")
    assert json.loads(out)[0]["registered"]["envs"][0] == "core:NumberGuess-v0"


def test_play_solves_with_typed_actions() -> None:
    env = NumberGuessEnv()
    env.reset(seed=11)
    code, out = run("play", "core:NumberGuess-v0", "--seed", "11", stdin=f"hmm\n{env.target}\n")
    assert code == EXIT_OK
    assert "(format error)" in out
    assert f"Correct, it was {env.target}!" in out
    assert "*** done: solved. return 0.9 in 2 turns ***" in out


def test_play_quit_and_eof() -> None:
    assert "bye" in run("play", "core:NumberGuess-v0", stdin="/quit\n")[1]
    assert "bye" in run("play", "core:NumberGuess-v0", stdin="")[1]


def test_play_with_overrides_and_bad_override(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("play", "core:NumberGuess-v0", "--kw", "high=1000", stdin="")
    assert code == EXIT_OK and "between 1 and 1000" in out
    code, _ = run("play", "core:NumberGuess-v0", "--kw", "high=lots", stdin="")
    assert code == EXIT_BAD_INPUT
    assert "high: Input should be a valid integer" in capsys.readouterr().err
    code, _ = run("play", "core:NumberGuess-v0", "--kw", "novalue", stdin="")
    assert code == EXIT_BAD_INPUT


def test_check_ok_and_all() -> None:
    assert run("check", "core:NumberGuess-v0") == (EXIT_OK, "ok    core:NumberGuess-v0\n")
    code, out = run("check", "--all", "--namespace", "core")
    # the NumberGuess ids, the picture NumberGuess, and the multi-agent Nim and RPS
    assert code == EXIT_OK and "6 ok, 0 failed" in out


def test_check_failure_exit_code() -> None:
    import gem_core

    gem_core.register("bad:Global-v0", "tests.test_testing:GlobalRandomEnv")
    code, out = run("check", "bad:Global-v0")
    assert code == EXIT_CHECK_FAILED
    assert "FAIL  bad:Global-v0" in out and "global `random` state" in out


def test_bad_usage_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("frobnicate")[0] == EXIT_BAD_INPUT
    assert run("check")[0] == EXIT_BAD_INPUT
    assert run("--help")[0] == EXIT_OK


def test_console_script_entry() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gem_core.cli", "list", "-n", "core"], capture_output=True, text=True, check=True
    )
    assert "core:NumberGuess-v0" in proc.stdout


class PlayableEnv(NumberGuessEnv):
    """An env that asks `gem play` for a people-friendly setting."""

    metadata = {"multi_turn": True, "play_kwargs": {"high": 3}}


def test_play_applies_play_kwargs_unless_model_format() -> None:
    import gem_core

    gem_core.register("cli:Playable-v0", PlayableEnv)
    assert "between 1 and 3" in run("play", "cli:Playable-v0", stdin="")[1]
    assert "between 1 and 9" in run("play", "cli:Playable-v0", "--kw", "high=9", stdin="")[1]
    assert "between 1 and 16" in run("play", "cli:Playable-v0", "--model-format", stdin="")[1]


def test_broken_pipe_is_not_an_error() -> None:
    proc = subprocess.run(
        f"{sys.executable} -m gem_core.cli list | head -1", shell=True, capture_output=True, text=True, check=True
    )
    assert proc.stdout.startswith("ID") and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- exit codes and plugin trouble

REF = "gem_core.testing:NumberGuessEnv"


class RaisingEnv(NumberGuessEnv):
    """Raises from the constructor (boom=True) or from step (explode=True), as a buggy env would."""

    config_model = None

    def __init__(self, boom: bool = False, explode: bool = False) -> None:
        if boom:
            raise ValueError("boom in __init__")
        super().__init__()
        self.explode = explode

    def step(self, action: str):  # type: ignore[no-untyped-def]
        if self.explode:
            raise ZeroDivisionError("explode in step")
        return super().step(action)


class BadCloseEnv(NumberGuessEnv):
    config_model = None

    def close(self) -> None:
        raise OSError("close boom")


def setup_plugins(
    fakes: Fakes, *, broken: bool = False, duplicate: bool = False, intruder: bool = False, strict: bool = False
) -> None:
    """A good plugin that owns namespace 'fake', plus the trouble asked for."""

    def manifest() -> PluginManifest:
        return PluginManifest(api_version=1, namespaces=("fake",))

    fakes.module(
        "fake_good",
        plugin_manifest=manifest,
        register_envs=lambda: [
            EnvSpec(id="fake:Maze-v0", entry_point=REF),
            EnvSpec(id="free:Both-v0", entry_point=REF),
        ],
    )
    eps = [fakes.ep("good", "fake_good", "gem-good", "1.0")]
    if broken:
        eps.append(fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9"))
    if duplicate:
        fakes.module("fake_dup", register_envs=lambda: [EnvSpec(id="free:Both-v0", entry_point=REF)])
        eps.append(fakes.ep("dup", "fake_dup", "gem-dup", "2.0"))
    if intruder:
        fakes.module("fake_intruder", register_envs=lambda: [EnvSpec(id="fake:Other-v0", entry_point=REF)])
        eps.append(fakes.ep("intruder", "fake_intruder", "gem-intruder", "0.1"))
    if strict:
        fakes.monkeypatch.setenv("GEM_CORE_STRICT_PLUGINS", "1")
    fakes.install(*eps)


def register_raising() -> None:
    import gem_core

    gem_core.register("cli:Raises-v0", RaisingEnv)
    gem_core.register("cli:Missing-v0", "gem_no_such_module_xyz.envs:Env")
    gem_core.register("cli:Dict-v0", dict)  # an entry point that builds no env
    gem_core.register("cli:BadClose-v0", BadCloseEnv)


EXIT_CASES = [
    # (id, plugin trouble, argv, exit code, text in stdout+stderr)
    ("ok", {}, ["list"], EXIT_OK, "core:NumberGuess-v0"),
    ("check-fails", {}, ["check", "bad:Global-v0"], EXIT_CHECK_FAILED, "global `random` state"),
    ("check-ctor-raises", {}, ["check", "cli:Raises-v0", "--kw", "boom=true"], EXIT_CHECK_FAILED, "boom in __init__"),
    ("play-ctor-raises", {}, ["play", "cli:Raises-v0", "--kw", "boom=true"], EXIT_CHECK_FAILED, "boom in __init__"),
    ("play-step-raises", {}, ["play", "cli:Raises-v0", "--kw", "explode=true"], EXIT_CHECK_FAILED, "in step()"),
    ("unknown-id-check", {}, ["check", "core:Nope-v0"], EXIT_BAD_INPUT, "no env registered"),
    ("unknown-id-info", {}, ["info", "core:Nope-v0"], EXIT_BAD_INPUT, "no env registered"),
    ("unknown-id-play", {}, ["play", "core:Nope-v0"], EXIT_BAD_INPUT, "no env registered"),
    ("empty-namespace", {}, ["check", "--all", "-n", "nothing"], EXIT_BAD_INPUT, "no env ids in namespace"),
    ("id-and-all", {}, ["check", "core:NumberGuess-v0", "--all"], EXIT_BAD_INPUT, "not both"),
    ("bad-option", {}, ["list", "--frobnicate"], EXIT_BAD_INPUT, ""),
    ("bad-kw", {}, ["play", "core:NumberGuess-v0", "--kw", "high=lots"], EXIT_BAD_INPUT, "valid integer"),
    ("bad-kw-check", {}, ["check", "core:NumberGuess-v0", "--kw", "high=lots"], EXIT_BAD_INPUT, "valid integer"),
    # a broken plugin is left out: list works (exit 0) and says what did not load
    ("broken-list", {"broken": True}, ["list"], EXIT_OK, "'fake_missing_module_xyz', which does not exist"),
    ("broken-list-strict", {"broken": True, "strict": True}, ["list"], EXIT_PLUGIN_ERROR, "fake_missing_module_xyz"),
    ("broken-plugins", {"broken": True}, ["plugins"], EXIT_PLUGIN_ERROR, "broken  [gem-broken 9.9]  broken"),
    ("broken-check-all", {"broken": True}, ["check", "--all"], EXIT_PLUGIN_ERROR, "gem-broken 9.9"),
    ("duplicate-list", {"duplicate": True}, ["list"], EXIT_OK, "gem keeps 'dup'"),
    ("duplicate-plugins", {"duplicate": True}, ["plugins"], EXIT_PLUGIN_ERROR, "again by plugin 'good'"),
    ("duplicate-check", {"duplicate": True}, ["check", "free:Both-v0"], EXIT_OK, "ok    free:Both-v0"),
    ("intruder-list", {"intruder": True}, ["list"], EXIT_OK, "which gem-good owns"),
    ("intruder-check-ns", {"intruder": True}, ["check", "--all", "-n", "fake"], EXIT_OK, "ok    fake:Maze-v0"),
    ("missing-ep-play", {}, ["play", "cli:Missing-v0"], EXIT_PLUGIN_ERROR, "gem_no_such_module_xyz"),
    ("not-an-env-play", {}, ["play", "cli:Dict-v0"], EXIT_PLUGIN_ERROR, "returned dict, not an env"),
    ("not-an-env-check", {}, ["check", "cli:Dict-v0"], EXIT_PLUGIN_ERROR, "returned dict, not an env"),
    ("close-raises-play", {}, ["play", "cli:BadClose-v0"], EXIT_CHECK_FAILED, "raised in close(): OSError"),
    ("missing-ep-check", {}, ["check", "cli:Missing-v0"], EXIT_PLUGIN_ERROR, "gem_no_such_module_xyz"),
]


@pytest.mark.parametrize(
    ("trouble", "argv", "code", "text"), [c[1:] for c in EXIT_CASES], ids=[c[0] for c in EXIT_CASES]
)
def test_exit_codes(
    fakes: Fakes,
    capsys: pytest.CaptureFixture[str],
    trouble: dict[str, bool],
    argv: list[str],
    code: int,
    text: str,
) -> None:
    import gem_core

    setup_plugins(fakes, **trouble)
    if not trouble:
        gem_core.register("bad:Global-v0", "tests.test_testing:GlobalRandomEnv")
        register_raising()
    got, out = run(*argv, stdin="3\n")
    err = capsys.readouterr().err
    assert got == code, out + err
    assert text in out + err
    assert "Traceback" not in out + err


def test_interrupt_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: object, streams: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "list", Command("list", "list", lambda p: None, interrupted))
    assert run("list")[0] == EXIT_INTERRUPTED


def test_docs_list_the_exit_codes_the_cli_uses() -> None:
    """docs/cli.md exit-code table and the CLI's constants are the same set."""
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("## Exit codes") :]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert documented == {EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_PLUGIN_ERROR, EXIT_INTERRUPTED}
    cases = {c[3] for c in EXIT_CASES} | {EXIT_INTERRUPTED}
    assert cases == documented  # every code has a test above


def test_plugins_lists_broken_plugins_with_the_others(fakes: Fakes) -> None:
    setup_plugins(fakes, broken=True)
    code, out = run("plugins")
    assert code == EXIT_PLUGIN_ERROR
    assert "good  [gem-good 1.0]  loaded" in out and "owns namespaces: fake" in out
    assert "broken  [gem-broken 9.9]  broken" in out and "error: cannot load plugin 'broken'" in out
    assert "fake:Maze-v0" in out
    code, out = run("plugins", "--json")
    assert {p["name"]: p["status"] for p in json.loads(out)}["broken"] == "broken"


def test_check_id_is_not_failed_by_another_distribution(fakes: Fakes, capsys: pytest.CaptureFixture[str]) -> None:
    setup_plugins(fakes, broken=True)
    assert run("check", "fake:Maze-v0") == (EXIT_OK, "ok    fake:Maze-v0\n")
    assert run("check", "--all", "-n", "fake")[0] == EXIT_OK
    assert run("info", "fake:Maze-v0")[0] == EXIT_OK
    assert "plugins with problems, not needed here: plugin 'broken' from gem-broken 9.9" in capsys.readouterr().err
    # an id in the namespace a broken plugin is named for: that plugin's error (exit 3)
    assert run("check", "broken:Thing-v0")[0] == EXIT_PLUGIN_ERROR
    assert "'fake_missing_module_xyz', which does not exist" in capsys.readouterr().err
    # any other unknown id: exit 2, and the message names the plugins that did not load
    assert run("info", "other:Thing-v0")[0] == EXIT_BAD_INPUT
    assert "failed to load and may provide it: plugin 'broken' from gem-broken 9.9" in capsys.readouterr().err


def test_list_reports_what_did_not_load(fakes: Fakes, capsys: pytest.CaptureFixture[str]) -> None:
    setup_plugins(fakes, broken=True, intruder=True)
    code, out = run("list", "--json")
    err = capsys.readouterr().err
    assert code == EXIT_OK
    assert {r["id"]: r["version"] for r in json.loads(out)}["fake:Maze-v0"] == "1.0"
    assert "2 plugin problem(s); everything else works" in err
    assert "gem-broken 9.9" in err and "gem-intruder 0.1" in err and "Traceback" not in err


def test_info_shows_the_version(fakes: Fakes) -> None:
    setup_plugins(fakes)
    code, out = run("info", "fake:Maze-v0")
    assert code == EXIT_OK and re.search(r"^distribution\s+gem-good 1\.0$", out, flags=re.M)


def test_every_command_is_documented() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"`gem {name}" in text, f"gem {name} is missing from docs/cli.md"


# ---------------------------------------------------------------- gem play on envs that break the contract

_VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=6).map(tuple),
    st.tuples(
        st.text(max_size=3),
        st.one_of(st.none(), st.text(max_size=3), st.floats()),
        st.booleans(),
        st.booleans(),
        st.just({}),
    ),
    st.tuples(st.integers(), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
)


class ReturnsWhatItIsTold(NumberGuessEnv):
    """reset or step returns a given value instead of the contract's tuple."""

    config_model = None
    reset_value: object = None
    step_value: object = None

    def __init__(self, phase: str = "step") -> None:
        super().__init__()
        self.phase = phase

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        real = super().reset(seed=seed, options=options)
        return type(self).reset_value if self.phase == "reset" else real

    def step(self, action: str):  # type: ignore[no-untyped-def]
        return type(self).step_value


def _is_valid(value: object, phase: str) -> bool:
    from gem_core.testing import _check_reset_return, _check_step_return

    try:
        _check_reset_return(value) if phase == "reset" else _check_step_return(value, "3")
    except Exception:
        return False
    return True


@settings(max_examples=40, deadline=None)
@given(value=_VALUES, phase=st.sampled_from(["reset", "step"]))
def test_play_reports_a_wrong_return_as_a_typed_error(value: object, phase: str) -> None:
    """Whatever reset or step returns, gem play answers with the contract it broke (exit 1), never a traceback."""
    import contextlib

    import gem_core

    hypothesis.assume(not _is_valid(value, phase))
    setattr(ReturnsWhatItIsTold, f"{phase}_value", value)
    gem_core.register("cli:Returns-v0", ReturnsWhatItIsTold, override=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["play", "cli:Returns-v0", "--kw", f"phase={phase}"],
            stdout=io.StringIO(),
            stdin=io.StringIO("3\n"),
            stderr=err,
        )
    assert code == EXIT_CHECK_FAILED
    assert f"broke the Env contract: {phase}(" in err.getvalue() and "Traceback" not in err.getvalue()


# ---------------------------------------------------------------- gem eval: configuration errors exit 2, up front


def test_eval_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.eval.test_backends import ScriptedServer

    server = ScriptedServer([])
    try:
        base = ["eval", "m", "core:NumberGuess-v0", "--base-url", server.url, "-n", "2", "--no-progress"]
        cases = [
            (["--kw", "max_turns=abc"], EXIT_BAD_INPUT, "max_turns"),
            (["--wrapper", 'tools:{"tools": ["ecoh"]}'], EXIT_BAD_INPUT, "Did you mean 'echo'"),
            (["--kw", "nonsense=1"], EXIT_BAD_INPUT, "nonsense"),
        ]
        for extra, code, text in cases:
            got = run(*base, *extra)[0]
            err = capsys.readouterr().err
            assert (got, text in err) == (code, True), err
            assert len(server.requests) == 0  # nothing was sent: it failed before any episode
        down = base[:]
        down[4] = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
        assert run(*down)[0] == EXIT_BAD_INPUT
        assert "nothing answers at --base-url http://127.0.0.1:9/v1" in capsys.readouterr().err
    finally:
        server.close()


def test_eval_exits_1_when_every_episode_failed_for_one_cause(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.eval.test_backends import ScriptedServer

    server = ScriptedServer([(400, {"error": "no such model"}, {})] * 4)
    try:
        argv = ["eval", "m", "core:NumberGuess-v0", "--base-url", server.url, "-n", "2", "--no-progress"]
        assert run(*argv)[0] == EXIT_CHECK_FAILED
        assert "every episode failed; the most common cause: EvalBackendError" in capsys.readouterr().err
    finally:
        server.close()
