"""Documents, search hits and the JSONL corpus format."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gem_core.errors import CorpusError

__all__ = ["Document", "SearchHit", "demo_corpus_path", "file_sha256", "format_hits", "iter_corpus", "parse_document"]


@dataclass(frozen=True)
class Document:
    """One retrievable passage.

    Attributes:
        id: Stable identifier from the corpus.
        title: Short title (may be empty).
        text: The passage.
    """

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class SearchHit:
    """A document returned for a query, with its retrieval score (higher is better)."""

    document: Document
    score: float
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def demo_corpus_path() -> Path:
    """The small corpus shipped with the package (encyclopedia-style facts, for tests and demos)."""
    return Path(str(resources.files("gem_tool_search") / "data" / "demo_corpus.jsonl"))


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def parse_document(record: Any, where: str = "document") -> Document:
    """Build a :class:`Document` from one decoded JSON record.

    Accepts ``{"id", "title", "text"}`` and Search-R1's ``{"id", "contents"}``, where
    ``contents`` is the title on the first line (optionally quoted) and the text after it.

    Raises:
        CorpusError: the record is not an object or lacks the fields above; ``where``
            (e.g. ``"corpus.jsonl line 3"``) is named in the message.
    """
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: expected a JSON object with 'id', 'title', 'text', got {type(record).__name__}")
    if "id" not in record:
        raise CorpusError(f"{where}: missing 'id' (every document needs a unique id)")
    if "text" in record:
        title, text = record.get("title", ""), record["text"]
    elif "contents" in record:
        head, _, text = str(record["contents"]).partition("\n")
        title = head.strip().strip('"')
    else:
        raise CorpusError(f"{where}: missing 'text' (or Search-R1's 'contents'); fields present: {sorted(record)}")
    if not isinstance(title, str) or not isinstance(text, str):
        raise CorpusError(f"{where}: 'title' and 'text' must be strings")
    return Document(id=str(record["id"]), title=title, text=text)


def iter_corpus(path: Path) -> Iterator[tuple[int, Document]]:
    """Yield ``(byte_offset, document)`` for each non-blank line of a JSONL corpus.

    Raises:
        CorpusError: the file does not exist, a line is not JSON, or a record is malformed.
    """
    if not path.is_file():
        raise CorpusError(f"search corpus {str(path)!r} does not exist; pass corpus=<path to a JSONL file>")
    offset = 0
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise CorpusError(f"{path} line {line_no}: not valid JSON ({exc})") from exc
            yield start, parse_document(record, f"{path} line {line_no}")


def format_hits(hits: list[SearchHit]) -> str:
    """Render hits the way Search-R1 shows them to the model: ``Doc i(Title: ...) text``."""
    return "\n".join(f"Doc {i}(Title: {hit.document.title}) {hit.document.text}" for i, hit in enumerate(hits, 1))
