"""BM25 index: scoring against a reference formula, ranking, on-disk cache, corpus errors."""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from gem_tool_search import BM25Index, demo_corpus_path, iter_corpus, parse_document, tokenize
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import CorpusError, GemCoreError


def reference_bm25(docs: list[str], query: str, k1: float, b: float) -> list[float]:
    """Textbook BM25 (Lucene idf), written independently of the numpy index."""
    tokenized = [tokenize(d) for d in docs]
    n = len(docs)
    avgdl = sum(map(len, tokenized)) / n
    scores = []
    for toks in tokenized:
        tf = Counter(toks)
        score = 0.0
        for term in tokenize(query):
            df = sum(term in t for t in tokenized)
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(toks) / avgdl))
        scores.append(score)
    return scores


def test_tokenize_lowercases_drops_stopwords_and_keeps_unicode() -> None:
    assert tokenize("The Capital of FRANCE is Paris!") == ["capital", "france", "paris"]
    assert tokenize("Zürich, 中文 and café") == ["zürich", "中文", "café"]
    assert tokenize("") == []


@pytest.mark.parametrize(
    ("k1", "b"), [(0.9, 0.4), (1.2, 0.75), (2.0, 0.0)], ids=["pyserini", "classic", "no-length-norm"]
)
@pytest.mark.parametrize("query", ["wolf", "domesticated wolf dog", "capital France", "wolf wolf pack"], ids=str)
def test_scores_match_reference_formula(small_corpus: Path, k1: float, b: float, query: str) -> None:
    index = BM25Index.build(small_corpus, k1=k1, b=b)
    texts = [f"{d.title} {d.text}" for _, d in iter_corpus(small_corpus)]
    expected = reference_bm25(texts, query, k1, b)
    got = dict(index.search(query, top_k=10))
    for i, score in enumerate(expected):
        assert got.get(i, 0.0) == pytest.approx(score, rel=1e-5), f"doc {i}"


def test_ranking_top_k_and_no_match(small_corpus: Path) -> None:
    index = BM25Index.build(small_corpus)
    ranked = index.search("wolf", top_k=10)
    assert [index.documents([i])[0].id for i, _ in ranked] == ["wolf", "dog"]
    assert len(index.search("wolf", top_k=1)) == 1
    assert index.search("unicorn", top_k=3) == []
    assert index.search("the of and", top_k=3) == []  # stopwords only
    assert index.search("wolf", top_k=0) == []


def test_ties_are_broken_by_corpus_order(tmp_path: Path, write_corpus: Any) -> None:
    docs = [{"id": str(i), "title": "", "text": "same words here"} for i in range(6)]
    index = BM25Index.build(write_corpus(tmp_path / "ties.jsonl", docs))
    assert [i for i, _ in index.search("words", top_k=4)] == [0, 1, 2, 3]


def test_dense_and_sparse_accumulation_agree(tmp_path: Path, write_corpus: Any) -> None:
    # A term in every document takes the dense path; a rare one the sparse path.
    docs = [{"id": str(i), "title": "", "text": f"common filler {'rare' if i == 7 else ''} {i}"} for i in range(40)]
    index = BM25Index.build(write_corpus(tmp_path / "c.jsonl", docs))
    dense = dict(index.search("common rare", top_k=40))
    assert len(dense) == 40 and max(dense, key=dense.__getitem__) == 7
    sparse = index.search("rare", top_k=5)
    assert [i for i, _ in sparse] == [7]


def test_documents_are_read_back_by_offset(small_corpus: Path) -> None:
    index = BM25Index.build(small_corpus)
    assert [d.id for d in index.documents([3, 0])] == ["paris", "cat"]
    assert index.documents([3])[0].text == "Paris is the capital of France."


def test_cache_is_written_then_reused(small_corpus: Path, _cache_dir: Path) -> None:
    first = BM25Index.load_or_build(small_corpus)
    assert not first.loaded_from_cache
    assert first.cache_file is not None and first.cache_file.parent == _cache_dir and first.cache_file.is_file()
    second = BM25Index.load_or_build(small_corpus)
    assert second.loaded_from_cache and second.cache_file == first.cache_file
    assert second.search("wolf dog", 5) == first.search("wolf dog", 5)
    assert list(_cache_dir.glob("*.tmp")) == []


def test_cache_key_depends_on_parameters(small_corpus: Path) -> None:
    a = BM25Index.load_or_build(small_corpus, k1=0.9, b=0.4)
    b = BM25Index.load_or_build(small_corpus, k1=1.2, b=0.75)
    assert a.cache_file != b.cache_file and not b.loaded_from_cache


def test_edited_corpus_is_rebuilt(small_corpus: Path) -> None:
    before = BM25Index.load_or_build(small_corpus)
    with small_corpus.open("a") as handle:
        handle.write(json.dumps({"id": "fox", "title": "Fox", "text": "The red fox is a wolf relative."}) + "\n")
    os.utime(small_corpus, ns=(1, 1))  # make sure the stat changes even on coarse clocks
    assert before.is_stale()
    after = BM25Index.load_or_build(small_corpus)
    assert not after.loaded_from_cache and after.cache_file != before.cache_file
    assert after.n_docs == before.n_docs + 1


def test_corrupt_cache_file_is_rebuilt(small_corpus: Path) -> None:
    first = BM25Index.load_or_build(small_corpus)
    assert first.cache_file is not None
    first.cache_file.write_bytes(b"not a zip file")
    again = BM25Index.load_or_build(small_corpus)
    assert not again.loaded_from_cache and again.search("wolf", 1) == first.search("wolf", 1)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": 1, "title": "a", "text": "b"}', "{not json"], "line 2: not valid JSON"),
        (['{"title": "a", "text": "b"}'], "missing 'id'"),
        (['{"id": 1, "title": "a"}'], "missing 'text'"),
        (["[1, 2]"], "expected a JSON object"),
        (['{"id": 1, "title": 3, "text": "b"}'], "must be strings"),
        (['{"id": 1, "text": "a"}', '{"id": 1, "text": "b"}'], "appears twice"),
        (["", "  "], "has no documents"),
    ],
    ids=["bad-json", "no-id", "no-text", "not-object", "title-not-str", "duplicate-id", "empty"],
)
def test_malformed_corpus_raises_corpus_error(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError, match=message) as info:
        BM25Index.load_or_build(path)
    assert isinstance(info.value, GemCoreError)


def test_missing_corpus_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nope.jsonl.*does not exist"):
        BM25Index.load_or_build(tmp_path / "nope.jsonl")


def test_search_r1_contents_format_is_accepted() -> None:
    doc = parse_document({"id": 7, "contents": '"Eiffel Tower"\nA tower in Paris.'})
    assert (doc.id, doc.title, doc.text) == ("7", "Eiffel Tower", "A tower in Paris.")


def test_demo_corpus_is_valid_and_sizable() -> None:
    docs = [d for _, d in iter_corpus(demo_corpus_path())]
    assert len(docs) >= 250
    assert len({d.id for d in docs}) == len(docs)
    assert all(d.title and d.text for d in docs)


@settings(max_examples=200, deadline=None)
@given(query=st.text(max_size=300), top_k=st.integers(min_value=0, max_value=50))
def test_any_query_gives_sorted_hits_without_raising(query: str, top_k: int) -> None:
    index = _demo_index()
    hits = index.search(query, top_k)
    assert len(hits) <= top_k
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert len({i for i, _ in hits}) == len(hits)


@functools.lru_cache(maxsize=1)
def _demo_index() -> BM25Index:
    return BM25Index.build(demo_corpus_path())
