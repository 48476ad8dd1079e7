"""Second-stage and representation variants of hybrid search, on the labelled set's dev and test
halves (the families `bench.relevance_variants` does not cover).

    uv run python -m bench.relevance_rerank [--second-local]

As in `bench.relevance_variants`, each query's vector and keyword candidate lists (40 rows each:
what `hybrid` fuses at limit 10) are fetched once through the real search service and each
variant ranks them in Python with the shipped fusion (RRF, tier weights, exact boost), changing
one thing:
- a real BM25 keyword list (Okapi: term frequency saturated by k1, normalised by the row's length
  with b), computed from each row's stored `tsv`, with and without the keyword tiers;
- a second stage over the fused candidates, from features at hand: the IDF-weighted share of the
  query's words a row holds, the share its section titles and path hold;
- question words and auxiliaries dropped from the query before it is embedded;
- contextual text for embedding: section titles, the path or a kv key's words before the chunk
  text (the stored content unchanged);
- a chunk scored by its best window of a few sentences (multi-vector max-sim), alone or averaged
  with the whole chunk's cosine, or with a length prior (long chunks' means crowd the vector
  list's top);
- `--second-local`: when the configured embedder is not `local` (the sentence-transformers
  extra), wordllama's list fused as a third list, and the two vector lists fused without keyword
  (`bench.relevance_embedders --with-wordllama` runs these rows alone with a wheel's embedder).
A variant that changes what is embedded re-embeds with the configured embedder and ranks the
corpus exactly; at 304 rows the HNSW list is exact, which the second row checks.

Tuning is done on dev; test is the held-out half (bench/corpus/split.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import load_settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.index.terms import search_terms
from app.llm.embeddings import Embedder, get_embedder, local_embedder
from app.logs import configure_logging
from app.search.queries import content_terms, keyword_terms
from app.search.term_stats import lexeme
from bench.corpus.build import CorpusChunk, build_corpus
from bench.corpus.queries import QUERIES
from bench.corpus.split import split
from bench.db import bench_database
from bench.relevance import load, relevant_ids
from bench.relevance_variants import (
    DEPTH,
    RRF_K,
    Case,
    Ranker,
    Texts,
    fetch_case,
    fuse,
    print_variants,
    rrf_list,
)

Ranked = list[int]  # chunk ids, best first
KeywordList = list[tuple[int, int, float]]  # (id, tier, score), best first
_TSV_ENTRY = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")
_WORD = re.compile(r"[^\W_]+")
QUESTION_WORDS = {
    "interrogatives": r"\b(how|what|which|why|where|when|who|whom|whose)\b",
    "interrogatives, auxiliaries, articles": (
        r"\b(how|what|which|why|where|when|who|whom|whose|do|does|did|is|are|was|were|am|i|we"
        r"|should|could|would|can|the|a|an|to|of)\b"
    ),
    "a leading question phrase": (
        r"^(how (do|does|did|is|are|should|much|long|fast)( (i|we|you))?|what (is|are|does|did)"
        r"( (the|we))?|which|why (did|was|is|does)|where (is|are|does|do)|who)\b"
    ),
}


def query_lexemes(query: str) -> list[str]:
    """The query's words as the english configuration stores them (stop words dropped)."""
    return list(dict.fromkeys(lexeme(t) for t in content_terms(keyword_terms(query))))


def lexeme_counts(tsv: str) -> dict[str, int]:
    """A `tsvector`'s text form as lexeme -> occurrences (positions listed)."""
    return {
        word.replace("''", "'"): len(positions.split(",")) if positions else 1
        for word, positions in _TSV_ENTRY.findall(tsv)
    }


class Bm25:
    """Okapi BM25 over the rows' stored lexemes, with the IDF the shipped ranking uses."""

    def __init__(self, counts: dict[int, dict[str, int]]) -> None:
        self.counts = counts
        self.lengths = {i: sum(c.values()) for i, c in counts.items()}
        self.mean_length = sum(self.lengths.values()) / len(counts)
        self.held_by = Counter(word for c in counts.values() for word in c)

    def idf(self, word: str) -> float:
        n, rows = self.held_by.get(word, 0), len(self.counts)
        return math.log(1 + (rows - n + 0.5) / (n + 0.5))

    def ranked(self, query: str, k1: float, b: float, tiers: bool) -> KeywordList:
        """(id, tier, score) of the best rows, best first: by score, or by tier then score."""
        words = query_lexemes(query)
        rows = []
        for chunk_id, counts in self.counts.items():
            held = [w for w in words if w in counts]
            if not held:
                continue
            norm = k1 * (1 - b + b * self.lengths[chunk_id] / self.mean_length)
            score = sum(self.idf(w) * counts[w] * (k1 + 1) / (counts[w] + norm) for w in held)
            tier = 2 if len(held) == len(words) else 1 if len(held) >= 2 else 0
            rows.append((chunk_id, tier, score))
        rows.sort(key=lambda row: (-row[1] if tiers else 0, -row[2], row[0]))
        return rows[:DEPTH]

    def coverage(self, query: str, chunk_id: int) -> float:
        """The IDF-weighted share of the query's words the row holds."""
        words = query_lexemes(query)
        total = sum(self.idf(w) for w in words)
        held = sum(self.idf(w) for w in words if w in self.counts[chunk_id])
        return held / total if total else 0.0


@dataclasses.dataclass(slots=True)
class Space:
    """Chunk ids in corpus order, and an embedder to re-embed chunks or queries with."""

    ids: list[int]
    chunks: dict[int, CorpusChunk]
    embedder: Embedder

    def exact(
        self,
        vectors: NDArray[np.float32],
        query: NDArray[np.float32],
        penalty: NDArray[np.float64] | float = 0.0,
    ) -> list[int]:
        score = vectors @ query - penalty
        return [self.ids[n] for n in np.argsort(-score, kind="stable")[:DEPTH]]

    def lists(self, cases: list[Case], document: Callable[[CorpusChunk], str]) -> dict[str, Ranked]:
        """Each query's exact vector list over the chunks embedded as `document` gives them."""
        vectors = self.embedder.embed_documents([document(self.chunks[i]) for i in self.ids])
        return {c.query: self.exact(vectors, self.embedder.embed_query(c.query)) for c in cases}

    def query_lists(self, cases: list[Case], rewrite: Callable[[str], str]) -> dict[str, Ranked]:
        vectors = self.embedder.embed_documents([self.chunks[i].content for i in self.ids])
        return {
            c.query: self.exact(vectors, self.embedder.embed_query(rewrite(c.query))) for c in cases
        }

    def length_prior_lists(self, cases: list[Case], weight: float) -> dict[str, Ranked]:
        """Each query's list when a chunk's cosine loses `weight` x the log of its length over
        the mean length (pivoted length normalisation, for the vector branch)."""
        vectors = self.embedder.embed_documents([self.chunks[i].content for i in self.ids])
        lengths = np.array([len(self.chunks[i].content.split()) for i in self.ids], dtype=float)
        prior = weight * np.log(lengths / lengths.mean())
        return {
            c.query: self.exact(vectors, self.embedder.embed_query(c.query), prior) for c in cases
        }

    def window_lists(self, cases: list[Case], words: int, share: float) -> dict[str, Ranked]:
        """Each query's list when a chunk scores `share` x its best window's cosine plus the rest
        x the whole chunk's cosine."""
        owner, pieces = [], []
        for n, chunk_id in enumerate(self.ids):
            for piece in windows(self.chunks[chunk_id].content, words):
                owner.append(n)
                pieces.append(piece)
        window_vectors = self.embedder.embed_documents(pieces)
        whole = self.embedder.embed_documents([self.chunks[i].content for i in self.ids])
        out = {}
        for case in cases:
            query = self.embedder.embed_query(case.query)
            best = np.full(len(self.ids), -1.0, dtype=np.float32)
            np.maximum.at(best, np.array(owner), window_vectors @ query)
            score = share * best + (1 - share) * (whole @ query)
            out[case.query] = [self.ids[n] for n in np.argsort(-score, kind="stable")[:DEPTH]]
        return out


def windows(content: str, words: int) -> list[str]:
    """The chunk's sentences and lines, joined into windows of at least `words` words."""
    out, current = [], []
    for piece in (p for p in _SENTENCE_END.split(content) if p.strip()):
        current.append(piece)
        if sum(len(p.split()) for p in current) >= words:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out or [content]


def contextual(kind: str) -> Callable[[CorpusChunk], str]:
    """The text embedded for a chunk: its content after some context, per `kind`."""

    def document(chunk: CorpusChunk) -> str:
        titles = chunk.headings.replace(" > ", ". ")
        if kind == "titles" and titles:
            return f"{titles}.\n{chunk.content}"
        if kind == "last title" and titles:
            return f"{chunk.headings.split(' > ')[-1]}.\n{chunk.content}"
        if kind == "path and titles":
            return " ".join(p for p in (chunk.path or "", titles) if p) + "\n" + chunk.content
        if kind == "kv key words" and chunk.source == "kv":
            return chunk.content.replace(".", " ", 1).replace("_", " ")
        return chunk.content

    return document


def without(pattern: str) -> Callable[[str], str]:
    compiled = re.compile(pattern, re.IGNORECASE)

    def rewrite(query: str) -> str:
        rest = compiled.sub(" ", query).strip()
        return rest if re.search(r"\w", rest) else query

    return rewrite


def with_vector(lists: dict[str, Ranked], texts: Texts) -> Ranker:
    """The shipped fusion with the vector list replaced."""
    return lambda c: fuse(dataclasses.replace(c, vector=[(i, 0.0) for i in lists[c.query]]), texts)


def vector_only(lists: dict[str, Ranked]) -> Ranker:
    return lambda c: lists[c.query]


def titles_and_path(chunk: CorpusChunk) -> set[str]:
    where = f"{chunk.headings} {chunk.path or ''}"
    return {lexeme(w.lower()) for w in _WORD.findall(f"{where} {search_terms(where)}")}


def rerank(texts: Texts, feature: Callable[[Case, int], float], weight: float) -> Ranker:
    """A second stage: each fused candidate gains `weight` x the feature, in units of a first
    rank in one more list."""

    def ranker(case: Case) -> list[int]:
        pool = dict.fromkeys([i for i, _ in case.vector] + [i for i, _, _ in case.keyword])
        extra = {i: weight * feature(case, i) / (RRF_K + 1) for i in pool}
        return fuse(case, texts, extra=extra)

    return ranker


def two_vectors(case: Case, local: Ranked) -> list[int]:
    """Plain RRF of the configured embedder's vector list and wordllama's."""
    scores = rrf_list([i for i, _ in case.vector], 1.0)
    for chunk_id, score in rrf_list(local, 1.0).items():
        scores[chunk_id] = scores.get(chunk_id, 0.0) + score
    return sorted(scores, key=lambda i: (-scores[i], i))


async def fetch(
    session: AsyncSession, embedder: Embedder, chunks: list[CorpusChunk]
) -> tuple[list[int], list[Case], dict[int, dict[str, int]]]:
    ids = await load(session, chunks, embedder)
    cases = []
    for (_, query, targets), half in zip(QUERIES, split(QUERIES), strict=True):
        wanted = relevant_ids(chunks, ids, targets)
        cases.append(await fetch_case(session, embedder, half, query, wanted))
    rows = await session.execute(text("SELECT id, tsv::text FROM memory_chunks"))
    return ids, cases, {i: lexeme_counts(tsv) for i, tsv in rows.all()}


def bm25_variants(cases: list[Case], bm25: Bm25, texts: Texts) -> list[tuple[str, Ranker]]:
    """BM25 as the keyword list, alone and fused, for a few (k1, b), with and without tiers."""

    def keyword(lists: dict[str, KeywordList]) -> Ranker:
        return lambda c: [i for i, _, _ in lists[c.query]]

    def hybrid(lists: dict[str, KeywordList]) -> Ranker:
        return lambda c: fuse(dataclasses.replace(c, keyword=lists[c.query]), texts)

    out: list[tuple[str, Ranker]] = []
    for k1, b in ((1.2, 0.75), (0.9, 0.4), (1.2, 1.0)):
        for tiers in (False, True):
            name = f"BM25 k1 {k1} b {b}{', in tiers' if tiers else ''}"
            lists = {c.query: bm25.ranked(c.query, k1, b, tiers) for c in cases}
            out += [(f"{name}: keyword", keyword(lists)), (f"{name}: hybrid", hybrid(lists))]
    return out


def second_local_variants(local: dict[str, Ranked], texts: Texts) -> list[tuple[str, Ranker]]:
    """wordllama's vector list fused with the configured embedder's lists."""

    def third_list(weight: float) -> Ranker:
        return lambda c: fuse(c, texts, extra=rrf_list(local[c.query], weight))

    out = [(f"hybrid + wordllama list x {w}", third_list(w)) for w in (0.25, 0.5, 1.0)]
    out.append(("two vector lists (RRF), no keyword", lambda c: two_vectors(c, local[c.query])))
    return out


async def run(
    second_local: bool, embedder: Embedder | None = None, lists_only: bool = False
) -> None:
    """`embedder` replaces the configured one (bench/relevance_embedders); `lists_only` keeps the
    rows that fuse the fetched lists and skips those that re-embed the corpus (slow with a
    transformer)."""
    settings = load_settings(_env_file=None)
    configure_logging("warning")
    embedder = embedder or get_embedder(settings)
    chunks = build_corpus(memory_tokens=200, transcript_tokens=200)
    with bench_database("agmem_relevance_rerank") as url:
        engine = make_async_engine(url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                ids, cases, counts = await fetch(session, embedder, chunks)
        finally:
            await engine.dispose()
    by_id = dict(zip(ids, chunks, strict=True))
    texts, bm25, space = Texts(by_id), Bm25(counts), Space(ids, by_id, embedder)
    print(f"embedder: {embedder.identity}")
    plain = space.lists(cases, contextual("content"))
    variants: list[tuple[str, Ranker]] = [
        ("hybrid as shipped (reproduction)", lambda c: fuse(c, texts)),
        ("hybrid, vector list ranked exactly in Python", with_vector(plain, texts)),
        ("keyword alone", lambda c: [i for i, _, _ in c.keyword]),
        ("vector alone", lambda c: [i for i, _ in c.vector]),
    ]
    if lists_only:
        if not embedder.identity.startswith("local:"):
            local = Space(ids, by_id, local_embedder()).lists(cases, contextual("content"))
            variants += second_local_variants(local, texts)
        print_variants(cases, variants)
        return
    variants += bm25_variants(cases, bm25, texts)
    for weight in (0.25, 0.5, 1.0):
        variants.append(
            (
                f"rerank: + IDF share of query words x {weight}",
                rerank(texts, lambda c, i: bm25.coverage(c.query, i), weight),
            )
        )
    meta = {i: titles_and_path(chunk) for i, chunk in by_id.items()}

    def meta_share(case: Case, chunk_id: int) -> float:
        words = query_lexemes(case.query)
        return sum(w in meta[chunk_id] for w in words) / len(words) if words else 0.0

    for weight in (0.25, 0.5):
        variants.append(
            (f"rerank: + share in titles/path x {weight}", rerank(texts, meta_share, weight))
        )
    for name, pattern in QUESTION_WORDS.items():
        rewritten = space.query_lists(cases, without(pattern))
        variants += [
            (f"query without {name}: vector", vector_only(rewritten)),
            (f"query without {name}: hybrid", with_vector(rewritten, texts)),
        ]
    for kind in ("titles", "last title", "path and titles", "kv key words"):
        embedded = space.lists(cases, contextual(kind))
        variants += [
            (f"embedded: {kind} + text: vector", vector_only(embedded)),
            (f"embedded: {kind} + text: hybrid", with_vector(embedded, texts)),
        ]
    for weight in (0.02, 0.05):
        shorter = space.length_prior_lists(cases, weight)
        variants += [
            (f"cosine - {weight} x log(length / mean): vector", vector_only(shorter)),
            (f"cosine - {weight} x log(length / mean): hybrid", with_vector(shorter, texts)),
        ]
    for words in (8, 20, 40):
        for share in (1.0, 0.5):
            windowed = space.window_lists(cases, words, share)
            name = f"best {words}-word window x {share}"
            variants += [
                (f"{name}: vector", vector_only(windowed)),
                (f"{name}: hybrid", with_vector(windowed, texts)),
            ]
    if second_local and not embedder.identity.startswith("local:"):
        local = Space(ids, by_id, local_embedder()).lists(cases, contextual("content"))
        variants += second_local_variants(local, texts)
    print_variants(cases, variants)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--second-local",
        action="store_true",
        help="with a non-local embedder configured, also fuse wordllama's list",
    )
    asyncio.run(run(parser.parse_args().second_local))


if __name__ == "__main__":
    main()
