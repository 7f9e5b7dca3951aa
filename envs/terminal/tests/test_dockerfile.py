"""The Dockerfile reader: each construct a builder honours, read the way the builder reads it."""

from __future__ import annotations

import pytest

from gem_terminal.dockerfile import CopyStep, DockerfileError, RunStep, parse_dockerfile, read_image


def runs(text: str, **args: str) -> list[RunStep]:
    return [step for step in read_image(text, args).steps if isinstance(step, RunStep)]


def copies(text: str) -> list[CopyStep]:
    return [step for step in read_image(text).steps if isinstance(step, CopyStep)]


def test_from_platform_is_a_flag_not_the_image() -> None:
    image = read_image("FROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/python-3-13:20250620 AS base\n")
    assert image.base_image == "ghcr.io/laude-institute/t-bench/python-3-13:20250620"
    assert image.platform == "linux/amd64" and image.stages == 1


def test_an_arg_before_from_names_the_image_and_a_build_arg_overrides_it() -> None:
    text = "ARG TAG=3.11\nARG PLATFORM=linux/arm64\nFROM --platform=$PLATFORM python:${TAG}-slim\n"
    assert read_image(text).base_image == "python:3.11-slim" and read_image(text).platform == "linux/arm64"
    assert read_image(text, {"TAG": "3.13"}).base_image == "python:3.13-slim"


@pytest.mark.parametrize(
    ("text", "workdirs"),
    [
        pytest.param("FROM x\nRUN a\nWORKDIR /app\nRUN b\n", ["/", "/app"], id="absolute"),
        pytest.param(
            "FROM x\nWORKDIR /app\nWORKDIR src\nRUN a\nWORKDIR ../lib\nRUN b\n", ["/app/src", "/app/lib"], id="relative"
        ),
        pytest.param("FROM x\nENV ROOT=/srv\nWORKDIR $ROOT/data\nRUN a\n", ["/srv/data"], id="variable"),
        pytest.param("FROM x\nWORKDIR /a\nRUN a\nFROM y\nRUN b\n", ["/"], id="new-stage-resets"),
    ],
)
def test_workdir_applies_from_its_line_on(text: str, workdirs: list[str]) -> None:
    assert [step.workdir for step in runs(text)] == workdirs


def test_lines_before_the_files_own_workdir_run_in_the_base_images() -> None:
    text = "FROM tbench AS build\nRUN a\nCOPY x .\nFROM other\nRUN b\nFROM tbench\nRUN c\nWORKDIR src\nRUN d\n"
    known = {"tbench": "/app"}
    image = read_image(text, base_workdir=lambda name: known.get(name, ""))
    # Each stage starts in its own base's folder: the last (tbench) in /app, a relative WORKDIR from there.
    assert [(s.command, s.workdir) for s in image.steps if isinstance(s, RunStep)] == [("c", "/app"), ("d", "/app/src")]
    assert image.workdir == "/app/src"
    first = read_image(text.split("FROM other")[0], base_workdir=lambda name: known.get(name, ""))
    run, copy = first.steps
    assert isinstance(run, RunStep) and isinstance(copy, CopyStep)
    assert (run.workdir, copy.dest) == ("/app", "/app/")  # COPY x . lands in /app
    assert read_image("FROM other\nRUN b\n", base_workdir=lambda name: "").steps[0].workdir == "/"


def test_the_final_workdir_user_and_env_are_those_in_effect_at_the_end() -> None:
    image = read_image('FROM x\nWORKDIR /a\nUSER agent\nENV A=1 B="two words"\nENV C three words\nWORKDIR b\n')
    assert (image.workdir, image.user) == ("/a/b", "agent")
    assert image.env == {"A": "1", "B": "two words", "C": "three words"}


def test_each_run_sees_the_args_and_env_of_its_line() -> None:
    steps = runs("FROM x\nARG MODE=fast\nRUN a\nENV MODE=slow\nARG LATE\nRUN b\n", LATE="given")
    assert steps[0].env == {"MODE": "fast"}
    assert steps[1].env == {"MODE": "slow", "LATE": "given"}


def test_continuations_join_and_comments_inside_them_drop() -> None:
    text = "FROM x\nRUN apt-get update && \\\n    # why we install\n    apt-get install -y git \\\n\n    make\n"
    assert runs(text)[0].command.split() == ["apt-get", "update", "&&", "apt-get", "install", "-y", "git", "make"]


def test_an_escape_directive_changes_the_continuation_character() -> None:
    assert runs("# escape=`\nFROM x\nRUN echo a `\n  b\n")[0].command.split() == ["echo", "a", "b"]


def test_run_heredoc_is_the_script_and_a_heredoc_after_a_command_is_its_stdin() -> None:
    steps = runs(
        "FROM x\nRUN <<EOF\nset -e\necho one\nEOF\nRUN cat > /f <<'END'\n$HOME\nEND\nRUN <<-EOT\n\techo tab\n\tEOT\n"
    )
    assert steps[0].command == "set -e\necho one"
    assert steps[1].command == "cat > /f <<'END'\n$HOME\nEND"
    assert steps[2].command == "echo tab"


def test_a_here_string_is_no_heredoc() -> None:
    assert runs('FROM x\nRUN cat <<<"hello" > f\nRUN echo $((1<<2))\n')[0].command == 'cat <<<"hello" > f'


def test_run_exec_form_becomes_shell_words() -> None:
    assert runs('FROM x\nRUN ["/bin/sh", "-c", "echo a b > f"]\n')[0].command == "/bin/sh -c 'echo a b > f'"


def test_copy_flags_sources_and_destinations() -> None:
    (step,) = copies("FROM x\nWORKDIR /app\nCOPY --chown=1000:1000 --chmod=0755 --link a b ./dir/\n")
    assert step.sources == ("a", "b") and step.dest == "/app/dir/"
    assert (step.chown, step.chmod, step.from_stage, step.add) == ("1000:1000", "0755", "", False)
    (add,) = copies('FROM x\nADD ["with space.txt", "/opt/t.txt"]\n')
    assert add.sources == ("with space.txt",) and add.dest == "/opt/t.txt" and add.add
    (staged,) = copies("FROM a AS build\nFROM b\nCOPY --from=build /out /app/out\n")
    assert staged.from_stage == "build"


def test_copy_heredoc_writes_its_body() -> None:
    (one,) = copies("FROM x\nWORKDIR /app\nCOPY <<EOT conf.ini\n[a]\nb=1\nEOT\n")
    assert one.dest == "/app/conf.ini" and one.inline == "[a]\nb=1\n" and one.sources == ()
    two = copies("FROM x\nCOPY <<one.txt <<two.txt /etc/\nfirst\none.txt\nsecond\ntwo.txt\n")
    assert [(c.dest, c.inline) for c in two] == [("/etc/one.txt", "first\n"), ("/etc/two.txt", "second\n")]


def test_other_instructions_are_kept_as_read() -> None:
    image = read_image('FROM x\nVOLUME /data\nEXPOSE 80\nCMD ["bash"]\nHEALTHCHECK CMD true\n')
    assert [i.keyword for i in image.others] == ["VOLUME", "EXPOSE", "CMD", "HEALTHCHECK"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no FROM line", id="empty"),
        pytest.param("RUN x\n", "RUN before the first FROM", id="run-first"),
        pytest.param("FROM x\nRUN <<EOF\nnever closed\n", "never ends", id="open-heredoc"),
        pytest.param("FROM x\nENV A='open\n", "cannot split", id="quotes"),
        pytest.param("FROM x\nCOPY only\n", "needs a source and a destination", id="copy-one-word"),
        pytest.param("FROM x\nWORKDIR a b\n", "WORKDIR takes one path", id="workdir-two"),
        pytest.param("FROM\n", "FROM names no image", id="from-nothing"),
    ],
)
def test_what_a_builder_would_reject_raises_a_named_error(text: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message):
        read_image(text)


def test_parse_keeps_line_numbers_and_upper_cases_keywords() -> None:
    parsed = parse_dockerfile("\n# c\nfrom x\n\nrun a \\\n  b\n")
    assert [(i.keyword, i.rest, i.line) for i in parsed] == [("FROM", "x", 3), ("RUN", "a b", 5)]
