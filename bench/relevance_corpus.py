"""Corpus-shaped variants of hybrid search, on the labelled set's dev and test halves: chunk
vectors smoothed with their neighbours, a linear map fit on the corpus itself (no labels), and
character-trigram lists (pg_trgm's measures, computed in Python).

    uv run python -m bench.relevance_corpus [--show-misses]

As in `bench.relevance_variants`, each query's vector and keyword lists (40 rows each, what
`hybrid` fuses at limit 10) are fetched once through the real search service, and each variant
ranks them in Python with the shipped fusion (`fuse`), changing one thing:
- **neighbourhood smoothing**: a file chunk's vector mixed with its neighbours' (the chunks
  before and after it in the same memory file or transcript) or with its file's centroid,
  `normalise(v + a * mix)`; the vector list is then the 40 rows nearest the query by exact
  cosine over all 304 rows (a = 0 reproduces the shipped list), used in place of the vector
  branch or fused as a third list at weight w. Rows outside files (observations, summaries, kv
  facts) keep their own vector. The keyword side's version of the same idea: a row in the
  keyword list passes `w / (60 + rank)` to its file neighbours. Most misses' targets are
  observations, not file chunks: a second version (`+obs`) treats the observations as one sequence
  in the order written (a task's steps are consecutive), neighbours being the one before and after.
- **self-supervised linear map**: W fit by ridge regression towards the identity,
  `min |XW - Y|^2 + l |W - I|^2`, on pairs taken from the indexed corpus alone: (a memory chunk's
  section titles, its body) and (a file chunk, the next chunk of the same file). wordllama's
  vector is a mean of token vectors, so a linear map of its pooled vector is the same map applied
  to its token table (up to the final normalisation). The query vector becomes
  `normalise(q + b * normalise(qW))`; the list is again exact cosine over the 304 rows.
- **character trigrams**, pg_trgm's measures computed in Python (the embedded server has no
  pg_trgm: its extension folder holds only plpgsql and vector): rows ranked by the share of the
  query's trigrams they hold, or by the sum over the query's content words of each word's best
  trigram similarity with a word of the row (morphology per word: `restarts` ~ `restarted`),
  fused as a third list at weight w.

`--show-misses` lists the queries the shipped fusion misses: each query word's row count, the
first target rank in every list, and the targets.

Tuning is done on dev; test is the held-out half (bench/corpus/split.py). The goal (issue #5):
hybrid R@10 at least 5 points above the best single branch on both halves, that is dev >= 79/81
and test >= 77/79 with the branches unchanged (keyword 74/81 and 73/79).
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections import defaultdict

import numpy as np
from numpy.typing import NDArray

from app.config import load_settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import Embedder, get_embedder, normalise
from app.logs import configure_logging
from app.search.queries import keyword_terms
from app.search.term_stats import lexeme
from bench.corpus.build import CorpusChunk, build_corpus
from bench.corpus.queries import QUERIES
from bench.corpus.split import split
from bench.db import bench_database
from bench.expansion_words import query_words
from bench.relevance import load, relevant_ids
from bench.relevance_variants import (
    DEPTH,
    RRF_K,
    Case,
    Ranker,
    Texts,
    fetch_case,
    fuse,
    oracle,
    print_variants,
    rrf_list,
)

Vectors = NDArray[np.float32]

SMOOTHING = (0.1, 0.25, 0.5, 1.0)
WEIGHTS = (0.1, 0.25, 0.5, 1.0)
RIDGE = (1.0, 10.0, 100.0)
MAP_MIX = (0.25, 0.5, 1.0, 100.0)  # 100: the mapped query alone, nearly


class Space:
    """The corpus's chunk vectors (as stored: wordllama over the content) and its file order."""

    def __init__(
        self,
        embedder: Embedder,
        ids: list[int],
        chunks: list[CorpusChunk],
        *,
        observations: bool = False,
    ) -> None:
        self.ids = ids
        self.chunks = chunks
        self.vectors: Vectors = embedder.embed_documents([c.content for c in chunks])
        # Chunks of one file in file order (build_corpus emits them so): index positions. With
        # `observations`, the observations too, as one sequence in the order written (o01-o80:
        # a task's steps are consecutive, as a session's are in production).
        files: dict[str, list[int]] = defaultdict(list)
        for at, chunk in enumerate(chunks):
            if chunk.path is not None:
                files[chunk.path].append(at)
            elif observations and chunk.source == "observation":
                files["(observations)"].append(at)
        self.files = dict(files)
        self.neighbours: dict[int, list[int]] = {}
        self.file_of: dict[int, list[int]] = {}
        for members in self.files.values():
            for n, at in enumerate(members):
                self.neighbours[at] = members[max(0, n - 1) : n] + members[n + 1 : n + 2]
                self.file_of[at] = members

    def smoothed(self, how: str, a: float) -> Vectors:
        """Each file chunk's vector plus `a` times its neighbours' mean or its file's centroid."""
        out = self.vectors.copy()
        for at in range(len(self.chunks)):
            if at not in self.file_of:
                continue
            others = self.neighbours[at] if how == "neighbours" else self.file_of[at]
            if others:
                mix = self.vectors[others].mean(axis=0)
                out[at] = self.vectors[at] + a * mix
        return normalise(out)

    def nearest(self, query: Vectors, table: Vectors) -> list[int]:
        similarity = table @ query
        return [self.ids[at] for at in np.argsort(-similarity, kind="stable")[:DEPTH]]

    def pairs(self, embedder: Embedder) -> tuple[Vectors, Vectors]:
        """(section titles, body) of memory chunks and (chunk, next chunk) of every file."""
        heads = [c for c in self.chunks if c.headings.strip()]
        x = [embedder.embed_documents([c.headings for c in heads])]
        y = [embedder.embed_documents([c.content for c in heads])]
        for members in self.files.values():
            for first, second in zip(members, members[1:], strict=False):
                x.append(self.vectors[first : first + 1])
                y.append(self.vectors[second : second + 1])
        return np.vstack(x), np.vstack(y)


def ridge_to_identity(x: Vectors, y: Vectors, strength: float) -> Vectors:
    """argmin_W |XW - Y|^2 + strength |W - I|^2: the identity, bent towards the pairs."""
    dims = x.shape[1]
    eye = np.eye(dims, dtype=np.float64)
    left = x.T.astype(np.float64) @ x + strength * eye
    right = x.T.astype(np.float64) @ y + strength * eye
    solved: Vectors = np.linalg.solve(left, right).astype(np.float32)
    return solved


_ALNUM = re.compile(r"[^\W_]+")


def trigrams(word: str) -> frozenset[str]:
    """pg_trgm's trigrams of one word: lower-cased, two spaces before and one after."""
    padded = f"  {word.lower()} "
    return frozenset(padded[n : n + 3] for n in range(len(padded) - 2))


class Trigrams:
    """pg_trgm's measures in Python (the embedded server ships no pg_trgm: only plpgsql and
    vector are in its extension folder): each row's words' trigram sets."""

    def __init__(self, ids: list[int], chunks: list[CorpusChunk]) -> None:
        self.ids = ids
        self.words = [{w.lower() for w in _ALNUM.findall(c.content)} for c in chunks]
        self.vocabulary = {w: trigrams(w) for held in self.words for w in held}
        self.held = [frozenset().union(*(self.vocabulary[w] for w in ws)) for ws in self.words]

    def whole(self, query: str) -> list[int]:
        """The share of the query's trigrams the row holds (word_similarity without its
        contiguity: an upper bound of it)."""
        wanted = frozenset().union(*(trigrams(w) for w in _ALNUM.findall(query)))
        scores = [len(wanted & held) / max(1, len(wanted)) for held in self.held]
        return self._top(scores)

    def per_word(self, query: str) -> list[int]:
        """Summed over the query's content words: each word's best pg_trgm `similarity`
        (trigram Jaccard) with a word of the row, counted from 0.3 (pg_trgm's threshold)."""
        scores = [0.0] * len(self.words)
        for word in query_words(query):
            grams = trigrams(word)
            near = {}
            for other, its in self.vocabulary.items():
                similarity = len(grams & its) / len(grams | its)
                if similarity >= 0.3:
                    near[other] = similarity
            for at, held in enumerate(self.words):
                scores[at] += max((near[w] for w in held & near.keys()), default=0.0)
        return self._top(scores)

    def _top(self, scores: list[float]) -> list[int]:
        order = sorted(range(len(scores)), key=lambda at: (-scores[at], self.ids[at]))
        return [self.ids[at] for at in order[:DEPTH] if scores[at] > 0]


async def run(args: argparse.Namespace) -> None:
    settings = load_settings(_env_file=None)
    configure_logging("warning")
    embedder = get_embedder(settings)
    chunks = build_corpus(memory_tokens=200, transcript_tokens=200)
    halves = split(QUERIES)
    with bench_database("agmem_relevance_corpus") as url:
        engine = make_async_engine(url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                ids = await load(session, chunks, embedder)
                texts = Texts(dict(zip(ids, chunks, strict=True)))
                space = Space(embedder, ids, chunks)
                with_observations = Space(embedder, ids, chunks, observations=True)
                grams = Trigrams(ids, chunks)
                tables = {"exact cosine (a 0)": space.vectors}
                for how in ("neighbours", "file centroid"):
                    for a in SMOOTHING:
                        tables[f"{how} a {a}"] = space.smoothed(how, a)
                for a in SMOOTHING:
                    tables[f"neighbours+obs a {a}"] = with_observations.smoothed("neighbours", a)
                x, y = space.pairs(embedder)
                maps = {strength: ridge_to_identity(x, y, strength) for strength in RIDGE}
                print(
                    f"corpus: {len(chunks)} chunks, {len(space.files)} files; linear map fit on "
                    f"{len(x)} pairs (titles/body and adjacent chunks)"
                )
                cases = []
                for (_, query, targets), half in zip(QUERIES, halves, strict=True):
                    case = await fetch_case(
                        session, embedder, half, query, relevant_ids(chunks, ids, targets)
                    )
                    q = embedder.embed_query(query)
                    for name, table in tables.items():
                        case.extra[name] = space.nearest(q, table)
                    for strength, w in maps.items():
                        mapped = normalise((q @ w)[None, :])[0]
                        for b in MAP_MIX:
                            blended = normalise((q + b * mapped)[None, :])[0]
                            case.extra[f"map l {strength:g} b {b:g}"] = space.nearest(
                                blended, space.vectors
                            )
                    case.extra["trigram query"] = grams.whole(query)
                    case.extra["trigram words"] = grams.per_word(query)
                    cases.append(case)
        finally:
            await engine.dispose()
    report(cases, texts, space, with_observations, args.show_misses)


def replace_vector(texts: Texts, name: str) -> Ranker:
    """The list `name` in place of the vector branch (its cosine is not used by `fuse`)."""

    def ranker(case: Case) -> list[int]:
        swapped = Case(
            case.half,
            case.query,
            case.wanted,
            case.phrases,
            [(i, 0.0) for i in case.extra[name]],
            case.keyword,
        )
        return fuse(swapped, texts)

    return ranker


def third(texts: Texts, name: str, weight: float) -> Ranker:
    return lambda case: fuse(case, texts, extra=rrf_list(case.extra[name], weight))


def keyword_neighbours(texts: Texts, space: Space, weight: float) -> Ranker:
    """A keyword-list row passes `weight / (60 + rank)` to its file neighbours."""
    at_of = {chunk_id: at for at, chunk_id in enumerate(space.ids)}

    def ranker(case: Case) -> list[int]:
        extra: dict[int, float] = {}
        for rank, (chunk_id, _, _) in enumerate(case.keyword, start=1):
            for other in space.neighbours.get(at_of[chunk_id], []):
                neighbour = space.ids[other]
                extra[neighbour] = extra.get(neighbour, 0.0) + weight / (RRF_K + rank)
        return fuse(case, texts, extra=extra)

    return ranker


def alone(name: str) -> Ranker:
    return lambda case: case.extra[name]


def changes(cases: list[Case], texts: Texts, ranker: Ranker) -> str:
    """The queries a variant finds that the shipped fusion misses (+) and the reverse (-)."""
    out = []
    for case in cases:
        before = bool(case.wanted & set(fuse(case, texts)[:10]))
        after = bool(case.wanted & set(ranker(case)[:10]))
        if before != after:
            out.append(f"{'+' if after else '-'}{case.half} `{case.query}`")
    return "; ".join(out)


def report(
    cases: list[Case], texts: Texts, space: Space, with_observations: Space, show_misses: bool
) -> None:
    rows = [
        {lexeme(t) for t in keyword_terms(texts.chunks[i].content) if t.isalpha()}
        for i in space.ids
    ]
    variants: list[tuple[str, Ranker]] = [
        ("hybrid as shipped (reproduction)", lambda c: fuse(c, texts)),
        ("keyword alone", lambda c: [i for i, _, _ in c.keyword]),
        ("vector alone", lambda c: [i for i, _ in c.vector]),
        ("oracle over both lists", oracle),
    ]
    names = list(cases[0].extra)
    smoothing = [n for n in names if n.startswith(("exact", "neighbours", "file"))]
    maps = [n for n in names if n.startswith("map")]
    trigrams = [n for n in names if n.startswith("trigram")]
    for name in smoothing + maps:
        variants.append((f"{name}: alone", alone(name)))
        variants.append((f"{name}: as the vector branch", replace_vector(texts, name)))
    for name in smoothing[1:] + maps + trigrams:
        variants += [(f"{name}: third list w {w}", third(texts, name, w)) for w in WEIGHTS]
    for name in trigrams:
        variants.append((f"{name}: alone", alone(name)))
    variants += [
        (f"keyword rows lift file neighbours, w {w}", keyword_neighbours(texts, space, w))
        for w in WEIGHTS
    ] + [
        (
            f"keyword rows lift file/observation neighbours, w {w}",
            keyword_neighbours(texts, with_observations, w),
        )
        for w in WEIGHTS
    ]
    print_variants(cases, variants)
    print("\nwhat each variant changes: queries found (+) or lost (-) against the shipped fusion")
    for name, ranker in variants[4:]:
        if "alone" not in name and (moved := changes(cases, texts, ranker)):
            print(f"  {name}: {moved}")
    if not show_misses:
        return
    print("\nqueries the shipped fusion misses: first target rank in each list (- none)")
    for case in cases:
        if case.wanted & set(fuse(case, texts)[:10]):
            continue
        held = {word: sum(lexeme(word) in row for row in rows) for word in query_words(case.query)}
        print(f"  [{case.half}] {case.query}  (rows holding each query word: {held})")
        lists: dict[str, list[int]] = {
            "vector": [i for i, _ in case.vector],
            "keyword": [i for i, _, _ in case.keyword],
            **case.extra,
        }
        for name, found in lists.items():
            rank = next((n for n, i in enumerate(found, start=1) if i in case.wanted), "-")
            if rank != "-" or name in ("vector", "keyword"):
                print(f"      {name:<40} {rank}")
        for chunk_id in sorted(case.wanted):
            chunk = texts.chunks[chunk_id]
            print(f"      target {chunk.key}: {' '.join(chunk.content.split())[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show-misses", action="store_true", help="print each missed query's ranks and targets"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
