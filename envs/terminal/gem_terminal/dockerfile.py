"""A Dockerfile read the way a builder reads it: instructions, flags, heredocs, and the state each RUN sees.

Only what a task's image needs is modelled: ``FROM`` (its ``--platform`` flag apart from the image),
``ARG``/``ENV`` (substituted into later lines), ``WORKDIR`` (applied line by line, relative ones
against the current one), ``USER``, ``COPY``/``ADD`` (with ``--chown``/``--chmod``/``--from`` flags,
and heredoc sources), ``RUN`` (shell and exec forms, heredoc scripts). The rest is kept as read.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CopyStep", "DockerImage", "DockerfileError", "Instruction", "RunStep", "parse_dockerfile", "read_image"]


class DockerfileError(ValueError):
    """A Dockerfile line that cannot be read (unbalanced quotes, a heredoc without its end, no FROM...)."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword (upper case), its flags (``--name=value``), the rest, its heredocs, its line."""

    keyword: str
    flags: dict[str, str]
    rest: str
    heredocs: tuple[tuple[str, str], ...] = ()
    line: int = 0


@dataclass(frozen=True)
class RunStep:
    """A ``RUN``: the shell text, and the working directory, user and variables in effect at that line."""

    command: str
    workdir: str
    user: str
    env: dict[str, str]
    line: int


@dataclass(frozen=True)
class CopyStep:
    """A ``COPY``/``ADD``: sources relative to the build context (or one inline heredoc body) into ``dest``.

    Attributes:
        sources: Paths relative to the build context (empty for a heredoc).
        dest: Absolute destination (a folder when it ends with ``/`` or there are several sources).
        inline: The heredoc body written to ``dest`` (``COPY <<EOT /path``), else ``None``.
        chown: The ``--chown`` flag's value, or ``""``.
        chmod: The ``--chmod`` flag's value, or ``""``.
        from_stage: The ``--from`` flag's value (another stage or image), or ``""``.
        add: Whether it was ``ADD`` (which also fetches URLs and unpacks local archives).
        line: Its line in the Dockerfile.
    """

    sources: tuple[str, ...]
    dest: str
    inline: str | None = None
    chown: str = ""
    chmod: str = ""
    from_stage: str = ""
    add: bool = False
    line: int = 0


@dataclass(frozen=True)
class DockerImage:
    """What the last stage of a Dockerfile makes.

    Attributes:
        base_image: The last ``FROM`` image, variables substituted, ``--platform`` removed.
        platform: The ``--platform`` flag of that ``FROM`` (``""`` when none).
        stages: How many ``FROM`` lines the file has (above 1: a multi-stage build).
        workdir: The ``WORKDIR`` in effect at the end (``""`` when neither the file nor its base image sets one).
        user: The ``USER`` in effect at the end (``""``: the image's, root for the usual bases).
        env: ``ENV`` in effect at the end.
        steps: ``RunStep`` and ``CopyStep`` of the last stage, in file order.
        others: Instructions kept as read (``CMD``, ``EXPOSE``, ``VOLUME``...).
    """

    base_image: str
    platform: str = ""
    stages: int = 1
    workdir: str = ""
    user: str = ""
    env: dict[str, str] = field(default_factory=dict)
    steps: tuple[RunStep | CopyStep, ...] = ()
    others: tuple[Instruction, ...] = ()


_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_.-]*)\2")
_PARSER_DIRECTIVE = re.compile(r"#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$")


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: continuations joined, comments dropped, heredoc bodies attached.

    Raises:
        DockerfileError: A heredoc that never ends.
    """
    lines = text.splitlines()
    escape = "\\"
    for raw in lines:  # parser directives come first, before any other line
        match = _PARSER_DIRECTIVE.match(raw.strip())
        if not match:
            break
        if match.group(1).lower() == "escape":
            escape = match.group(2)
    instructions: list[Instruction] = []
    index = 0
    while index < len(lines):
        start = index
        stripped = lines[index].strip()
        index += 1
        if not stripped or stripped.startswith("#"):
            continue
        parts = [stripped]
        # A continuation: the escape character ends the line; comment and blank lines inside are dropped.
        while parts[-1].endswith(escape) and index < len(lines):
            parts[-1] = parts[-1][: -len(escape)].rstrip()
            nxt = lines[index].strip()
            index += 1
            while (not nxt or nxt.startswith("#")) and index < len(lines):  # builders skip these inside
                nxt = lines[index].strip()
                index += 1
            parts.append(nxt)
        if parts[-1].endswith(escape):
            parts[-1] = parts[-1][: -len(escape)].rstrip()
        logical = " ".join(part for part in parts if part).strip()
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        flags, rest = _split_flags(rest.strip())
        heredocs: list[tuple[str, str]] = []
        if keyword in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(rest):
                strip_tabs, word = match.group(1) == "-", match.group(3)
                body: list[str] = []
                while True:
                    if index >= len(lines):
                        raise DockerfileError(f"line {start + 1}: the heredoc <<{word} never ends")
                    line = lines[index]
                    index += 1
                    if (line.lstrip("\t") if strip_tabs else line) == word:
                        break
                    body.append(line.lstrip("\t") if strip_tabs else line)
                heredocs.append((word, "\n".join(body) + "\n"))
        instructions.append(Instruction(keyword, flags, rest, tuple(heredocs), start + 1))
    return instructions


def _split_flags(rest: str) -> tuple[dict[str, str], str]:
    """Leading ``--name=value`` flags (``--link`` alone means ``true``) and what follows them."""
    flags: dict[str, str] = {}
    while rest.startswith("--"):
        word, _, after = rest.partition(" ")
        name, equals, value = word[2:].partition("=")
        flags[name.lower()] = value if equals else "true"
        rest = after.strip()
    return flags, rest


#: ``PATH`` of the base images a ``FROM`` line names here (Docker's default; ``$PATH`` in ``ENV`` extends it).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(text: str, variables: dict[str, str]) -> str:
    """``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alt}`` as a builder substitutes them."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        value = variables.get(name, "")
        if match.group(2) == "-":
            return value or match.group(3)
        if match.group(2) == "+":
            return match.group(3) if value else ""
        return value

    return _VARIABLE.sub(one, text)


def _words(rest: str, variables: dict[str, str]) -> list[str]:
    """The arguments of a COPY/ADD/WORKDIR-like line: exec form (JSON) or shell words, variables substituted."""
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return [substitute(item, variables) for item in value]
    try:
        return [substitute(word, variables) for word in shlex.split(rest)]
    except ValueError as exc:
        raise DockerfileError(f"cannot split {rest[:80]!r}: {exc}") from exc


def _assignments(rest: str, variables: dict[str, str], keyword: str) -> dict[str, str]:
    """``ENV``/``ARG`` pairs: ``K=V K2="v w"`` or the legacy ``ENV K value with spaces``."""
    words = _words(rest, variables)
    if keyword == "ENV" and words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    pairs: dict[str, str] = {}
    for word in words:
        name, equals, value = word.partition("=")
        if keyword == "ARG" and not equals:
            pairs[name] = variables.get(name, "")
        elif equals:
            pairs[name] = value
    return pairs


def read_image(
    text: str, build_args: dict[str, str] | None = None, base_workdir: Callable[[str], str] | None = None
) -> DockerImage:
    """Walk a Dockerfile's instructions keeping the builder's state (stage, WORKDIR, USER, ARG, ENV).

    Args:
        text: The Dockerfile.
        build_args: ``ARG`` values given to the build (compose ``build: args:``).
        base_workdir: The ``WORKDIR`` a ``FROM`` image sets (``""``: unknown, so ``/``). Lines before the
            file's own ``WORKDIR`` run there, as the builder runs them.

    Raises:
        DockerfileError: No ``FROM``, a line that cannot be split, a heredoc without its end.
    """
    build_args = dict(build_args or {})
    global_args: dict[str, str] = {}
    stages = 0
    base, platform = "", ""
    workdir, user = "", ""
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    steps: list[RunStep | CopyStep] = []
    others: list[Instruction] = []
    for ins in parse_dockerfile(text):
        # `ENV PATH=/x:$PATH` extends the base image's PATH, which is not empty.
        variables = {"PATH": BASE_PATH, **args, **env}
        if ins.keyword == "FROM":
            words = _words(ins.rest, {**global_args, **build_args})
            if not words:
                raise DockerfileError(f"line {ins.line}: FROM names no image")
            stages += 1
            base, platform = words[0], substitute(ins.flags.get("platform", ""), {**global_args, **build_args})
            # Each stage starts from its image's state: its WORKDIR where known, the rest unknown, so nothing.
            workdir = base_workdir(base) if base_workdir else ""
            user, args, env, steps, others = "", {}, {}, [], []
        elif ins.keyword == "ARG":
            pairs = _assignments(ins.rest, variables, "ARG")
            resolved = {name: build_args.get(name, value) for name, value in pairs.items()}
            if stages == 0:
                global_args.update(resolved)
            else:  # an ARG named before FROM is visible in a stage only when re-declared there
                args.update({n: build_args.get(n, v or global_args.get(n, "")) for n, v in pairs.items()})
        elif stages == 0:
            raise DockerfileError(f"line {ins.line}: {ins.keyword} before the first FROM")
        elif ins.keyword == "ENV":
            env.update(_assignments(ins.rest, variables, "ENV"))
        elif ins.keyword == "WORKDIR":
            words = _words(ins.rest, variables)
            if len(words) != 1:
                raise DockerfileError(f"line {ins.line}: WORKDIR takes one path, got {ins.rest!r}")
            workdir = posixpath.normpath(posixpath.join(workdir or "/", words[0]))
        elif ins.keyword == "USER":
            user = substitute(ins.rest.strip(), variables)
        elif ins.keyword == "RUN":
            steps.append(RunStep(_run_text(ins), workdir or "/", user, {**args, **env}, ins.line))
        elif ins.keyword in ("COPY", "ADD"):
            steps.extend(_copy_steps(ins, variables, workdir or "/"))
        else:
            others.append(ins)
    if stages == 0:
        raise DockerfileError("no FROM line")
    return DockerImage(base, platform, stages, workdir, user, env, tuple(steps), tuple(others))


def _run_text(ins: Instruction) -> str:
    """A RUN line as shell text: exec form joined, heredoc scripts inlined (``RUN <<EOF`` runs the body)."""
    rest = ins.rest
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return shlex.join(value)
    if not ins.heredocs:
        return rest
    # `RUN <<EOF` alone: the body is the script. `RUN cmd <<EOF`: the body is cmd's stdin, as in a shell.
    head = _HEREDOC.sub("", rest).strip()
    if not head:
        return "\n".join(body for _, body in ins.heredocs).rstrip("\n")
    script = rest
    for word, body in ins.heredocs:
        script += f"\n{body}{word}"
    return script


def _copy_steps(ins: Instruction, variables: dict[str, str], workdir: str) -> list[CopyStep]:
    def step(sources: tuple[str, ...], dest: str, inline: str | None) -> CopyStep:
        flags = ins.flags
        return CopyStep(
            sources,
            dest,
            inline,
            flags.get("chown", ""),
            flags.get("chmod", ""),
            flags.get("from", ""),
            ins.keyword == "ADD",
            ins.line,
        )

    if ins.heredocs:
        words = _words(_HEREDOC.sub("", ins.rest), variables)
        if len(words) != 1:
            raise DockerfileError(f"line {ins.line}: {ins.keyword} with a heredoc needs one destination")
        dest = posixpath.normpath(posixpath.join(workdir, words[0]))
        if len(ins.heredocs) == 1:
            return [step((), dest, ins.heredocs[0][1])]
        # Several heredocs: each becomes a file named after its word inside the destination folder.
        return [step((), posixpath.join(dest, word), body) for word, body in ins.heredocs]
    words = _words(ins.rest, variables)
    if len(words) < 2:
        raise DockerfileError(f"line {ins.line}: {ins.keyword} needs a source and a destination")
    dest = words[-1]
    absolute = posixpath.normpath(posixpath.join(workdir, dest))
    if dest.endswith("/") or dest in (".", "./"):
        absolute = absolute.rstrip("/") + "/"
    return [step(tuple(words[:-1]), absolute, None)]
