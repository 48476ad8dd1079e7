"""Fusion and query-expansion variants of hybrid search, on the labelled set's dev and test halves.

    uv run python -m bench.relevance_variants

Each query's two candidate lists (vector and keyword, 40 rows each: what `hybrid` fuses at limit
10) are fetched once through the real search service, and each variant ranks them in Python; an
expansion variant also fetches a third list, the keyword search of its expansion words alone,
fused at a low weight. The first row re-implements the shipped fusion (RRF, tier weights, exact
boost) and must reproduce `bench.relevance`'s hybrid figures, so every other row differs from it
only by its variant. The corpus vocabulary (for the corpus-word variants) is taken from the chunk
texts in Python: a production version would need a vocabulary table kept by the writers.

Tuning is done on dev; test is the held-out half (bench/corpus/split.py). `oracle` counts a query
found when either list holds a target anywhere in its 40 rows: no fusion of these lists can do
better.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import load_settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import Embedder, get_embedder
from app.logs import configure_logging
from app.search.queries import ENGLISH_STOP_WORDS, exact_phrases
from app.search.schemas import SearchMode, SearchRequest
from app.search.service import SearchTuning, search
from app.search.term_stats import lexeme
from bench.corpus.build import CorpusChunk, build_corpus
from bench.corpus.queries import QUERIES
from bench.corpus.split import split
from bench.db import bench_database
from bench.expansion_words import Expanders, query_words
from bench.relevance import load, relevant_ids

DEPTH = 40  # each branch's candidates at limit 10 (AGMEM_SEARCH_MIN_CANDIDATES)
RRF_K = 60.0
TIER_WEIGHTS = {2: 1.0, 1: 0.5, 0: 0.1}
_WORD = re.compile(r"[a-z]{3,}")
_TOKEN = re.compile(r"[^\W_]+")


@dataclass(slots=True)
class Case:
    """One query's candidate lists and labels."""

    half: str
    query: str
    wanted: set[int]
    phrases: list[str]
    vector: list[tuple[int, float]]  # (id, cosine similarity), best first
    keyword: list[tuple[int, int, float]]  # (id, tier, rank score), best first
    extra: dict[str, list[int]] = field(default_factory=dict)  # expansion lists by variant


Ranker = Callable[[Case], list[int]]


def tier_of(score: float, raw: float) -> int:
    """The keyword tier from keyword mode's score, `tier + rank / best rank` (best is 1)."""
    whole = math.floor(score + 1e-9)
    if abs(score - whole) < 1e-9 and raw > 0:
        return whole - 1
    return whole


class Texts:
    """Chunk texts by id, with per-chunk word positions for the proximity variant."""

    def __init__(self, chunks: dict[int, CorpusChunk]) -> None:
        self.chunks = chunks
        self._positions: dict[int, dict[str, set[int]]] = {}

    def held(self, case: Case, chunk_id: int) -> float:
        """The share of the query's exact phrases the chunk holds (the shipped exact boost)."""
        if not case.phrases:
            return 0.0
        chunk = self.chunks[chunk_id]
        content, path = chunk.content.lower(), (chunk.path or "").lower()
        return sum(p in content or p in path for p in case.phrases) / len(case.phrases)

    def positions(self, chunk_id: int) -> dict[str, set[int]]:
        if chunk_id not in self._positions:
            found: dict[str, set[int]] = {}
            words = [w.lower() for w in _TOKEN.findall(self.chunks[chunk_id].content)]
            for at, word in enumerate(words):
                if word not in ENGLISH_STOP_WORDS:
                    found.setdefault(lexeme(word), set()).add(at)
            self._positions[chunk_id] = found
        return self._positions[chunk_id]


def fuse(
    case: Case,
    texts: Texts,
    *,
    vector_weight: float = 1.0,
    keyword_weight: float = 1.0,
    tiers: dict[int, float] = TIER_WEIGHTS,
    extra: dict[int, float] | None = None,
) -> list[int]:
    """The shipped hybrid score (RRF with tier weights and the exact boost), plus `extra`."""
    scores: dict[int, float] = {}
    for rank, (chunk_id, _) in enumerate(case.vector, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + vector_weight / (RRF_K + rank)
    for rank, (chunk_id, tier, _) in enumerate(case.keyword, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + keyword_weight * tiers[tier] / (RRF_K + rank)
    for chunk_id, bonus in (extra or {}).items():
        scores[chunk_id] = scores.get(chunk_id, 0.0) + bonus
    for chunk_id in scores:
        scores[chunk_id] += texts.held(case, chunk_id) / (RRF_K + 1)
    return [i for i, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def rrf_list(ids: list[int], weight: float) -> dict[int, float]:
    return {chunk_id: weight / (RRF_K + rank) for rank, chunk_id in enumerate(ids, start=1)}


def dbsf(case: Case, texts: Texts, keep_tiers: bool) -> list[int]:
    """Distribution-based score fusion: each branch's scores scaled by its mean +- 3 sd."""
    scores: dict[int, float] = {}

    def add(items: list[tuple[int, float, float]]) -> None:
        if not items:
            return
        values = [value for _, value, _ in items]
        mean, sd = statistics.mean(values), statistics.pstdev(values) or 1.0
        for chunk_id, value, weight in items:
            scaled = (value - mean + 3 * sd) / (6 * sd)
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight * scaled

    add([(i, s, 1.0) for i, s in case.vector])
    add([(i, s, TIER_WEIGHTS[t] if keep_tiers else 1.0) for i, t, s in case.keyword])
    for chunk_id in scores:
        scores[chunk_id] += 0.3 * texts.held(case, chunk_id)
    return [i for i, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def comb_mnz(case: Case, texts: Texts) -> list[int]:
    """RRF times the number of lists holding the row (CombMNZ over ranks)."""
    both = {i for i, _ in case.vector} & {i for i, _, _ in case.keyword}
    scores: dict[int, float] = {}
    for rank, (chunk_id, _) in enumerate(case.vector, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + 1 / (RRF_K + rank)
    for rank, (chunk_id, tier, _) in enumerate(case.keyword, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + TIER_WEIGHTS[tier] / (RRF_K + rank)
    for chunk_id in scores:
        scores[chunk_id] = scores[chunk_id] * (2 if chunk_id in both else 1) + texts.held(
            case, chunk_id
        ) / (RRF_K + 1)
    return [i for i, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def agreement(case: Case, texts: Texts, bonus: float) -> list[int]:
    """A row in both lists gains `bonus` x its vector RRF term once more."""
    keyword_ids = {i for i, _, _ in case.keyword}
    extra = {
        chunk_id: bonus / (RRF_K + rank)
        for rank, (chunk_id, _) in enumerate(case.vector, start=1)
        if chunk_id in keyword_ids
    }
    return fuse(case, texts, extra=extra)


def top_z(values: list[float]) -> float:
    """How far the best score stands above its list (z-score of the first), 0 when undefined."""
    if len(values) < 3:
        return 0.0
    sd = statistics.pstdev(values)
    return (values[0] - statistics.mean(values)) / sd if sd > 0 else 0.0


def confidence(case: Case, texts: Texts, medians: tuple[float, float]) -> list[int]:
    """Each branch weighted by how clearly its first hit stands out, relative to the median."""
    z_vector = top_z([s for _, s in case.vector]) / medians[0]
    z_keyword = top_z([s for _, _, s in case.keyword]) / medians[1]
    return fuse(
        case,
        texts,
        vector_weight=min(4.0, max(0.25, z_vector)) if z_vector > 0 else 1.0,
        keyword_weight=min(4.0, max(0.25, z_keyword)) if z_keyword > 0 else 1.0,
    )


def query_bigrams(query: str) -> list[tuple[str, str, int]]:
    """Consecutive content words of the query as lexeme pairs with their distance."""
    pairs, previous = [], None
    for at, word in enumerate(w.lower() for w in _TOKEN.findall(query)):
        if word in ENGLISH_STOP_WORDS:
            continue
        if previous is not None:
            pairs.append((lexeme(previous[1]), lexeme(word), at - previous[0]))
        previous = (at, word)
    return pairs


def proximity(case: Case, texts: Texts, weight: float) -> list[int]:
    """A sequential-dependence-style boost: the share of the query's adjacent word pairs the row
    holds at the same distance, as a share of a first rank in one more list."""
    pairs = query_bigrams(case.query)
    extra: dict[int, float] = {}
    if pairs:
        for chunk_id in {i for i, _ in case.vector} | {i for i, _, _ in case.keyword}:
            where = texts.positions(chunk_id)
            hit = sum(
                any(at + gap in where.get(b, ()) for at in where.get(a, ())) for a, b, gap in pairs
            )
            extra[chunk_id] = weight / (RRF_K + 1) * hit / len(pairs)
    return fuse(case, texts, extra=extra)


async def ranked(
    session: AsyncSession, embedder: Embedder, query: str, mode: SearchMode
) -> list[tuple[int, float, float | None]]:
    """A branch's candidates at hybrid's depth: keyword mode at limit 40 reads 160 candidates,
    and its first 40 are the 40 hybrid ranks (tiers are read best first)."""
    response = await search(
        session,
        request=SearchRequest(query=query, project_path="/bench", limit=DEPTH, mode=mode),
        embedder=embedder,
        tuning=SearchTuning(),
        snippets=False,
    )
    return [(r.id, r.score, r.keyword_score) for r in response.results]


async def fetch_case(
    session: AsyncSession, embedder: Embedder, half: str, query: str, wanted: set[int]
) -> Case:
    """One query's two candidate lists through the real search service."""
    vector = await ranked(session, embedder, query, "vector")
    keyword = await ranked(session, embedder, query, "keyword")
    return Case(
        half,
        query,
        wanted,
        exact_phrases(query),
        [(i, s) for i, s, _ in vector[:DEPTH]],
        [(i, tier_of(s, k or 0.0), k or 0.0) for i, s, k in keyword[:DEPTH]],
    )


def evaluate(cases: list[Case], ranker: Ranker) -> dict[str, tuple[int, int, float]]:
    """Per half: queries found in the top 10, queries, MRR within the top 10."""
    out = {}
    for half in ("dev", "test"):
        chosen = [case for case in cases if case.half == half]
        found, reciprocal = 0, 0.0
        for case in chosen:
            top = ranker(case)[:10]
            rank = next((n for n, i in enumerate(top, start=1) if i in case.wanted), None)
            if rank is not None:
                found += 1
                reciprocal += 1 / rank
        out[half] = (found, len(chosen), reciprocal / len(chosen))
    return out


def print_variants(cases: list[Case], variants: list[tuple[str, Ranker]]) -> None:
    """One line per variant: R@10 (found / queries) and MRR on dev, then on test."""
    print(
        f"\n{'variant (dev tunes, test is held out)':<52}{'dev R@10':>14}{'MRR':>7}"
        f"{'test R@10':>16}{'MRR':>7}"
    )
    for name, ranker in variants:
        scores = evaluate(cases, ranker)
        cells = ""
        for half in ("dev", "test"):
            found, total, mrr = scores[half]
            cells += f"{found / total:>8.3f} {found:>2}/{total}{mrr:>7.3f}"
            cells += "  " if half == "dev" else ""
        print(f"{name:<52}{cells}")


def oracle(case: Case) -> list[int]:
    pool = [i for i, _ in case.vector] + [i for i, _, _ in case.keyword]
    hits = [i for i in pool if i in case.wanted]
    return hits[:1] + [i for i in pool if i not in case.wanted]


async def run() -> None:
    settings = load_settings(_env_file=None)
    configure_logging("warning")
    embedder = get_embedder(settings)
    chunks = build_corpus(memory_tokens=200, transcript_tokens=200)
    halves = split(QUERIES)
    expanders = Expanders.build(embedder, chunks)
    with bench_database("agmem_relevance_variants") as url:
        engine = make_async_engine(url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                ids = await load(session, chunks, embedder)
                texts = Texts(dict(zip(ids, chunks, strict=True)))
                cases = []
                for (_, query, targets), half in zip(QUERIES, halves, strict=True):
                    case = await fetch_case(
                        session, embedder, half, query, relevant_ids(chunks, ids, targets)
                    )
                    top_texts = [texts.chunks[i].content for i, _ in case.vector[:5]]
                    expansions = expanders.words(query, top_texts)
                    for name, words in expansions.items():
                        found = (
                            await ranked(session, embedder, " ".join(words), "keyword")
                            if words
                            else []
                        )
                        case.extra[name] = [i for i, _, _ in found[:DEPTH]]
                    cases.append(case)
        finally:
            await engine.dispose()
    space = Space(
        embedder,
        ids,
        embedder.embed_documents([chunk.content for chunk in chunks]),
        {case.query: embedder.embed_query(case.query) for case in cases},
    )
    report(cases, texts, space)


def report(cases: list[Case], texts: Texts, space: Space) -> None:
    medians = (
        statistics.median(z for c in cases if (z := top_z([s for _, s in c.vector])) > 0),
        statistics.median(z for c in cases if (z := top_z([s for _, _, s in c.keyword])) > 0),
    )
    variants: list[tuple[str, Ranker]] = [
        ("hybrid as shipped (reproduction)", lambda c: fuse(c, texts)),
        ("keyword alone", lambda c: [i for i, _, _ in c.keyword]),
        ("vector alone", lambda c: [i for i, _ in c.vector]),
        ("oracle over both lists", oracle),
        ("DBSF score fusion, tier weights", lambda c: dbsf(c, texts, True)),
        ("DBSF score fusion, no tier weights", lambda c: dbsf(c, texts, False)),
        ("CombMNZ over ranks", lambda c: comb_mnz(c, texts)),
        ("agreement bonus 0.5", lambda c: agreement(c, texts, 0.5)),
        ("agreement bonus 1", lambda c: agreement(c, texts, 1.0)),
        ("confidence weights (top-1 z)", lambda c: confidence(c, texts, medians)),
        ("keyword 0.5 unless a tier-2 row", lambda c: keyword_unless_all(c, texts)),
        ("tier as rank offset 0/20/1000", lambda c: rank_shift(c, texts, (20, 1000))),
        ("tier as rank offset 0/20/40", lambda c: rank_shift(c, texts, (20, 40))),
        ("vector rows 0.15 below the first at 0.5", lambda c: vector_tiers(c, texts, 0.15, 0.5)),
        ("vector rows 0.2 below the first at 0.5", lambda c: vector_tiers(c, texts, 0.2, 0.5)),
        ("word-pair proximity boost 0.5", lambda c: proximity(c, texts, 0.5)),
        ("word-pair proximity boost 1", lambda c: proximity(c, texts, 1.0)),
        ("query centred, 0.5 x mean (exact re-rank)", lambda c: centred(c, texts, space, 0.5)),
        ("query centred, 1 x mean (exact re-rank)", lambda c: centred(c, texts, space, 1.0)),
        ("soft word match list, w 0.25", lambda c: soft_match(c, texts, space, 0.25)),
        ("soft word match list, w 0.5", lambda c: soft_match(c, texts, space, 0.5)),
        ("vector Rocchio from fused top 3, 0.5", lambda c: rocchio(c, texts, space, 3, 0.5)),
        ("vector Rocchio from fused top 3, 1", lambda c: rocchio(c, texts, space, 3, 1.0)),
        ("vector Rocchio from fused top 5, 0.5", lambda c: rocchio(c, texts, space, 5, 0.5)),
    ]
    for name in cases[0].extra:
        for weight in (0.1, 0.25, 0.5):
            variants.append((f"{name}, w {weight}", expansion(texts, name, weight)))
    print_variants(cases, variants)
    print("\ndev queries the shipped fusion misses: first target rank in each list (- none)")
    for case in cases:
        top = fuse(case, texts)[:10]
        if case.half != "dev" or case.wanted & set(top):
            continue
        lists = {
            "vector": [i for i, _ in case.vector],
            "keyword": [i for i, _, _ in case.keyword],
            **case.extra,
        }
        ranks = [
            str(next((n for n, i in enumerate(ids, start=1) if i in case.wanted), "-"))
            for ids in lists.values()
        ]
        where = ", ".join(f"{name} {rank}" for name, rank in zip(lists, ranks, strict=True))
        print(f"  {case.query}: {where}")


def centred(case: Case, texts: Texts, space: Space, weight: float) -> list[int]:
    """The vector list re-ranked exactly with the query minus `weight` x the corpus's mean vector
    (a hub-reduction: long chunks' means lean towards one common direction)."""
    query = space.queries[case.query] - weight * space.mean
    similarity = space.vectors @ query / (float(np.linalg.norm(query)) or 1.0)
    order = np.argsort(-similarity)[:DEPTH]
    moved = Case(case.half, case.query, case.wanted, case.phrases, [], case.keyword)
    moved.vector = [(space.ids[i], float(similarity[i])) for i in order]
    return fuse(moved, texts)


def rocchio(case: Case, texts: Texts, space: Space, top: int, weight: float) -> list[int]:
    """Vector pseudo-relevance feedback: the query vector plus `weight` x the mean of the shipped
    fusion's first `top` rows' vectors, searched again exactly, then fused as shipped (a second
    vector scan in production)."""
    first = fuse(case, texts)[:top]
    rows = {chunk_id: n for n, chunk_id in enumerate(space.ids)}
    centroid = space.vectors[[rows[i] for i in first]].mean(axis=0) if first else 0.0
    query = space.queries[case.query] + weight * centroid
    similarity = space.vectors @ query / (float(np.linalg.norm(query)) or 1.0)
    order = np.argsort(-similarity)[:DEPTH]
    moved = Case(case.half, case.query, case.wanted, case.phrases, [], case.keyword)
    moved.vector = [(space.ids[i], float(similarity[i])) for i in order]
    return fuse(moved, texts)


def soft_match(case: Case, texts: Texts, space: Space, weight: float) -> list[int]:
    """A third list: the fused candidates ordered by the mean over the query's words of their
    best wordllama cosine with any word of the row (exact matches left to the keyword branch),
    less a floor of 0.45 (late interaction with static word vectors)."""
    terms = query_words(case.query)
    if not terms:
        return fuse(case, texts)
    query = space.word_vectors(terms)
    scored = {}
    for chunk_id in {i for i, _ in case.vector} | {i for i, _, _ in case.keyword}:
        words = sorted(
            set(_WORD.findall(texts.chunks[chunk_id].content.lower())) - ENGLISH_STOP_WORDS
        )
        if words:
            best = (query @ space.word_vectors(words).T).max(axis=1)
            best = np.where(best >= 0.999, 0.0, best)
            scored[chunk_id] = float(np.clip(best - 0.45, 0.0, None).mean())
    order = [i for i, s in sorted(scored.items(), key=lambda item: -item[1]) if s > 0]
    return fuse(case, texts, extra=rrf_list(order, weight))


@dataclass(slots=True)
class Space:
    """The corpus's vectors, for the variants that re-rank the vector branch in Python."""

    embedder: Embedder
    ids: list[int]
    vectors: NDArray[np.float32]
    queries: dict[str, NDArray[np.float32]]
    mean: NDArray[np.float32] = field(init=False)
    _words: dict[str, NDArray[np.float32]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mean = self.vectors.mean(axis=0)

    def word_vectors(self, words: list[str]) -> NDArray[np.float32]:
        new = [w for w in words if w not in self._words]
        if new:
            self._words.update(zip(new, self.embedder.embed_documents(new), strict=True))
        return np.array([self._words[w] for w in words])


def rank_shift(case: Case, texts: Texts, shifts: tuple[int, int]) -> list[int]:
    """The tier discount as a rank offset instead of a weight: a pair-tier row's keyword term is
    1 / (k + rank + shifts[0]), a single-word row's 1 / (k + rank + shifts[1]). A weight of 0.5
    puts every keyword-only pair row (at most 0.5 / 61) below every vector-only candidate (at
    least 1 / 100); an offset lets the best of them through."""
    scores: dict[int, float] = {}
    for rank, (chunk_id, _) in enumerate(case.vector, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + 1 / (RRF_K + rank)
    offset = {2: 0, 1: shifts[0], 0: shifts[1]}
    for rank, (chunk_id, tier, _) in enumerate(case.keyword, start=1):
        scores[chunk_id] = scores.get(chunk_id, 0.0) + 1 / (RRF_K + rank + offset[tier])
    for chunk_id in scores:
        scores[chunk_id] += texts.held(case, chunk_id) / (RRF_K + 1)
    return [i for i, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def vector_tiers(case: Case, texts: Texts, delta: float, weight: float) -> list[int]:
    """Vector candidates more than `delta` of cosine below the first count at `weight`."""
    best = case.vector[0][1] if case.vector else 0.0
    extra = {
        chunk_id: (weight - 1) / (RRF_K + rank)
        for rank, (chunk_id, similarity) in enumerate(case.vector, start=1)
        if similarity < best - delta
    }
    return fuse(case, texts, extra=extra)


def expansion(texts: Texts, name: str, weight: float) -> Ranker:
    """The shipped fusion plus the expansion list `name` at `weight`."""
    return lambda case: fuse(case, texts, extra=rrf_list(case.extra[name], weight))


def keyword_unless_all(case: Case, texts: Texts) -> list[int]:
    """The keyword list at half weight unless it holds a row with every query word."""
    best = max((tier for _, tier, _ in case.keyword), default=0)
    return fuse(case, texts, keyword_weight=1.0 if best == 2 else 0.5)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    asyncio.run(run())


if __name__ == "__main__":
    main()
