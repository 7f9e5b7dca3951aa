"""Task images: the task's own Dockerfile, built as its owner wrote it, with base images made from Debian.

Where no image registry is reachable, the base images that Terminal-Bench tasks name are built here
from Debian's packages (``mmdebstrap --variant=minbase``) and the ``FROM`` line is pointed at them
through :data:`IMAGE_MAP`. Every image is tagged by a hash of its recipe, so the second build of the same
task (or base) costs one ``image inspect``.

What the builders here cannot read is rewritten into what they can: heredocs (``RUN <<EOF``,
``COPY <<EOF dest``; Podman 4.3/Buildah 1.28 and Docker 20.10 do not parse them) become files in the
build context; ``FROM --platform=...`` drops the platform (the host's architecture is built).
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gem_core.errors import ToolError
from gem_terminal.container.runtime import Runtime, state_dir
from gem_terminal.loader import BASE_WORKDIRS, TerminalTask

__all__ = [
    "BASE_PACKAGES",
    "CHECKER_TOOLS_DIR",
    "HUB_MIRRORS",
    "IMAGE_MAP",
    "LANGUAGE_STAND_INS",
    "STAND_IN_WORKDIRS",
    "BaseImage",
    "base_image_for",
    "build_task_image",
    "checker_tools_script",
    "ensure_base_image",
    "hub_name",
    "language_stand_in",
    "mmdebstrap_command",
    "module_downloads",
    "no_stand_in_note",
    "rewrite_dockerfile",
    "task_dockerfile",
    "unresolvable_images",
]

#: What every locally built base image has: a shell, Python with venv, pip and its C headers (``python``
#: too; the official Python images, Terminal-Bench's among them, ship ``Python.h``: a test building a C
#: extension needs it), tmux (Terminal-Bench drives agents through it), git, curl, ps, and the CA store.
BASE_PACKAGES = (
    "ca-certificates",
    "python3",
    "python3-dev",
    "python3-venv",
    "python3-pip",
    "python-is-python3",
    "tmux",
    "git",
    "curl",
    "procps",
)

#: ``FROM`` image (a regular expression over the whole name) -> the Debian suite its stand-in is built
#: from. First match wins. Python 3.13 only comes with trixie (3.12 runs there too), 3.11 with bookworm;
#: a Python image of 3.10 or older has no stand-in (what it pins needs that Python). Ubuntu's mirror is not used
#: (trixie is the nearest Debian to Ubuntu 24.04's toolchain). A name that matches none is pulled.
IMAGE_MAP: tuple[tuple[str, str], ...] = (
    (r"ghcr\.io/laude-institute/t-bench/python-3-13(:[\w.-]+)?", "trixie"),
    (r"ghcr\.io/laude-institute/t-bench/ubuntu-24-04(:[\w.-]+)?", "trixie"),
    (r"(docker\.io/)?(library/)?python:3\.11([\w.-]*)", "bookworm"),
    # 3.12 and 3.13 (3.12's tasks ran on 3.13: purple29th's 10 of 10); not 3.10 and older, whose pinned
    # wheels have no 3.13 build (a python:3.8 image's pandas 1.3 did not build).
    (r"(docker\.io/)?(library/)?python:3(\.1[23](\.\d+)?)?(-[\w.-]+)?", "trixie"),
    (r"(docker\.io/)?(library/)?debian:(bookworm|12)([\w.-]*)", "bookworm"),
    (r"(docker\.io/)?(library/)?debian(:[\w.-]+)?", "trixie"),
    (r"(docker\.io/)?(library/)?ubuntu(:[\w.-]+)?", "trixie"),
)
#: ``FROM`` image (a regular expression over the whole name) -> the ``WORKDIR`` the original image sets,
#: which its stand-in gets after the ``FROM`` line (the loader reads set-up lines by the same table).
STAND_IN_WORKDIRS: tuple[tuple[str, str], ...] = BASE_WORKDIRS


@dataclass(frozen=True)
class LanguageStandIn:
    """A language's official image (``golang:1.24``) and the Debian packages of its minor version that stand in.

    Attributes:
        image: The official image's name on Docker Hub (``golang``).
        version: Its ``major.minor`` (tags ``1.24``, ``1.24.9``, ``1.24-bookworm``, ``1.24.9-slim`` name it).
        suite: The Debian suite whose package has that minor version.
        packages: What the stand-in adds to :data:`BASE_PACKAGES`.
        setup: A shell command run as root in the root file system (mmdebstrap's customize hook): the paths
            the official image has.
        env: The ``ENV`` the official image sets, added after the ``FROM`` line.
        workdir: The ``WORKDIR`` the official image sets (``None``: none, ``/``).
    """

    image: str
    version: str
    suite: str
    packages: tuple[str, ...]
    setup: str
    env: tuple[tuple[str, str], ...]
    workdir: str | None = None


#: The official Go and Rust images that have a stand-in: only where a Debian suite's package has the same
#: minor version (checked against the mirror's Packages index: trixie's golang-1.24-go is 1.24.4, its rustc
#: and cargo 1.85.1). The ENV and WORKDIR are those of docker-library/golang and rust-lang/docker-rust; the
#: setup puts the toolchain where those images have it. No module proxy comes with them: ``go mod download``
#: and ``cargo fetch`` need proxy.golang.org and crates.io (:func:`module_downloads`).
LANGUAGE_STAND_INS: tuple[LanguageStandIn, ...] = (
    LanguageStandIn(
        image="golang",
        version="1.24",
        suite="trixie",
        # The official image's cgo tools (g++ gcc libc6-dev make pkg-config) come with it.
        packages=("golang-1.24-go", "g++", "gcc", "libc6-dev", "make", "pkgconf"),
        # GOROOT is /usr/local/go itself, not links into Debian's /usr/lib and /usr/share: a multi-stage build
        # copies it (`COPY --from=builder /usr/local/go /usr/local/go`), and a copied link would dangle.
        setup=(
            "cp -rL --preserve=mode,timestamps /usr/lib/go-1.24 /usr/local/go"
            " && rm -rf /usr/lib/go-1.24 /usr/share/go-1.24 && ln -s /usr/local/go /usr/lib/go-1.24"
            " && mkdir -p /go/src /go/bin && chmod -R 1777 /go"
        ),
        env=(("GOTOOLCHAIN", "local"), ("GOPATH", "/go"), ("PATH", "/go/bin:/usr/local/go/bin:$PATH")),
        workdir="/go",
    ),
    LanguageStandIn(
        image="rust",
        version="1.85",
        suite="trixie",
        packages=("rustc", "cargo", "gcc", "libc6-dev"),
        # Debian's cargo and rustc in CARGO_HOME/bin, as rustup leaves them there (rustup itself is not there).
        setup=(
            "mkdir -p /usr/local/cargo/bin /usr/local/rustup"
            " && ln -s /usr/bin/cargo /usr/bin/rustc /usr/bin/rustdoc /usr/local/cargo/bin/"
            " && chmod -R a+w /usr/local/cargo /usr/local/rustup"
        ),
        env=(
            ("RUSTUP_HOME", "/usr/local/rustup"),
            ("CARGO_HOME", "/usr/local/cargo"),
            ("PATH", "/usr/local/cargo/bin:$PATH"),
        ),
    ),
)
#: A language image's name and tag as :func:`language_stand_in` reads them; Alpine and Windows variants are
#: other systems (no apt, no glibc), which a Debian stand-in does not imitate.
_LANGUAGE_IMAGE = re.compile(
    r"(docker\.io/)?(library/)?(?P<image>golang|rust)"
    r"(:(?P<version>\d+\.\d+)(\.\d+)?(?P<variant>-[\w.-]+)?|:(?P<other>[\w.-]+))?"
)
#: Registries that serve Docker Hub's official images under a name of their own (``FROM`` lines of Terminal-Bench
#: 2.1 tasks name ECR Public's copy): the image map reads such a name as Docker Hub's (:func:`hub_name`).
HUB_MIRRORS = ("public.ecr.aws/docker/library/", "mirror.gcr.io/library/")
#: How the base images built here are tagged (then the suite and a hash of the recipe).
_BASE_PREFIX = "localhost/gem-base-"
#: Debian's mirror for base images (``$GEM_DEBIAN_MIRROR``).
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: Environment of images built with ``ca_bundle``: every client reads the host's bundle.
_CA_PATH = "/etc/ssl/certs/gem-host-ca.pem"
CA_ENV = {
    "SSL_CERT_FILE": _CA_PATH,
    "REQUESTS_CA_BUNDLE": _CA_PATH,
    "PIP_CERT": _CA_PATH,
    "CURL_CA_BUNDLE": _CA_PATH,
    "GIT_SSL_CAINFO": _CA_PATH,
    "NODE_EXTRA_CA_CERTS": _CA_PATH,
    "UV_NATIVE_TLS": "1",
}
_RECIPE_VERSION = "2"
#: Files added to the root file system: git commits in set-up lines need an identity (the sandbox's).
BASE_FILES = {"etc/gitconfig": b"[user]\n\tname = agent\n\temail = agent@sandbox\n"}


#: uv in every base image (the version Terminal-Bench's run-tests.sh installs).
BASE_UV = "uv==0.7.13"
#: What uv's official installer (``curl -LsSf https://astral.sh/uv/.../install.sh | sh``) leaves for root, in
#: every base image: a task's Dockerfile that runs it and then links, calls or sources what it installed
#: (``ln -s /root/.local/bin/uv /usr/local/bin/uv``, ``. $HOME/.local/bin/env``) builds where the installer's
#: host is not reachable. The installer's ``env`` file puts its folder first on ``PATH`` once.
UV_INSTALLER_ENV = (
    b"#!/bin/sh\n"
    b"# What uv's installer writes: its folder first on PATH, unless PATH has it already.\n"
    b'case ":$PATH:" in\n'
    b'  *":$HOME/.local/bin:"*) ;;\n'
    b'  *) export PATH="$HOME/.local/bin:$PATH" ;;\n'
    b"esac\n"
)
#: The uv layer's steps after its pip install: the images Terminal-Bench names have no uv in /usr/local/bin
#: (a Dockerfile may link the installer's uv there), so gem's uv moves to /usr/bin; root's
#: ``~/.local/bin`` gets uv, uvx and the ``env`` file as the installer would leave them.
UV_LAYOUT = (
    "mv /usr/local/bin/uv /usr/local/bin/uvx /usr/bin/ && mkdir -p /root/.local/bin"
    " && ln -s /usr/bin/uv /root/.local/bin/uv && ln -s /usr/bin/uvx /root/.local/bin/uvx"
)
#: What the base images' configuration sets (``podman import --change``).
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # Debian's Python refuses `pip install` outside a venv (PEP 668); Terminal-Bench tasks do that.
    "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)


@dataclass(frozen=True)
class BaseImage:
    """A base image built here from Debian's packages.

    Attributes:
        suite: The Debian suite.
        packages: The packages mmdebstrap installs.
        setup: A shell command run as root in the root file system once mmdebstrap has installed the
            packages (a language stand-in's paths); empty: none.
    """

    suite: str
    packages: tuple[str, ...] = BASE_PACKAGES
    setup: str = ""

    def rootfs_key(self, mirror: str) -> str:
        """A hash of what mmdebstrap makes (the root file system, cached as a tar)."""
        added = [f"{name}:{hashlib.sha256(data).hexdigest()}" for name, data in sorted(BASE_FILES.items())]
        recipe = "\n".join([_RECIPE_VERSION, self.suite, mirror, *self.packages, *added, self.setup])
        return hashlib.sha256(recipe.encode()).hexdigest()[:16]

    def tag(self, mirror: str) -> str:
        """The image's tag: the suite and a hash of the whole recipe."""
        uv_env = hashlib.sha256(UV_INSTALLER_ENV).hexdigest()
        recipe = "\n".join([self.rootfs_key(mirror), *BASE_CHANGES, BASE_UV, UV_LAYOUT, uv_env])
        return f"{_BASE_PREFIX}{self.suite}:{hashlib.sha256(recipe.encode()).hexdigest()[:16]}"


def hub_name(image: str) -> str:
    """The name the image map reads ``image`` by: a Docker Hub mirror's prefix and a tag's digest dropped.

    ``public.ecr.aws/docker/library/debian:bookworm-slim@sha256:...`` is ``docker.io/library/debian:bookworm-slim``:
    ECR Public and Google's mirror serve Docker Hub's official images under their own names, and a digest after
    a tag pins one build of that tag, whose stand-in is the tag's. A digest without a tag names no version, so
    it is kept (and matches no stand-in).
    """
    name = re.sub(r"(:[\w.-]+)@sha256:[0-9a-f]{64}", r"\1", image)
    for mirror in HUB_MIRRORS:
        if name.startswith(mirror):
            return "docker.io/library/" + name[len(mirror) :]
    return name


def language_stand_in(image: str) -> LanguageStandIn | None:
    """The entry of :data:`LANGUAGE_STAND_INS` for ``image`` (a Go or Rust image of the same minor version)."""
    found = _LANGUAGE_IMAGE.fullmatch(hub_name(image))
    if found is None or found.group("version") is None:
        return None
    variant = found.group("variant") or ""
    if re.search(r"alpine|windows|nanoserver", variant):
        return None
    for entry in LANGUAGE_STAND_INS:
        if (entry.image, entry.version) == (found.group("image"), found.group("version")):
            return entry
    return None


def no_stand_in_note(image: str) -> str:
    """Why a Go or Rust image has no stand-in and which versions have one (empty for other images)."""
    found = _LANGUAGE_IMAGE.fullmatch(hub_name(image))
    if found is None or language_stand_in(image) is not None:
        return ""
    name = found.group("image")
    have = ", ".join(
        f"{e.image}:{e.version} (Debian {e.suite}'s {e.packages[0]})" for e in LANGUAGE_STAND_INS if e.image == name
    )
    variant = found.group("variant") or ""
    why = "Alpine and Windows variants have none" if re.search(r"alpine|windows|nanoserver", variant) else ""
    why = why or "a stand-in is made only from a Debian package of the same minor version"
    return f"{why}; stand-ins exist for {have}"


def base_image_for(image: str) -> BaseImage | None:
    """The local stand-in of ``image`` from :data:`IMAGE_MAP` or :data:`LANGUAGE_STAND_INS`, or ``None``."""
    language = language_stand_in(image)
    if language is not None:
        return BaseImage(language.suite, BASE_PACKAGES + language.packages, language.setup)
    name = hub_name(image)
    for pattern, suite in IMAGE_MAP:
        if re.fullmatch(pattern, name):
            return BaseImage(suite)
    return None


def base_rootfs(base: BaseImage, mirror: str, timeout_s: float = 900) -> Path:
    """The base image's root file system as a tar, made by mmdebstrap once and kept under :func:`state_dir`.

    Raises:
        ToolError: mmdebstrap is missing or failed.
    """
    folder = state_dir() / "rootfs"
    folder.mkdir(parents=True, exist_ok=True)
    tar = folder / f"{base.suite}-{base.rootfs_key(mirror)}.tar"
    if tar.is_file():
        return tar
    if shutil.which("mmdebstrap") is None:
        raise ToolError(
            f"base image for {base.suite} is not built and mmdebstrap is missing: apt-get install mmdebstrap "
            "(or pull the task's real image where a registry is reachable)"
        )
    partial = folder / f".{tar.name}.{os.getpid()}.partial"
    try:
        done = subprocess.run(
            mmdebstrap_command(base, mirror, partial), capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        _remove(partial)
        raise ToolError(f"mmdebstrap {base.suite}: not done in {timeout_s:g} s") from exc
    if done.returncode != 0:
        _remove(partial)
        tail = done.stderr.decode("utf-8", "replace")[-1500:]
        raise ToolError(f"mmdebstrap {base.suite} failed (exit {done.returncode}): {tail}")
    add_files(partial, BASE_FILES)
    partial.rename(tar)
    return tar


def mmdebstrap_command(base: BaseImage, mirror: str, output: Path) -> list[str]:
    """The mmdebstrap command line that writes ``base``'s root file system to ``output`` as a tar.

    The format is named: mmdebstrap reads it from the output's name otherwise, and a name that ends in
    no tar suffix (a ``.partial`` file) became a directory.
    """
    packages = "--include=" + ",".join(base.packages)
    # The setup runs in the root file system itself: a layer on top would keep the files it moves twice.
    hooks = [f'--customize-hook=chroot "$1" sh -c {shlex.quote(base.setup)}'] if base.setup else []
    return ["mmdebstrap", "--variant=minbase", "--format=tar", packages, *hooks, base.suite, str(output), mirror]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def add_files(tar: Path, files: dict[str, bytes]) -> None:
    """Append ``files`` (root-owned, 0644) to an uncompressed tar."""
    with tarfile.open(tar, "a") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))


def ensure_base_image(
    runtime: Runtime,
    base: BaseImage,
    *,
    mirror: str | None = None,
    ca_bundle: Path | None = None,
    timeout_s: float = 900,
) -> str:
    """Make ``base`` unless an image of the same recipe is there: its root file system, then uv on top.

    The root file system (:func:`base_rootfs`) is imported, then one layer adds uv (:data:`BASE_UV`)
    from PyPI: Terminal-Bench's stock ``run-tests.sh`` runs pytest through uv, and its installer's
    host is not reachable everywhere PyPI is; root's ``~/.local/bin`` then holds what that installer
    would leave (:data:`UV_LAYOUT`). ``ca_bundle`` is used for that download only.

    Returns:
        Its tag.

    Raises:
        ToolError: mmdebstrap is missing or failed, or the import or the uv layer failed.
    """
    mirror = mirror or os.environ.get("GEM_DEBIAN_MIRROR", DEFAULT_MIRROR)
    tag = base.tag(mirror)
    if _image_id(runtime, tag) != tag:  # there (the answer is kept for the rest of the process)
        return tag
    rootfs_tag = tag.replace("/gem-base-", "/gem-rootfs-")
    if not runtime.image_exists(rootfs_tag):
        tar = base_rootfs(base, mirror, timeout_s)
        args = ["import"]
        for change in BASE_CHANGES:
            args += ["--change", change]
        runtime.call(*args, str(tar), rootfs_tag, timeout_s=timeout_s)
    work = Path(tempfile.mkdtemp(prefix="gem-base-", dir=_scratch()))
    try:
        lines = [f"FROM {rootfs_tag}"]
        if ca_bundle is not None:
            (work / "ca.pem").write_bytes(Path(ca_bundle).read_bytes())
            lines.append("COPY ca.pem /tmp/gem-ca.pem")
            pip = f"PIP_CERT=/tmp/gem-ca.pem python3 -m pip install --no-cache-dir {BASE_UV} && rm /tmp/gem-ca.pem"
        else:
            pip = f"python3 -m pip install --no-cache-dir {BASE_UV}"
        (work / "uv-env").write_bytes(UV_INSTALLER_ENV)
        lines.append("COPY uv-env /root/.local/bin/env")
        lines.append(f"RUN {pip} && {UV_LAYOUT} && uv --version && /root/.local/bin/uvx --version")
        (work / "Dockerfile").write_text("\n".join(lines) + "\n")
        runtime.call("build", "-t", tag, str(work), timeout_s=timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def _scratch() -> str:
    folder = state_dir() / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


# --- Dockerfile rewriting --------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


@dataclass
class _Rewrite:
    text: str
    files: dict[str, bytes]
    images: list[str]


def _logical_lines(text: str) -> list[tuple[str, list[str]]]:
    """Dockerfile instructions with their heredoc bodies: ``[(instruction, [body lines...])]``."""
    lines = text.splitlines()
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                continue  # comment lines inside a continued instruction are dropped, as Docker does
            line = line.rstrip()[:-1].rstrip() + " " + nxt.strip()
        body: list[str] = []
        keyword = line.split(None, 1)[0].upper() if line.split() else ""
        if keyword in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(line):
                strip_tabs, word = match.group(1) == "-", match.group(3)
                while i < len(lines):
                    raw = lines[i]
                    i += 1
                    if (raw.lstrip("\t") if strip_tabs else raw) == word:
                        break
                    body.append(raw)
                else:
                    raise ToolError(f"Dockerfile: heredoc <<{word} is not closed")
                body.append(f"\x00{word}")  # separator between several heredocs of one line
        out.append((line.strip(), body))
    return out


def _split_bodies(body: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for line in body:
        if line.startswith("\x00"):
            parts.append([])
        else:
            parts[-1].append(line)
    return parts[:-1]


def stand_in_lines(image: str) -> list[str]:
    """The ``ENV`` and ``WORKDIR`` lines the stand-in of ``image`` gets after its ``FROM`` line.

    What the original image sets that tasks built on it rely on (:data:`STAND_IN_WORKDIRS`,
    :data:`LANGUAGE_STAND_INS`); written into the task's Dockerfile, so its image's tag changes with them.
    """
    language = language_stand_in(image)
    if language is not None:
        lines = ["ENV " + " ".join(f"{key}={value}" for key, value in language.env)]
        return lines + ([f"WORKDIR {language.workdir}"] if language.workdir else [])
    workdir = next((w for p, w in STAND_IN_WORKDIRS if re.fullmatch(p, hub_name(image))), None)
    return [f"WORKDIR {workdir}"] if workdir else []


def _copy_into_folder(keyword: str, rest: str, context: Path | None) -> str:
    """A ``COPY``/``ADD`` of several files with ``/`` after its destination, which the classic builder needs.

    BuildKit copies ``COPY a b /app`` (or a wildcard matching several files) into the folder ``/app``;
    Docker's classic builder and buildah refuse it unless the destination ends with ``/``.
    """
    words = rest.split()
    if rest.startswith("[") or len(words) < 2:
        return f"{keyword} {rest}"
    flags = [w for w in words if w.startswith("--")]
    operands = [w for w in words if not w.startswith("--")]
    sources, dest = operands[:-1], operands[-1]
    several = len(sources) > 1 or (
        context is not None
        and any(glob.has_magic(source) and len(glob.glob(str(context / source))) > 1 for source in sources)
    )
    if several and not dest.endswith("/"):
        dest += "/"
    return " ".join([keyword, *flags, *sources, dest])


def rewrite_dockerfile(
    text: str, resolve: Any, *, ca_bundle: bytes | None = None, context: Path | None = None
) -> _Rewrite:
    """Rewrite a Dockerfile for builders without heredocs, with base images resolved by ``resolve(name)``.

    Args:
        text: The Dockerfile.
        resolve: ``image name -> image to build FROM`` (the stand-in, or the name itself).
        ca_bundle: The host's CA bundle, copied into every stage with the clients' variables set.
        context: The build context, where ``COPY`` wildcards are matched (``None``: not matched).

    Returns:
        The new Dockerfile, the files it needs in the build context under ``.gem/``, the resolved images.

    Raises:
        ToolError: an unclosed heredoc, or several heredocs in one ``COPY``.
    """
    files: dict[str, bytes] = {}
    images: list[str] = []
    stages: set[str] = set()
    out: list[str] = []
    if ca_bundle is not None:
        files[".gem/ca.pem"] = ca_bundle
    for count, (line, body) in enumerate(_logical_lines(text)):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--platform")]
            if not words:
                raise ToolError(f"Dockerfile: {line!r} names no image")
            name = original = words[0]
            if name.lower() not in stages and name != "scratch":
                name = resolve(name)
                images.append(name)
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2].lower())
            out.append(" ".join(["FROM", name, *words[1:]]))
            if ca_bundle is not None:
                out.append(f"COPY .gem/ca.pem {_CA_PATH}")
                out.append("ENV " + " ".join(f"{k}={v}" for k, v in CA_ENV.items()))
            if name != original and name.startswith(_BASE_PREFIX):  # a stand-in, not the image named
                out += stand_in_lines(original)
            continue
        bodies = _split_bodies(body)
        if not bodies:
            if keyword in ("COPY", "ADD"):
                # `COPY --from=IMAGE` (not a stage) reads an image: resolved and checked like a FROM image.
                source = re.search(r"(?:^|\s)--from=(\S+)", rest)
                if source and source.group(1).lower() not in stages and not source.group(1).isdigit():
                    name = resolve(source.group(1))
                    images.append(name)
                    rest = rest[: source.start(1)] + name + rest[source.end(1) :]
                out.append(_copy_into_folder(keyword, rest, context))
            else:
                out.append(line)
            continue
        if keyword == "RUN":
            # The shell runs the instruction with its heredocs as written (quoting, <<-, expansion);
            # a bare `RUN <<EOF` is a script of its own, run by its #! line or sh.
            script = f".gem/heredoc-{count}"
            inner = f"/tmp/.gem-heredoc-{count}"
            command = _HEREDOC.sub("", rest).strip()
            if not command and len(bodies) == 1:
                files[script] = ("\n".join(bodies[0]) + "\n").encode()
                runner = (
                    f"chmod +x {inner} && {inner}" if bodies[0] and bodies[0][0].startswith("#!") else f"sh {inner}"
                )
            else:
                whole = [rest]
                for match, lines in zip(_HEREDOC.finditer(rest), bodies, strict=True):
                    whole += [*lines, match.group(3)]
                files[script] = ("\n".join(whole) + "\n").encode()
                runner = f"sh {inner}"
            out.append(f"COPY {script} {inner}")
            out.append(f"RUN {runner}; status=$?; rm -f {inner}; exit $status")
        else:  # COPY / ADD <<EOF dest
            if len(bodies) != 1:
                raise ToolError(f"Dockerfile: {line[:80]!r} has several heredocs; write them as files")
            found = _HEREDOC.search(rest)
            assert found is not None
            match = found
            name = f".gem/heredoc-{count}"
            lines = [line.lstrip("\t") for line in bodies[0]] if match.group(1) else bodies[0]
            files[name] = ("\n".join(lines) + "\n").encode()
            args = _HEREDOC.sub(name, rest, count=1).split()
            if args[-1].endswith("/"):
                args[-1] += match.group(3)  # Docker names the file after the heredoc's word
            out.append(" ".join([keyword, *args]))
    return _Rewrite("\n".join(out) + "\n", files, images)


# --- Building a task's image -----------------------------------------------------------------------

BaseImages = Literal["auto", "map", "pull"]


def _tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink():
            digest.update(f"L {relative} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {relative} {path.stat().st_mode & 0o777:o}\n".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        elif path.is_dir():
            digest.update(f"D {relative}\n".encode())
    return digest.hexdigest()


_pull_failed: set[str] = set()


def _resolver(runtime: Runtime, mode: BaseImages, mirror: str | None, ca: Path | None, timeout_s: float) -> Any:
    def resolve(image: str) -> str:
        image = qualified(image) if runtime.kind == "podman" else image
        base = base_image_for(image)
        if mode == "map" and base is not None:
            return ensure_base_image(runtime, base, mirror=mirror, ca_bundle=ca, timeout_s=timeout_s)
        if runtime.image_exists(image):
            return image
        if mode == "pull" or base is None:
            return image  # the builder pulls it (and says why when it cannot)
        if image not in _pull_failed:
            if runtime.call("pull", image, timeout_s=120.0, check=False).returncode == 0:
                return image
            _pull_failed.add(image)
        return ensure_base_image(runtime, base, mirror=mirror, ca_bundle=ca, timeout_s=timeout_s)

    return resolve


def qualified(image: str) -> str:
    """A short name as Docker reads it (``python:3.13`` is ``docker.io/library/python:3.13``): Podman asks."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"


_image_ids: dict[tuple[tuple[str, ...], str], str] = {}


def _image_id(runtime: Runtime, image: str) -> str:
    # Tags gem builds are content-addressed (a hash of the recipe): their id does not change within a run.
    key = (runtime.argv, image)
    if key not in _image_ids:
        done = runtime.call("image", "inspect", "--format", "{{.Id}}", image, timeout_s=30.0, check=False)
        if done.returncode != 0:
            return image
        _image_ids[key] = done.stdout.decode().strip()
    return _image_ids[key]


#: Where the checker's pytest and Python requirements are installed in a task's image (``$GEM_PYTEST``).
CHECKER_TOOLS_DIR = "/opt/gem/pytest"


def checker_tools_script(task: TerminalTask) -> str | None:
    """A build step installing what the task's checker installs at check time (the check has no network).

    The Debian packages it names that the image lacks, and pytest with its Python requirements into
    :data:`CHECKER_TOOLS_DIR` (``pip install --target``: the image's own packages stay as they are).
    ``None`` when the checker installs nothing and runs no pytest.
    """
    if not (task.checker_apt or task.checker_python or task.checker_pytest):
        return None
    lines = ["set -e"]
    if task.checker_apt:
        names = " ".join(shlex.quote(n) for n in task.checker_apt)
        lines += [
            "missing=",
            f'for p in {names}; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done',
            'if [ -n "$missing" ]; then',
            '  command -v apt-get >/dev/null || { echo "gem: the checker installs$missing; no apt-get" >&2; exit 1; }',
            "  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
            " $missing && rm -rf /var/lib/apt/lists/*",
            "fi",
        ]
    wanted = " ".join(shlex.quote(n) for n in ("pytest", *task.checker_python))
    lines += [
        "py=$(command -v python3 || command -v python || true)",
        '[ -n "$py" ] || { echo "gem: the image has no python3 for the checker\'s pytest" >&2; exit 1; }',
        'if PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip --version >/dev/null 2>&1; then',
        '  PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install -q --no-cache-dir --disable-pip-version-check'
        f" --target {CHECKER_TOOLS_DIR} {wanted}",
        "elif command -v uv >/dev/null; then",
        f'  uv pip install -q --python "$py" --target {CHECKER_TOOLS_DIR} {wanted}',
        "else",
        '  echo "gem: the image has neither pip nor uv to install the checker\'s pytest" >&2; exit 1',
        "fi",
        f"chmod -R a+rX {CHECKER_TOOLS_DIR}",
    ]
    return "\n".join(lines) + "\n"


def task_dockerfile(task: TerminalTask) -> tuple[str, Path | None]:
    """The Dockerfile text a task's image is built from, and its build context (``None``: none is needed).

    The task's own Dockerfile, or ``FROM docker_image`` for a task that names a prebuilt image.

    Raises:
        ToolError: the task has neither.
    """
    if task.dockerfile is not None:
        return task.dockerfile.read_text(encoding="utf-8"), task.build_context
    if task.base_image:
        return f"FROM {task.base_image}\n", None
    raise ToolError(f"task {task.name}: no Dockerfile and no prebuilt image to run")


def build_task_image(
    runtime: Runtime,
    task: TerminalTask,
    *,
    ca_bundle: Path | None = None,
    base_images: BaseImages = "auto",
    mirror: str | None = None,
    timeout_s: float = 1800.0,
) -> str:
    """Build a loaded task's image from its own Dockerfile (cached by a hash of the recipe); its tag.

    The build context and the compose file's ``args`` and ``target`` are the loader's
    (:func:`gem_terminal.loader.load_task`); a last step adds what the checker installs at check time
    (:func:`checker_tools_script`).

    Raises:
        ToolError: the task has no buildable Dockerfile, or the build failed (its output's tail is in the message).
    """
    text, context_dir = task_dockerfile(task)
    ca = Path(ca_bundle).read_bytes() if ca_bundle is not None else None
    resolver = _resolver(runtime, base_images, mirror, ca_bundle, timeout_s)
    rewrite = rewrite_dockerfile(text, resolver, ca_bundle=ca, context=context_dir)
    dockerfile = rewrite.text
    files = dict(rewrite.files)
    tools = checker_tools_script(task)
    target = str(task.compose_build.get("target") or "")
    if tools is not None and not target:  # a compose `target` stage is the image: the tools go on the last stage
        files[".gem/checker-tools.sh"] = tools.encode()
        dockerfile += "USER root\nCOPY .gem/checker-tools.sh /tmp/.gem-checker-tools.sh\n"
        dockerfile += "RUN sh /tmp/.gem-checker-tools.sh; s=$?; rm -f /tmp/.gem-checker-tools.sh; exit $s\n"
        if task.image is not None and task.image.user:
            dockerfile += f"USER {task.image.user}\n"
    build_args = [f"{k}={v}" for k, v in sorted((task.compose_build.get("args") or {}).items())]
    recipe = hashlib.sha256()
    parts = [dockerfile, _tree_hash(context_dir) if context_dir else "", *build_args, target]
    for part in [*parts, *[_image_id(runtime, i) for i in rewrite.images]]:
        recipe.update(part.encode() + b"\0")
    for name, data in sorted(files.items()):
        recipe.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    slug = re.sub(r"[^a-z0-9_.-]", "-", task.name.lower())[:60].strip("-.") or "task"
    tag = f"localhost/gem-task-{slug}:{recipe.hexdigest()[:16]}"
    if _image_id(runtime, tag) != tag:  # there (the answer is kept for the rest of the process)
        return tag
    work = Path(tempfile.mkdtemp(prefix="gem-build-", dir=_scratch()))
    try:
        context = work / "context"
        if context_dir is not None:
            shutil.copytree(context_dir, context, symlinks=True)
        else:
            context.mkdir()
        for name, data in {**files, ".gem/Dockerfile": dockerfile.encode()}.items():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            (context / name).write_bytes(data)
        args = ["build", "-f", str(context / ".gem" / "Dockerfile"), "-t", tag]
        for value in build_args:
            args += ["--build-arg", value]
        if target:
            args += ["--target", target]
        runtime.call(*args, str(context), timeout_s=timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def unresolvable_images(runtime: Runtime, task: TerminalTask, base_images: BaseImages = "auto") -> list[str]:
    """The ``FROM`` images of a task (and those a ``COPY --from`` reads) that nothing here can provide.

    That is: not in the local store, no stand-in in :data:`IMAGE_MAP` (unless ``base_images="pull"``),
    and no registry that answers for them. A registry is asked for the image's manifest once per image
    and process (no layer is pulled).
    """
    try:
        text, _ = task_dockerfile(task)
        images = rewrite_dockerfile(text, lambda name: name).images
    except ToolError:
        return []
    missing = []
    for image in dict.fromkeys(images):
        name = qualified(image) if runtime.kind == "podman" else image
        if base_images != "pull" and base_image_for(name) is not None:
            continue
        if "$" in name or runtime.image_exists(name) or _registry_has(runtime, name):
            continue
        missing.append(image)
    return missing


# --- Module downloads in a build ------------------------------------------------------------------

#: A ``RUN`` that downloads Go modules when the go.mod it builds requires any (``go install x@v`` and
#: ``go get`` download whatever the module says).
_GO_BUILDS = re.compile(r"\bgo\s+(mod\s+(download|tidy|vendor)|build|install|test|run|vet|generate|list)\b")
_GO_FETCHES = re.compile(r"\bgo\s+(get\s|install\s+\S+@)")
_CARGO_BUILDS = re.compile(
    r"\bcargo\s+(\+\S+\s+)?(build|fetch|test|run|check|vendor|install|update|generate-lockfile)\b"
)
_CARGO_FETCHES = re.compile(r"\bcargo\s+install\s+(?!.*--path)")
#: The hosts a Go and a Rust build download modules from (Go's default GOPROXY, crates.io's sparse index).
MODULE_HOSTS = {"go": "proxy.golang.org", "cargo": "index.crates.io"}


def _go_requires(context: Path) -> str | None:
    """A go.mod in the build context that requires modules it does not vendor (its path), else ``None``."""
    for gomod in sorted(context.rglob("go.mod")):
        if "vendor" in gomod.relative_to(context).parts[:-1]:
            continue
        text = gomod.read_text(encoding="utf-8", errors="replace")
        if re.search(r"^\s*require\b", text, re.MULTILINE) and not (gomod.parent / "vendor" / "modules.txt").is_file():
            return gomod.relative_to(context).as_posix()
    return None


def _cargo_requires(context: Path) -> str | None:
    """A Cargo.toml in the build context with a dependency that is no ``path`` and no vendored source."""
    table = re.compile(r"^\[(.*\.)?(dependencies|dev-dependencies|build-dependencies)(\.[^\]]+)?\]\s*$")
    for manifest in sorted(context.rglob("Cargo.toml")):
        parts = manifest.relative_to(context).parts[:-1]
        if "vendor" in parts or "target" in parts:
            continue
        config = [manifest.parent / ".cargo" / name for name in ("config.toml", "config")]
        if any(c.is_file() and "[source." in c.read_text(errors="replace") for c in config):
            continue  # a vendored or local registry
        current: str | None = None
        for raw in manifest.read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("["):
                if current == "dotted":  # the last [dependencies.name] had no path
                    return manifest.relative_to(context).as_posix()
                found = table.match(line)
                current = (found.group(3) or "") if found else None
                if found and found.group(3):  # [dependencies.name]: one dependency, its keys follow
                    current = "dotted"
                continue
            if current is None or "=" not in line:
                continue
            if current == "dotted":
                if line.split("=", 1)[0].strip() == "path":
                    current = None  # a path dependency: nothing to download
                continue
            if not re.search(r"\bpath\s*=", line):
                return manifest.relative_to(context).as_posix()
        if current == "dotted":
            return manifest.relative_to(context).as_posix()
    return None


def module_downloads(task: TerminalTask) -> list[tuple[str, str]]:
    """What the task's image build downloads from a module host: ``[(host, why)]``, empty when nothing.

    A ``RUN`` that builds Go with a go.mod of the build context that requires modules it does not vendor,
    or runs ``go get``/``go install x@v``; one that builds with cargo where a Cargo.toml has a dependency
    that is neither a ``path`` nor from a vendored source (``.cargo/config.toml`` with ``[source.*]``), or
    runs ``cargo install <crate>``. ``-mod=vendor`` and ``--offline`` builds download nothing. Best effort: a
    go.mod the build writes itself is not seen.
    """
    try:
        text, context = task_dockerfile(task)
        lines = [line for line, _ in _logical_lines(text) if line.split(None, 1)[0].upper() == "RUN"]
    except (ToolError, OSError, IndexError):
        return []
    try:
        return _module_downloads(lines, context)
    except OSError:  # an unreadable file of the build context: the build says what it cannot read
        return []


def _module_downloads(lines: list[str], context: Path | None) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    go = [line for line in lines if _GO_BUILDS.search(line) and "-mod=vendor" not in line]
    gomod = _go_requires(context) if go and context is not None else None
    fetch = next((line for line in lines if _GO_FETCHES.search(line)), None)
    if gomod or fetch:
        why = f"{gomod} requires modules that it does not vendor" if gomod else f"{fetch[:80]!r}"
        found.append((MODULE_HOSTS["go"], why))
    cargo = [line for line in lines if _CARGO_BUILDS.search(line) and "--offline" not in line]
    manifest = _cargo_requires(context) if cargo and context is not None else None
    fetch = next((line for line in lines if _CARGO_FETCHES.search(line) and "--offline" not in line), None)
    if manifest or fetch:
        why = f"{manifest} has dependencies from crates.io" if manifest else f"{fetch[:80]!r}"
        found.append((MODULE_HOSTS["cargo"], why))
    for line in lines:  # pip from another index than PyPI (PyTorch's CPU wheels: cartpole-rl-training)
        for match in _PIP_INDEX.finditer(line):
            if match.group(2) not in ("pypi.org", "files.pythonhosted.org"):
                found.append((match.group(2), f"{line[:80]!r} installs from {match.group(1)}"))
    return found


_PIP_INDEX = re.compile(
    r"""\b(?:pip3?(?:\.\d+)?|uv\s+pip)\s[^\n;&|]*?(?:--index-url|--extra-index-url|-i)[= ]\s*['"]?"""
    r"""(https?://([^/\s'":]+)[^\s'"]*)"""
)


_host_answers_cache: dict[str, bool] = {}


def host_answers(host: str, timeout_s: float = 10.0) -> bool:
    """Whether ``https://host/`` answers here (any HTTP status counts); asked once per host and process."""
    if host not in _host_answers_cache:
        try:
            with urllib.request.urlopen(f"https://{host}/", timeout=timeout_s):
                pass
            _host_answers_cache[host] = True
        except urllib.error.HTTPError:
            _host_answers_cache[host] = True
        except (urllib.error.URLError, OSError):
            _host_answers_cache[host] = False
    return _host_answers_cache[host]


_registry_answers: dict[tuple[tuple[str, ...], str], bool] = {}


def _registry_has(runtime: Runtime, image: str) -> bool:
    key = (runtime.argv, image)
    if key not in _registry_answers:
        # Podman and Docker both read a name that is no local manifest list from its registry.
        done = runtime.call("manifest", "inspect", image, timeout_s=60.0, check=False)
        _registry_answers[key] = done.returncode == 0
    return _registry_answers[key]
