"""A BM25 index over a JSONL corpus, in numpy, cached on disk by the corpus file's hash.

Scoring is Okapi BM25 with Lucene's non-negative idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``,
and per-posting weights ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``
precomputed at build time, so a query is one gather and one sum over its terms' postings.
Defaults ``k1=0.9, b=0.4`` are Pyserini's, which Search-R1's BM25 baseline uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from array import array
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gem_core.errors import CorpusError
from gem_tool_search.corpus import Document, file_sha256, iter_corpus, parse_document

__all__ = ["STOPWORDS", "BM25Index", "default_cache_dir", "tokenize"]

#: Bump when tokenisation or the file layout changes, so old cache files are not reused.
INDEX_FORMAT = 1

_TOKEN_RE = re.compile(r"\w+")

#: Function words that carry no retrieval signal; dropping them keeps postings short.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "she",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (Unicode letters and digits), without :data:`STOPWORDS`."""
    return [tok for tok in _TOKEN_RE.findall(text.lower()) if tok not in STOPWORDS]


def default_cache_dir() -> Path:
    """``$GEM_CACHE_DIR/search``, else ``$XDG_CACHE_HOME/gem/search``, else ``~/.cache/gem/search``."""
    if root := os.environ.get("GEM_CACHE_DIR"):
        return Path(root) / "search"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gem" / "search"


class BM25Index:
    """Postings of one corpus file, with byte offsets to read documents back lazily.

    Build or load one with :meth:`load_or_build`; documents stay on disk and only the
    hits of a query are read and parsed.

    Attributes:
        path: The corpus file.
        k1: Term-frequency saturation.
        b: Length normalisation.
        n_docs: Number of documents.
        cache_file: Where the index was saved or loaded from (``None`` when not cached).
        loaded_from_cache: True when :meth:`load_or_build` found a valid cache file.
    """

    def __init__(
        self,
        path: Path,
        *,
        k1: float,
        b: float,
        vocab: dict[str, int],
        indptr: npt.NDArray[np.int64],
        doc_ids: npt.NDArray[np.int32],
        weights: npt.NDArray[np.float32],
        offsets: npt.NDArray[np.int64],
        file_stat: tuple[int, int],
    ) -> None:
        self.path = path
        self.k1 = k1
        self.b = b
        self.vocab = vocab
        self.indptr = indptr
        self.doc_ids = doc_ids
        self.weights = weights
        self.offsets = offsets
        self.n_docs = len(offsets)
        self.cache_file: Path | None = None
        self.loaded_from_cache = False
        self._file_stat = file_stat

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, path: Path, *, k1: float = 0.9, b: float = 0.4) -> BM25Index:
        """Tokenise every document of ``path`` and compute the postings.

        Raises:
            CorpusError: the file is missing or malformed, has duplicate ids, or is empty.
        """
        path = Path(path)
        stat = _stat(path)
        vocab: dict[str, int] = {}
        term_col, doc_col, tf_col = array("i"), array("i"), array("i")
        lengths, offsets = array("i"), array("q")
        seen_ids: set[str] = set()
        for offset, doc in iter_corpus(path):
            if doc.id in seen_ids:
                raise CorpusError(f"{path}: document id {doc.id!r} appears twice; ids must be unique")
            seen_ids.add(doc.id)
            tokens = tokenize(f"{doc.title} {doc.text}")
            counts = Counter(tokens)
            doc_col.extend([len(offsets)] * len(counts))
            for token, tf in counts.items():
                term_col.append(vocab.setdefault(token, len(vocab)))
                tf_col.append(tf)
            lengths.append(len(tokens))
            offsets.append(offset)
        if not offsets:
            raise CorpusError(f"search corpus {str(path)!r} has no documents")

        terms = np.frombuffer(term_col, dtype=np.int32)
        # Stable sort keeps each term's postings in document order.
        order = np.argsort(terms, kind="stable")
        sorted_terms = terms[order]
        doc_ids = np.frombuffer(doc_col, dtype=np.int32)[order]
        term_freq = np.frombuffer(tf_col, dtype=np.int32)[order].astype(np.float64)
        doc_len = np.frombuffer(lengths, dtype=np.int32).astype(np.float64)

        n_docs = len(offsets)
        df = np.bincount(terms, minlength=len(vocab))
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
        avg_len = max(float(doc_len.mean()), 1e-9)
        norm = k1 * (1.0 - b + b * doc_len[doc_ids] / avg_len)
        weights = (idf[sorted_terms] * term_freq * (k1 + 1.0) / (term_freq + norm)).astype(np.float32)
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        return cls(
            path,
            k1=k1,
            b=b,
            vocab=vocab,
            indptr=indptr,
            doc_ids=doc_ids.astype(np.int32),
            weights=weights,
            offsets=np.frombuffer(offsets, dtype=np.int64).copy(),
            file_stat=stat,
        )

    @classmethod
    def load_or_build(cls, path: Path, *, k1: float = 0.9, b: float = 0.4, cache_dir: Path | None = None) -> BM25Index:
        """Load the cached index of ``path`` or build and cache it.

        The cache file is named by the SHA-256 of the corpus bytes and the parameters,
        so an edited corpus gets a new index; it is written atomically, so processes
        building the same index at once do not corrupt it.
        """
        path = Path(path)
        if not path.is_file():
            raise CorpusError(f"search corpus {str(path)!r} does not exist; pass corpus=<path to a JSONL file>")
        cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        params = hashlib.sha256(f"{INDEX_FORMAT}:{k1!r}:{b!r}".encode()).hexdigest()[:8]
        cache_file = cache_dir / f"bm25-{file_sha256(path)[:32]}-{params}.npz"
        index = cls._load(path, cache_file, k1=k1, b=b)
        if index is None:
            index = cls.build(path, k1=k1, b=b)
            index._save(cache_file)
        index.cache_file = cache_file
        return index

    def _save(self, cache_file: Path) -> None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        vocab_bytes = "\n".join(self.vocab).encode()  # tokens are \w+, so never contain "\n"
        with tempfile.NamedTemporaryFile(dir=cache_file.parent, suffix=".tmp", delete=False) as tmp:
            np.savez(
                tmp,
                vocab=np.frombuffer(vocab_bytes, dtype=np.uint8),
                indptr=self.indptr,
                doc_ids=self.doc_ids,
                weights=self.weights,
                offsets=self.offsets,
            )
        os.replace(tmp.name, cache_file)

    @classmethod
    def _load(cls, path: Path, cache_file: Path, *, k1: float, b: float) -> BM25Index | None:
        if not cache_file.is_file():
            return None
        stat = _stat(path)
        try:
            with np.load(cache_file, allow_pickle=False) as data:
                arrays = {key: data[key] for key in ("vocab", "indptr", "doc_ids", "weights", "offsets")}
        except (OSError, ValueError, KeyError):
            return None  # truncated or foreign file: rebuild over it
        terms = arrays["vocab"].tobytes().decode().split("\n") if arrays["vocab"].size else []
        index = cls(
            path,
            k1=k1,
            b=b,
            vocab={term: i for i, term in enumerate(terms)},
            indptr=arrays["indptr"],
            doc_ids=arrays["doc_ids"],
            weights=arrays["weights"],
            offsets=arrays["offsets"],
            file_stat=stat,
        )
        index.loaded_from_cache = True
        return index

    # ------------------------------------------------------------------ querying

    def is_stale(self) -> bool:
        """True when the corpus file changed (size or mtime) since the index was built."""
        try:
            return _stat(self.path) != self._file_stat
        except CorpusError:
            return True

    def search(self, query: str, top_k: int) -> list[tuple[int, float]]:
        """Best ``top_k`` ``(doc_index, score)`` pairs, highest score first; ties by corpus order.

        Only documents sharing at least one term with the query are returned.
        """
        counts = Counter(tokenize(query))
        spans = [
            (self.indptr[t], self.indptr[t + 1], q)
            for tok, q in counts.items()
            if (t := self.vocab.get(tok)) is not None
        ]
        if not spans or top_k <= 0:
            return []
        docs = np.concatenate([self.doc_ids[s:e] for s, e, _ in spans])
        weights = np.concatenate([self.weights[s:e] * np.float32(q) for s, e, q in spans])
        if len(docs) * 8 < self.n_docs:
            # Few postings: sum over the touched documents only, not a dense vector of n_docs.
            candidates, inverse = np.unique(docs, return_inverse=True)
            scores = np.bincount(inverse, weights)
        else:
            dense = np.bincount(docs, weights, minlength=self.n_docs)
            candidates = np.flatnonzero(dense)
            scores = dense[candidates]
        if top_k < len(candidates):
            keep = np.argpartition(-scores, top_k - 1)[:top_k]
            candidates, scores = candidates[keep], scores[keep]
        order = np.lexsort((candidates, -scores))
        return [(int(candidates[i]), float(scores[i])) for i in order]

    def documents(self, doc_indices: list[int]) -> list[Document]:
        """Read documents back from the corpus file by index."""
        docs = []
        with self.path.open("rb") as handle:
            for i in doc_indices:
                handle.seek(int(self.offsets[i]))
                docs.append(parse_document(json.loads(handle.readline()), f"{self.path} document {i}"))
        return docs


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError as exc:
        raise CorpusError(f"search corpus {str(path)!r} cannot be read: {exc}") from exc
    return st.st_size, st.st_mtime_ns
