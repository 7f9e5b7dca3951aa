"""Dockerfile rewriting, the image map, build plans and the integrity rule: no runtime needed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gem_core.errors import ToolError
from gem_terminal.container import backend
from gem_terminal.container.images import (
    BASE_PACKAGES,
    CA_ENV,
    BaseImage,
    base_image_for,
    checker_tools_script,
    mmdebstrap_command,
    module_downloads,
    no_stand_in_note,
    qualified,
    rewrite_dockerfile,
    task_dockerfile,
)
from gem_terminal.container.session import _tool_link_targets, integrity_violations, solution_programs
from gem_terminal.loader import SkippedTask, TerminalTask, load_task


def _same(name: str) -> str:
    return name


@pytest.mark.parametrize(
    ("image", "suite"),
    [
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "trixie"),
        ("ghcr.io/laude-institute/t-bench/python-3-13", "trixie"),
        ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest", "trixie"),
        ("python:3.11-slim", "bookworm"),
        ("python:3.13-slim-bookworm", "trixie"),
        ("docker.io/library/python:3.12", "trixie"),  # 3.13 in its place: no Debian suite has 3.12
        ("python:3.8-slim-bookworm", None),  # what it pins needs its Python: no 3.13 in its place
        ("python:3.10-slim", None),
        ("python:3.13.5-slim", "trixie"),
        ("python:3-slim", "trixie"),
        ("debian:bookworm-slim", "bookworm"),
        ("debian:trixie", "trixie"),
        ("ubuntu:24.04", "trixie"),
        ("postgres:16", None),
        ("ghcr.io/someone/else:1", None),
        # Docker Hub's official images as ECR Public and Google's mirror serve them, a tag pinned by its digest.
        ("public.ecr.aws/docker/library/debian:bookworm-slim", "bookworm"),
        (f"public.ecr.aws/docker/library/debian:bookworm-slim@sha256:{'ab' * 32}", "bookworm"),
        (f"python:3.12-slim@sha256:{'0f' * 32}", "trixie"),
        ("mirror.gcr.io/library/ubuntu:24.04", "trixie"),
        ("public.ecr.aws/docker/library/golang:1.22", None),
        # Go and Rust: a stand-in only where a Debian package has the same minor version (trixie: 1.24, 1.85).
        (f"public.ecr.aws/docker/library/golang:1.24-bookworm@sha256:{'cd' * 32}", "trixie"),
        ("golang:1.24", "trixie"),
        ("golang:1.24.9-trixie", "trixie"),
        (f"public.ecr.aws/docker/library/rust:1.85-slim@sha256:{'ef' * 32}", "trixie"),
        ("docker.io/library/rust:1.85.1-slim-bookworm", "trixie"),
        ("golang:1.23-bookworm", None),
        ("golang:1.24-alpine", None),
        ("golang:latest", None),
        ("golang", None),
        ("rust:1.84-slim", None),
        ("rust:1.85-alpine3.20", None),
        ("rust:1", None),
        ("public.ecr.aws/someone/debian:12", None),
        (f"debian@sha256:{'ab' * 32}", None),  # a digest alone names no version
    ],
    ids=lambda v: str(v)[:60],
)
def test_image_map(image: str, suite: str | None) -> None:
    base = base_image_for(image)
    assert (base.suite if base else None) == suite


def test_base_image_tags_change_with_the_recipe() -> None:
    trixie, bookworm = base_image_for("debian:trixie"), base_image_for("debian:bookworm")
    assert trixie is not None and bookworm is not None
    assert trixie.tag("http://a") != bookworm.tag("http://a") != trixie.tag("http://b")
    assert trixie.tag("http://a") == base_image_for("ubuntu:24.04").tag("http://a")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("image", "package", "setup"),
    [
        pytest.param("golang:1.24-bookworm", "golang-1.24-go", "/usr/lib/go-1.24 /usr/local/go", id="golang"),
        pytest.param("rust:1.85-slim", "cargo", "/usr/local/cargo/bin", id="rust"),
    ],
)
def test_a_language_stand_in_is_trixie_with_its_toolchain(image: str, package: str, setup: str) -> None:
    base = base_image_for(image)
    plain = base_image_for("debian:trixie")
    assert base is not None and plain is not None
    assert package in base.packages and set(BASE_PACKAGES) <= set(base.packages) and setup in base.setup
    # Its own tag: the toolchain's packages and setup are in the recipe.
    assert base.rootfs_key("http://a") != plain.rootfs_key("http://a") and base.tag("http://a") != plain.tag("http://a")
    # The setup runs in the root file system mmdebstrap makes (a layer on top would store what it moves twice).
    command = mmdebstrap_command(base, "http://a", Path("/tmp/out.tar"))
    assert command[command.index(f"--include={','.join(base.packages)}") + 1].startswith("--customize-hook=chroot")
    assert setup in command[4] and "--customize-hook" not in " ".join(mmdebstrap_command(plain, "http://a", Path("x")))


@pytest.mark.parametrize(
    ("image", "note"),
    [
        pytest.param(
            f"public.ecr.aws/docker/library/golang:1.22-bookworm@sha256:{'ab' * 32}",
            "same minor version; stand-ins exist for golang:1.24 (Debian trixie's golang-1.24-go)",
            id="golang-1.22",
        ),
        pytest.param("rust:1.84-slim", "stand-ins exist for rust:1.85 (Debian trixie's rustc)", id="rust-1.84"),
        pytest.param("golang:1.24-alpine", "Alpine and Windows variants have none", id="golang-alpine"),
        pytest.param("golang:latest", "stand-ins exist for golang:1.24", id="golang-latest"),
        pytest.param("golang:1.24", "", id="golang-1.24-has-one"),
        pytest.param("postgres:16", "", id="not-a-language"),
    ],
)
def test_a_go_or_rust_image_without_a_stand_in_says_which_versions_have_one(image: str, note: str) -> None:
    found = no_stand_in_note(image)
    assert (note in found) if note else found == ""


def test_from_platform_is_dropped_and_the_image_resolved_but_stage_names_kept() -> None:
    text = "FROM --platform=linux/amd64 base:1 AS build\nRUN make\nFROM build\nCOPY --from=build /a /b\n"
    out = rewrite_dockerfile(text, lambda name: f"local/{name}")
    assert out.text.splitlines() == ["FROM local/base:1 AS build", "RUN make", "FROM build", "COPY --from=build /a /b"]
    assert out.images == ["local/base:1"]


def test_workdir_lines_and_continuations_are_kept_in_order() -> None:
    text = (
        "FROM x\nWORKDIR /a\nRUN apt-get update && \\\n    # a comment inside\n    apt-get install -y jq\nWORKDIR b\n"
    )
    out = rewrite_dockerfile(text, _same)
    assert out.text.splitlines() == ["FROM x", "WORKDIR /a", "RUN apt-get update && apt-get install -y jq", "WORKDIR b"]


@pytest.mark.parametrize(
    ("line", "rewritten"),
    [
        pytest.param("COPY a.c b.c /app", "COPY a.c b.c /app/", id="two-sources"),
        pytest.param("COPY --chown=1:1 deps/* /app", "COPY --chown=1:1 deps/* /app/", id="wildcard-of-several"),
        pytest.param("COPY one* /app/one.txt", "COPY one* /app/one.txt", id="wildcard-of-one"),
        pytest.param("ADD a.c /app/a.c", "ADD a.c /app/a.c", id="one-source"),
        pytest.param('COPY ["a.c", "b.c", "/app/"]', 'COPY ["a.c", "b.c", "/app/"]', id="exec-form"),
    ],
)
def test_a_copy_of_several_files_gets_the_folder_slash_the_classic_builder_needs(
    tmp_path: Path, line: str, rewritten: str
) -> None:
    # BuildKit copies several sources into /app; docker's classic builder and buildah refuse without the slash.
    for name in ("deps/x.c", "deps/y.c", "one.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    out = rewrite_dockerfile(f"FROM x\n{line}\n", _same, context=tmp_path)
    assert out.text.splitlines() == ["FROM x", rewritten]


@pytest.mark.parametrize(
    ("image", "resolved", "workdir"),
    [
        pytest.param(
            "ghcr.io/laude-institute/t-bench/python-3-13:20250620", "stand-in", ["WORKDIR /app"], id="t-bench-stand-in"
        ),
        pytest.param(
            "ghcr.io/laude-institute/t-bench/ubuntu-24-04", "stand-in", ["WORKDIR /app"], id="t-bench-untagged"
        ),
        pytest.param("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "itself", [], id="t-bench-pulled"),
        pytest.param("python:3.13-slim-bookworm", "stand-in", [], id="python-stand-in"),
        # docker-library/golang sets these ENV and WORKDIR; rust-lang/docker-rust its ENV and no WORKDIR.
        pytest.param(
            f"public.ecr.aws/docker/library/golang:1.24-bookworm@sha256:{'cd' * 32}",
            "stand-in",
            ["ENV GOTOOLCHAIN=local GOPATH=/go PATH=/go/bin:/usr/local/go/bin:$PATH", "WORKDIR /go"],
            id="golang-stand-in",
        ),
        pytest.param(
            "rust:1.85-slim",
            "stand-in",
            ["ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$PATH"],
            id="rust-stand-in",
        ),
        pytest.param("golang:1.24", "itself", [], id="golang-pulled"),
    ],
)
def test_a_stand_in_sets_the_workdir_its_original_image_sets(image: str, resolved: str, workdir: list[str]) -> None:
    # Terminal-Bench's base images work in /app: a task's `COPY data .` without a WORKDIR of its own lands there.
    def resolve(name: str) -> str:
        return "localhost/gem-base-trixie:0" if resolved == "stand-in" else name

    lines = rewrite_dockerfile(f"FROM {image}\nCOPY data .\n", resolve).text.splitlines()
    assert lines[1:] == [*workdir, "COPY data ."]


def test_ca_bundle_goes_into_every_stage() -> None:
    out = rewrite_dockerfile("FROM a AS one\nFROM b\n", _same, ca_bundle=b"PEM")
    assert out.files[".gem/ca.pem"] == b"PEM"
    lines = out.text.splitlines()
    assert lines.count("COPY .gem/ca.pem /etc/ssl/certs/gem-host-ca.pem") == 2
    assert all(f"{key}={value}" in out.text for key, value in CA_ENV.items())
    assert "UV_NATIVE_TLS=1" in out.text


def test_bare_run_heredoc_becomes_a_script() -> None:
    out = rewrite_dockerfile("FROM x\nRUN <<EOT\nset -e\necho hi > /f\nEOT\nRUN true\n", _same)
    script = next(v for k, v in out.files.items() if k.startswith(".gem/heredoc"))
    assert script == b"set -e\necho hi > /f\n"
    assert "RUN true" in out.text and "EOT" not in out.text


def test_run_heredoc_with_shebang_runs_its_interpreter() -> None:
    out = rewrite_dockerfile("FROM x\nRUN <<EOT\n#!/usr/bin/env python3\nprint(1)\nEOT\n", _same)
    assert "chmod +x" in out.text


def test_run_with_a_heredoc_argument_keeps_the_shell_form() -> None:
    text = "FROM x\nRUN cat <<-'EOF' > /etc/motd && echo done\n\thello $HOME\n\tEOF\n"
    out = rewrite_dockerfile(text, _same)
    script = next(v for k, v in out.files.items() if k.startswith(".gem/heredoc")).decode()
    # The shell itself reads the heredoc: quoting (no expansion) and <<- (tab stripping) are its own.
    assert script == "cat <<-'EOF' > /etc/motd && echo done\n\thello $HOME\nEOF\n"


def test_copy_heredoc_to_a_file_and_to_a_folder() -> None:
    out = rewrite_dockerfile("FROM x\nCOPY <<EOF /app/a.txt\nline1\nline2\nEOF\nCOPY <<NOTE /app/\nx\nNOTE\n", _same)
    bodies = {k: v for k, v in out.files.items() if k.startswith(".gem/heredoc")}
    assert sorted(bodies.values()) == [b"line1\nline2\n", b"x\n"]
    assert any(line.endswith(" /app/a.txt") for line in out.text.splitlines())
    assert any(line.endswith(" /app/NOTE") for line in out.text.splitlines())


@pytest.mark.parametrize(
    "text",
    ["FROM x\nRUN <<EOF\necho never closed\n", "FROM x\nCOPY <<A <<B /dst/\na\nA\nb\nB\n", "FROM --platform=x\n"],
    ids=["unclosed", "several-copy-heredocs", "from-without-image"],
)
def test_unreadable_dockerfiles_are_refused_by_name(text: str) -> None:
    with pytest.raises(ToolError, match="Dockerfile"):
        rewrite_dockerfile(text, _same)


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30), max_size=8))
def test_copy_heredoc_bodies_arrive_verbatim(lines: list[str]) -> None:
    lines = [line for line in lines if line.strip() != "END"]
    text = "FROM x\nCOPY <<END /f\n" + "\n".join(lines) + ("\n" if lines else "") + "END\n"
    out = rewrite_dockerfile(text, _same)
    body = next(v for k, v in out.files.items() if k.startswith(".gem/heredoc"))
    assert body.decode() == "\n".join(lines) + "\n"


def _harbor(tmp_path: Path, test_sh: str, user: str = "") -> TerminalTask:
    (tmp_path / "environment").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "task.toml").write_text("[verifier]\ntimeout_sec = 30.0\n")
    (tmp_path / "instruction.md").write_text("Do it.\n")
    (tmp_path / "environment" / "Dockerfile").write_text(f"FROM debian:bookworm\nWORKDIR /app\n{user}")
    (tmp_path / "tests" / "test.sh").write_text(test_sh)
    task = load_task(tmp_path, backend="container")
    assert isinstance(task, TerminalTask), task
    return task


def test_checker_tools_install_what_the_checker_installs(tmp_path: Path) -> None:
    task = _harbor(tmp_path, "apt-get install -y jq\nuvx -w pytest==8.4.1 -w requests pytest /tests -rA\n")
    script = checker_tools_script(task)
    assert script is not None
    assert "for p in jq;" in script and "--target /opt/gem/pytest pytest requests" in script
    text, context = task_dockerfile(task)
    assert text.startswith("FROM debian:bookworm") and context == tmp_path / "environment"


def test_a_checker_that_installs_nothing_adds_no_build_step(tmp_path: Path) -> None:
    assert checker_tools_script(_harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")) is None


@pytest.mark.parametrize(
    ("diff", "bad"),
    [
        (["C /app", "A /app/out.txt", "C /root", "A /root/.bash_history"], []),
        (["C /usr", "C /usr/bin", "C /usr/bin/python3"], ["C /usr/bin/python3"]),
        (["C /usr", "C /usr/local", "C /usr/local/bin", "A /usr/local/bin/mytool"], []),
        (["C /usr/local/bin", "A /usr/local/bin/pytest"], ["A /usr/local/bin/pytest"]),
        (["C /usr/local/bin", "A /usr/local/bin/python3"], ["A /usr/local/bin/python3"]),
        (["C /etc", "A /etc/ld.so.preload"], ["A /etc/ld.so.preload"]),
        (
            ["C /usr/lib/python3.13", "A /usr/lib/python3.13/sitecustomize.py"],
            ["A /usr/lib/python3.13/sitecustomize.py"],
        ),
        (
            ["C /usr/local/lib", "A /usr/local/lib/python3.13/site-packages/x.pth"],
            ["A /usr/local/lib/python3.13/site-packages/x.pth"],
        ),
        (["D /bin/sh"], ["D /bin/sh"]),
        (["C /etc", "A /etc/pip.conf"], ["A /etc/pip.conf"]),
        (["C /etc", "C /etc/hosts"], []),
        (["A /conftest.py", "A /pytest.ini"], ["A /conftest.py", "A /pytest.ini"]),
        (
            ["A /checker", "A /checker/bin", "A /checker/bin/python3"],
            ["A /checker", "A /checker/bin", "A /checker/bin/python3"],
        ),
        (["A /gem-checker-home", "A /gem-checker-home/x"], ["A /gem-checker-home", "A /gem-checker-home/x"]),
        (
            ["C /usr/share/git-core/templates/info", "C /usr/share/git-core/templates/info/exclude"],
            ["C /usr/share/git-core/templates/info/exclude"],
        ),
    ],
    ids=[
        "work-dir-and-home",
        "replaced-python",
        "new-tool-in-usr-local-bin",
        "shadowing-pytest",
        "shadowing-python3",
        "ld-preload",
        "sitecustomize",
        "pth-file",
        "deleted-shell",
        "pip-conf",
        "etc-hosts",
        "pytest-config-at-root",
        "checker-bin-before-the-probe",
        "checker-home",
        "git-templates",
    ],
)
def test_integrity_rule(diff: list[str], bad: list[str]) -> None:
    assert integrity_violations(diff, {"python3", "pytest", "bash", "sh"}) == bad


_GO_SOLUTION = "cd /app\ngo build -mod=readonly -o /usr/local/bin/variantgate ./cmd/variantgate\n"


@pytest.mark.parametrize(
    ("solution", "programs"),
    [
        pytest.param(_GO_SOLUTION + "test -x /usr/local/bin/variantgate\n", {"variantgate"}, id="go-build-o"),
        pytest.param("cargo build --release && cp target/release/tool /usr/local/bin/tool\n", {"tool"}, id="cp"),
        pytest.param("install -m 755 build/x /usr/local/sbin/x; echo done\n", {"x"}, id="install-sbin"),
        pytest.param("cat > /usr/local/bin/report <<'EOF'\n#!/bin/sh\nEOF\n", {"report"}, id="redirect"),
        pytest.param("echo hi | tee -a /usr/local/bin/hello.sh\n", {"hello.sh"}, id="tee"),
        pytest.param("/usr/local/bin/variantgate serve --listen :80 &\n", set(), id="only-runs-it"),
        pytest.param("ln -sf /opt/venv/bin/python3 /usr/local/bin/python3\n", set(), id="python-never"),
        pytest.param("cp my-pytest /usr/local/bin/pytest\n", set(), id="checker-tool-never"),
        pytest.param("cp /usr/local/bin/tool /tmp/tool.bak\n", set(), id="copied-from-not-to"),
    ],
)
def test_the_programs_a_reference_solution_writes_in_usr_local_bin(solution: str, programs: set[str]) -> None:
    assert solution_programs(solution) == programs


@pytest.mark.parametrize(
    ("diff", "bad"),
    [
        # The task's own program, rebuilt where its reference rebuilds it: the agent's work, checked as such.
        pytest.param(["C /usr/local/bin", "C /usr/local/bin/variantgate"], [], id="rebuilt-program"),
        pytest.param(["C /usr/local/bin", "D /usr/local/bin/variantgate"], [], id="removed-program"),
        # Forging moves stay refused: another program of the image, a checker tool, a file below the program.
        pytest.param(["C /usr/local/bin", "C /usr/local/bin/jq"], ["C /usr/local/bin/jq"], id="other-image-program"),
        pytest.param(["C /usr/local/bin", "A /usr/local/bin/pytest"], ["A /usr/local/bin/pytest"], id="checker-tool"),
        pytest.param(["C /usr/bin", "C /usr/bin/variantgate"], ["C /usr/bin/variantgate"], id="same-name-in-usr-bin"),
    ],
)
def test_a_program_the_reference_writes_in_usr_local_bin_may_change(diff: list[str], bad: list[str]) -> None:
    agent = solution_programs(_GO_SOLUTION + "cp x /usr/local/bin/pytest\n")
    assert agent == {"variantgate"}
    assert integrity_violations(diff, {"variantgate", "jq", "pytest", "bash"}, agent_programs=agent) == bad
    # Without it (a task whose reference does not write it), the same change refuses the checker.
    if not bad and diff[-1].startswith("C"):
        assert integrity_violations(diff, {"variantgate"}) == [diff[-1]]


@pytest.mark.parametrize(
    ("short", "full"),
    [
        ("python:3.13", "docker.io/library/python:3.13"),
        ("buildpack-deps:jammy", "docker.io/library/buildpack-deps:jammy"),
        ("someone/tool:1", "docker.io/someone/tool:1"),
        ("ghcr.io/a/b:1", "ghcr.io/a/b:1"),
        ("localhost/gem-base-trixie:x", "localhost/gem-base-trixie:x"),
        ("registry:5000/a", "registry:5000/a"),
    ],
    ids=lambda v: str(v),
)
def test_short_names_are_qualified_as_docker_reads_them(short: str, full: str) -> None:
    assert qualified(short) == full


@pytest.mark.parametrize(
    ("diff", "bad"),
    [
        (["C /opt/venv/bin/python3"], ["C /opt/venv/bin/python3"]),
        (["A /opt/venv/bin/pytest"], ["A /opt/venv/bin/pytest"]),
        (["D /opt/venv/bin/pip"], ["D /opt/venv/bin/pip"]),
        (["A /opt/tool/bin/bash"], ["A /opt/tool/bin/bash"]),
        (["A /root/.local/bin/python3.13"], ["A /root/.local/bin/python3.13"]),
        (["A /opt/venv/bin/mytool", "C /opt/tool/bin/answer"], []),
        (["A /opt/venv/lib/python3.13/site-packages/pytest"], []),
        (["A /elsewhere/python3"], []),
    ],
    ids=[
        "venv-python-replaced",
        "pytest-added",
        "pip-removed",
        "image-program-shadowed",
        "python-in-a-folder-made-later",
        "other-programs",
        "below-a-path-folder",
        "not-on-path",
    ],
)
def test_integrity_rule_on_the_image_s_path(diff: list[str], bad: list[str]) -> None:
    path = ("/opt/venv/bin", "/opt/tool/bin", "/root/.local/bin", "/usr/local/bin", "/usr/bin", "")
    assert integrity_violations(diff, {"python3", "pytest", "bash", "sh"}, path) == bad


#: ``_TOOL_LINKS``'s output in a task image whose Dockerfile linked uv's installer copy into /usr/local/bin.
TOOL_LINK_LISTING = (
    "/usr/bin/python3\tpython3.13\n"  # inside the protected paths: checked as one already
    "/usr/local/bin/uv\t/root/.local/bin/uv\n"
    "/usr/local/bin/pytest\t../../../opt/venv/bin/pytest\n"
    "no tab here\n"
)


def test_tool_links_out_of_the_protected_paths_are_read_absolute() -> None:
    assert _tool_link_targets(TOOL_LINK_LISTING) == {
        "/usr/local/bin/uv": "/root/.local/bin/uv",
        "/usr/local/bin/pytest": "/opt/venv/bin/pytest",
    }


@pytest.mark.parametrize(
    ("diff", "bad"),
    [
        (["C /root/.local/bin/uv"], ["C /root/.local/bin/uv (where /usr/local/bin/uv points)"]),
        (["D /root/.local/bin/uv"], ["D /root/.local/bin/uv (where /usr/local/bin/uv points)"]),
        (["D /root/.local"], ["D /root/.local (where /usr/local/bin/uv points)"]),
        (["A /opt/venv"], ["A /opt/venv (where /usr/local/bin/pytest points)"]),
        (["C /root/.local/bin", "A /root/.local/bin/notes.txt", "C /root"], []),
        (["C /opt/venv/bin/pytest-extra"], []),
    ],
    ids=["target-replaced", "target-removed", "way-removed", "way-added", "beside", "prefix"],
)
def test_integrity_rule_on_links_of_the_checker_s_tools(diff: list[str], bad: list[str]) -> None:
    links = _tool_link_targets(TOOL_LINK_LISTING)
    assert integrity_violations(diff, {"python3", "pytest", "bash", "sh"}, (), links) == bad


@pytest.mark.parametrize("name", ["bookworm.tar.123.partial", "trixie", "x.tar.gz.tmp"])
def test_mmdebstrap_writes_a_tar_whatever_the_output_is_named(name: str, tmp_path: Path) -> None:
    # mmdebstrap takes the format from the name unless told: `.partial` made a directory, and a fresh
    # base image (one not cached yet) could not be built.
    command = mmdebstrap_command(BaseImage("bookworm"), "http://deb.debian.org/debian", tmp_path / name)
    assert "--format=tar" in command and command[-2:] == [str(tmp_path / name), "http://deb.debian.org/debian"]


_GO_MOD = "module example.com/app\n\ngo 1.24\n"
_GO_REQUIRE = _GO_MOD + "\nrequire github.com/google/uuid v1.6.0\n"
_CARGO = '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n'


@pytest.mark.parametrize(
    ("files", "run", "hosts"),
    [
        pytest.param(
            {"go.mod": _GO_REQUIRE}, "go build -o /usr/local/bin/app .", ["proxy.golang.org"], id="go-require"
        ),
        pytest.param({"go.mod": _GO_REQUIRE}, "go mod download", ["proxy.golang.org"], id="go-mod-download"),
        pytest.param(
            {"go.mod": _GO_REQUIRE, "vendor/modules.txt": "# github.com/google/uuid v1.6.0\n"},
            "go build .",
            [],
            id="go-vendored",
        ),
        pytest.param({"go.mod": _GO_REQUIRE}, "go build -mod=vendor .", [], id="go-mod-vendor-flag"),
        pytest.param({"go.mod": _GO_MOD}, "go build .", [], id="go-std-only"),
        pytest.param({"go.mod": _GO_REQUIRE}, "echo no build", [], id="go-not-built"),
        pytest.param(
            {}, "go install golang.org/x/tools/cmd/goimports@latest", ["proxy.golang.org"], id="go-install-at"
        ),
        pytest.param(
            {"Cargo.toml": _CARGO + '[dependencies]\nserde = "1"\n'}, "cargo build", ["index.crates.io"], id="cargo-dep"
        ),
        pytest.param(
            {"Cargo.toml": _CARGO + '[dependencies.serde]\nversion = "1"\n'},
            "cargo build --release",
            ["index.crates.io"],
            id="cargo-dotted-dep",
        ),
        pytest.param(
            {"Cargo.toml": _CARGO + '[dependencies]\nlocal = { path = "local" }\n'},
            "cargo build",
            [],
            id="cargo-path-dep",
        ),
        pytest.param({"Cargo.toml": _CARGO + "[dependencies]\n"}, "cargo build", [], id="cargo-std-only"),
        pytest.param(
            {
                "Cargo.toml": _CARGO + '[dependencies]\nserde = "1"\n',
                ".cargo/config.toml": '[source.crates-io]\nreplace-with = "vendored"\n',
            },
            "cargo build",
            [],
            id="cargo-vendored",
        ),
        pytest.param(
            {"Cargo.toml": _CARGO + '[dependencies]\nserde = "1"\n'}, "cargo build --offline", [], id="offline"
        ),
        pytest.param({}, "cargo install ripgrep", ["index.crates.io"], id="cargo-install-crate"),
        pytest.param({"Cargo.toml": _CARGO}, "cargo install --path .", [], id="cargo-install-path"),
    ],
)
def test_module_downloads_of_a_build(files: dict[str, str], run: str, hosts: list[str], tmp_path: Path) -> None:
    # proxy.golang.org and crates.io are not reachable everywhere: a build that needs them is named at load.
    task = _harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    for name, text in files.items():
        (tmp_path / "environment" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "environment" / name).write_text(text)
    (tmp_path / "environment" / "Dockerfile").write_text(f"FROM golang:1.24\nCOPY . /src\nWORKDIR /src\nRUN {run}\n")
    assert [host for host, _ in module_downloads(task)] == hosts


def test_a_build_that_downloads_modules_from_a_host_that_does_not_answer_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    (tmp_path / "environment" / "go.mod").write_text(_GO_REQUIRE)
    (tmp_path / "environment" / "Dockerfile").write_text("FROM golang:1.24\nCOPY . /src\nRUN cd /src && go build .\n")
    runtime = SimpleNamespace(kind="docker")  # a stand-in covers the image: no runtime is asked
    monkeypatch.setattr(backend, "host_answers", lambda host: host != "proxy.golang.org")
    found = backend.load_for_container(tmp_path, runtime, backend.ContainerConfig())  # type: ignore[arg-type]
    assert isinstance(found, SkippedTask)
    assert "downloads from proxy.golang.org, which does not answer here: go.mod requires" in found.reason
    monkeypatch.setattr(backend, "host_answers", lambda host: True)
    assert isinstance(backend.load_for_container(tmp_path, runtime, backend.ContainerConfig()), TerminalTask)  # type: ignore[arg-type]


def test_a_go_image_without_a_stand_in_is_refused_at_load_naming_the_versions_that_have_one(tmp_path: Path) -> None:
    _harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    image = f"public.ecr.aws/docker/library/golang:1.22-bookworm@sha256:{'ab' * 32}"
    (tmp_path / "environment" / "Dockerfile").write_text(f"FROM {image}\n")
    runtime = SimpleNamespace(kind="docker", image_exists=lambda name: False, argv=("stub",))
    runtime.call = lambda *args, **kw: SimpleNamespace(returncode=1)  # no registry answers
    found = backend.load_for_container(tmp_path, runtime, backend.ContainerConfig())  # type: ignore[arg-type]
    assert isinstance(found, SkippedTask)
    assert f"FROM {image}, which is not here" in found.reason
    assert "stand-ins exist for golang:1.24 (Debian trixie's golang-1.24-go)" in found.reason


@pytest.mark.parametrize(
    ("run", "hosts"),
    [
        pytest.param(
            "RUN pip install torch==2.7.0 --index-url https://download.pytorch.org/whl/cpu",
            ["download.pytorch.org"],
            id="index-url",
        ),
        pytest.param("RUN pip3 install -i 'https://mirror.example/simple' numpy", ["mirror.example"], id="dash-i"),
        pytest.param("RUN uv pip install --extra-index-url=https://x.org/simple y", ["x.org"], id="uv-extra"),
        pytest.param("RUN pip install --index-url https://pypi.org/simple numpy", [], id="pypi-itself"),
        pytest.param("RUN pip install numpy", [], id="no-index"),
    ],
)
def test_pip_from_another_index_than_pypis_names_its_host(tmp_path: Path, run: str, hosts: list[str]) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM debian:bookworm\n{run}\n")
    task = TerminalTask(
        name="t", path=tmp_path, instruction="x", dockerfile=tmp_path / "Dockerfile", build_context=tmp_path
    )
    assert [host for host, _ in module_downloads(task)] == hosts


def test_an_image_a_copy_reads_from_is_resolved_and_checked_like_a_from_image() -> None:
    # conda-env-conflict-resolution: `COPY --from=continuumio/miniconda3:25.1.1-2 /opt/conda /opt/conda`.
    text = "FROM a AS build\nFROM b\nCOPY --from=build /x /y\nCOPY --from=other/img:1 /o /o\nCOPY --from=0 /z /z\n"
    out = rewrite_dockerfile(text, lambda name: f"local/{name}")
    assert out.images == ["local/a", "local/b", "local/other/img:1"]
    assert "COPY --from=local/other/img:1 /o /o" in out.text and "COPY --from=build /x /y" in out.text
