from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from gem_core.cli import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, EXIT_PLUGIN_ERROR, main
from gem_core.testing import NumberGuessEnv


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
    assert code == EXIT_OK and "3 ok, 0 failed" in out


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


def test_plugin_error_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gem_core import plugins
    from gem_core.errors import PluginLoadError

    def broken(*args: object, **kwargs: object) -> None:
        raise PluginLoadError("cannot load plugin 'x' from gem-x 1.0")

    monkeypatch.setattr(plugins, "build_registry", broken)
    assert run("list")[0] == EXIT_PLUGIN_ERROR
    assert "GEM_CORE_SKIP_BROKEN_PLUGINS" in capsys.readouterr().err


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
