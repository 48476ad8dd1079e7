"""Search quality on a labelled set: recall@5, recall@10 and MRR per mode, in one run.

    uv run python -m bench.relevance [--sweep] [--misses] [--transcript-tokens N]
                                     [--memory-tokens N]

Loads the corpus of `bench/corpus` (real memory files and transcripts from the shared testdata,
plus written observations, summaries and kv facts) into a throwaway database, embeds it with the
configured embedder (offline `local` by default), and runs every query of `bench/corpus/queries.py`
through the real search service in each mode, and reports each mode on the dev half, the test
half and all queries (`bench/corpus/split.py`). Tuning is done on dev only; the test half is the
held-out figure. `--sweep` also tries other fusion settings, `--misses` lists what hybrid misses
on dev.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import load_settings
from app.context.builder import RELEVANT_LIMIT
from app.db.engine import make_async_engine, make_sessionmaker
from app.index.embedding import embed_pending_chunks
from app.index.terms import index_terms
from app.index.writer import content_hash
from app.llm.embeddings import Embedder, get_embedder
from app.logs import configure_logging
from app.search.schemas import SearchMode, SearchRequest
from app.search.service import SearchTuning, search
from bench.corpus.build import CorpusChunk, build_corpus
from bench.corpus.queries import QUERIES
from bench.corpus.split import split
from bench.corpus.unrelated import UNRELATED
from bench.db import bench_database

MODES: tuple[SearchMode, ...] = ("keyword", "vector", "weighted", "hybrid")


@dataclass(slots=True)
class Scores:
    recall5: float
    recall10: float
    mrr: float
    top3: float
    by_kind: dict[str, float]
    kind_top3: dict[str, float]


# The rank of the first relevant result per query (None: not in the results), in QUERIES order.
Firsts = list[int | None]


def relevant_ids(chunks: list[CorpusChunk], ids: list[int], targets: list[str]) -> set[int]:
    found = set()
    for chunk, chunk_id in zip(chunks, ids, strict=True):
        for target in targets:
            if target.startswith("~"):
                if chunk.source in ("memory", "sessions") and target[1:] in chunk.content:
                    found.add(chunk_id)
            elif chunk.key == target:
                found.add(chunk_id)
    return found


async def load(session: AsyncSession, chunks: list[CorpusChunk], embedder: Embedder) -> list[int]:
    ids = []
    for chunk in chunks:
        row = await session.execute(
            text(
                "INSERT INTO memory_chunks (project_path, source, file_path, start_line, "
                "end_line, content, search_terms, hash) VALUES ('/bench', :source, :path, :start, "
                ":end, :content, :terms, :hash) RETURNING id"
            ),
            {
                "source": chunk.source,
                "path": chunk.path,
                "start": chunk.start_line,
                "end": chunk.end_line,
                "content": chunk.content,
                "terms": index_terms(chunk.content, chunk.headings),
                "hash": content_hash(chunk.content),
            },
        )
        ids.append(row.scalar_one())
    while (await embed_pending_chunks(session, embedder)).chunks:
        pass
    await session.execute(text("ANALYZE memory_chunks"))
    return ids


async def first_ranks(
    session: AsyncSession,
    embedder: Embedder,
    relevant: list[set[int]],
    mode: SearchMode,
    tuning: SearchTuning,
    limit: int = 10,
) -> Firsts:
    """Run every query; the rank of its first relevant result within `limit`."""
    firsts: Firsts = []
    for (_, query, _), wanted in zip(QUERIES, relevant, strict=True):
        response = await search(
            session,
            request=SearchRequest(query=query, project_path="/bench", limit=limit, mode=mode),
            embedder=embedder,
            tuning=tuning,
        )
        ranked = [result.id for result in response.results]
        firsts.append(next((rank for rank, i in enumerate(ranked, start=1) if i in wanted), None))
    return firsts


def score(firsts: Firsts, members: list[bool]) -> Scores:
    """Recall@5, recall@10, MRR (within the top 10) and top-3 share over the member queries."""
    chosen = [
        (kind, first if first is not None and first <= 10 else None)
        for (kind, _, _), first, member in zip(QUERIES, firsts, members, strict=True)
        if member
    ]
    n = len(chosen)
    kind_hits: dict[str, list[int]] = defaultdict(list)
    kind_top3: dict[str, list[int]] = defaultdict(list)
    for kind, first in chosen:
        kind_hits[kind].append(first is not None)
        kind_top3[kind].append(first is not None and first <= 3)
    return Scores(
        sum(f is not None and f <= 5 for _, f in chosen) / n,
        sum(f is not None for _, f in chosen) / n,
        sum(1 / f for _, f in chosen if f) / n,
        sum(f is not None and f <= 3 for _, f in chosen) / n,
        {kind: sum(v) / len(v) for kind, v in kind_hits.items()},
        {kind: sum(v) / len(v) for kind, v in kind_top3.items()},
    )


def gap_interval(
    hybrid: Firsts, single: Firsts, members: list[bool], rounds: int = 2000
) -> tuple[float, float]:
    """A 95% paired-bootstrap interval of hybrid R@10 minus the single branch's R@10 over the
    member queries (fixed seed): how far the gap could move with another sample of queries."""
    diffs = [
        (h is not None and h <= 10) - (b is not None and b <= 10)
        for h, b, member in zip(hybrid, single, members, strict=True)
        if member
    ]
    rng = random.Random(5)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def half_members() -> dict[str, list[bool]]:
    """Which queries each reported half holds: dev, test and all."""
    halves = split(QUERIES)
    return {
        "dev": [h == "dev" for h in halves],
        "test": [h == "test" for h in halves],
        "all": [True] * len(halves),
    }


def print_table(title: str, rows: Sequence[tuple[str, Scores]]) -> None:
    kinds = sorted(rows[0][1].by_kind)
    print(f"\n{title}")
    header = f"{'mode':<28}{'R@5':>7}{'R@10':>7}{'MRR':>7}{'top3':>7}  " + "".join(
        f"{kind[:6]:>8}" for kind in kinds
    )
    print(header)
    print("-" * len(header))
    for name, s in rows:
        print(
            f"{name:<28}{s.recall5:>7.3f}{s.recall10:>7.3f}{s.mrr:>7.3f}{s.top3:>7.3f}  "
            + "".join(f"{s.by_kind[kind]:>8.3f}" for kind in kinds)
        )
    print("(per-kind columns are recall@10)")


def print_sweep(title: str, rows: list[tuple[str, Firsts]], members: dict[str, list[bool]]) -> None:
    """One line per variant: R@5, R@10 and MRR on dev, then on test."""
    print(f"\n{title}")
    header = f"{'variant':<34}" + "".join(
        f"{half + ' ' + name:>11}" for half in ("dev", "test") for name in ("R@5", "R@10", "MRR")
    )
    print(header)
    print("-" * len(header))
    for name, firsts in rows:
        cells = []
        for half in ("dev", "test"):
            s = score(firsts, members[half])
            cells += [s.recall5, s.recall10, s.mrr]
        print(f"{name:<34}" + "".join(f"{c:>11.3f}" for c in cells))


async def run(args: argparse.Namespace, embedder: Embedder | None = None) -> None:
    """The report, with the configured embedder unless one is given (bench/relevance_embedders)."""
    settings = load_settings(_env_file=None)
    configure_logging("warning")
    embedder = embedder or get_embedder(settings)
    chunks = build_corpus(
        memory_tokens=args.memory_tokens, transcript_tokens=args.transcript_tokens
    )
    members = half_members()
    with bench_database("agmem_relevance") as url:
        engine = make_async_engine(url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                ids = await load(session, chunks, embedder)
                relevant = [relevant_ids(chunks, ids, targets) for _, _, targets in QUERIES]
                print(
                    f"corpus: {len(chunks)} chunks; queries: {len(QUERIES)} "
                    f"(dev {sum(members['dev'])}, test {sum(members['test'])}); "
                    f"embedder: {embedder.identity}; chunk tokens memory={args.memory_tokens} "
                    f"transcripts={args.transcript_tokens}"
                )
                base = SearchTuning.from_settings(settings)
                firsts = {
                    mode: await first_ranks(session, embedder, relevant, mode, base)
                    for mode in MODES
                }
                for half in ("dev", "test", "all"):
                    rows = [(mode, score(firsts[mode], members[half])) for mode in MODES]
                    print_table(f"{half}: modes (settings' tuning)", rows)
                    scores = dict(rows)
                    branches: tuple[SearchMode, ...] = ("keyword", "vector")
                    single = max(branches, key=lambda m: scores[m].recall10)
                    low, high = gap_interval(firsts["hybrid"], firsts[single], members[half])
                    print(
                        f"{half}: hybrid R@10 - best single branch ({single}) R@10 = "
                        f"{scores['hybrid'].recall10 - scores[single].recall10:+.3f} "
                        f"(95% bootstrap interval {low:+.3f} to {high:+.3f}); identifier "
                        f"queries in top 3 (hybrid): {scores['hybrid'].kind_top3['ident']:.3f}"
                    )
                print("\ntuning is done on dev; test is the held-out figure")
                await print_context_gate(
                    session, embedder, relevant, members, settings.context_min_similarity
                )
                if args.misses:
                    await print_misses(session, embedder, relevant, base, firsts["hybrid"])
                if args.sweep:
                    await sweep(session, embedder, relevant, members)
        finally:
            await engine.dispose()


async def print_context_gate(
    session: AsyncSession,
    embedder: Embedder,
    relevant: list[set[int]],
    members: dict[str, list[bool]],
    min_similarity: float,
) -> None:
    """What the context builder's relevance gate keeps: labelled targets among its hits, and the
    hits an unrelated prompt gets, with and without the gate."""
    gated = SearchTuning(min_similarity=min_similarity)
    print(
        f"\ncontext gate (the builder's search: hybrid, top {RELEVANT_LIMIT}, a hit needs cosine "
        f">= {min_similarity} or two of the prompt's words)"
    )
    for name, tuning in (("no gate", SearchTuning()), ("gate", gated)):
        firsts = await first_ranks(
            session, embedder, relevant, "hybrid", tuning, limit=RELEVANT_LIMIT
        )
        found = {
            half: sum(
                first is not None for first, m in zip(firsts, members[half], strict=True) if m
            )
            for half in ("dev", "test")
        }
        counts = []
        for prompt in UNRELATED:
            response = await search(
                session,
                request=SearchRequest(query=prompt, project_path="/bench", limit=RELEVANT_LIMIT),
                embedder=embedder,
                tuning=tuning,
                snippets=False,
            )
            counts.append(len(response.results))
        print(
            f"  {name:<8} labelled queries with a target in the hits: dev {found['dev']}/"
            f"{sum(members['dev'])}, test {found['test']}/{sum(members['test'])}; "
            f"{len(UNRELATED)} unrelated prompts: {sum(counts) / len(counts):.2f} hits each, "
            f"{counts.count(0)} with none"
        )


async def print_misses(
    session: AsyncSession,
    embedder: Embedder,
    relevant: list[set[int]],
    tuning: SearchTuning,
    hybrid: Firsts,
) -> None:
    """The dev queries hybrid misses at 10, with the first relevant rank of each branch
    within 100 (`-`: not there)."""
    deep = {
        mode: await first_ranks(session, embedder, relevant, mode, tuning, limit=100)
        for mode in ("vector", "keyword")
    }
    halves = split(QUERIES)
    print("\ndev queries hybrid misses at 10 (first relevant rank per branch, within 100)")
    for n, ((kind, query, _), first) in enumerate(zip(QUERIES, hybrid, strict=True)):
        if halves[n] == "dev" and first is None:
            ranks = "  ".join(f"{mode}={deep[mode][n] or '-'}" for mode in deep)
            print(f"  {kind:<11}{ranks:<26}{query}")


async def sweep(
    session: AsyncSession,
    embedder: Embedder,
    relevant: list[set[int]],
    members: dict[str, list[bool]],
) -> None:
    variants = [
        ("rrf k=60 v1.0 k1.0", SearchTuning(rrf_k=60)),
        ("rrf k=60 v0.5 k1.0", SearchTuning(rrf_k=60, vector_weight=0.5)),
        ("rrf k=60 v1.0 k0.5", SearchTuning(rrf_k=60, keyword_weight=0.5)),
        ("rrf k=20 v1.0 k1.0", SearchTuning(rrf_k=20)),
        ("rrf k=120 v1.0 k1.0", SearchTuning(rrf_k=120)),
        ("rrf k=60 norm=0", SearchTuning(rrf_k=60, rank_normalization=0)),
        ("rrf k=60 vfloor 0.3", SearchTuning(rrf_k=60, vector_floor=0.3)),
        ("rrf k=60 no exact boost", SearchTuning(rrf_k=60, exact_weight=0)),
        ("rrf k=60 exact boost 2", SearchTuning(rrf_k=60, exact_weight=2)),
        ("tiers 1/1 (plain RRF)", SearchTuning(tier_weights=(1.0, 1.0))),
        ("tiers 0.5/0.25", SearchTuning(tier_weights=(0.5, 0.25))),
        ("tiers 0.5/0", SearchTuning(tier_weights=(0.5, 0.0))),
        ("tiers 0.3/0.1", SearchTuning(tier_weights=(0.3, 0.1))),
        ("ts_rank (no IDF)", SearchTuning(rank_function="ts_rank")),
        ("ts_rank_cd (no IDF)", SearchTuning(rank_function="ts_rank_cd")),
        ("candidates 80", SearchTuning(min_candidates=80)),
        ("candidates 160", SearchTuning(min_candidates=160)),
        ("no rarity", SearchTuning(rarity=False)),
    ]
    swept = [
        (name, await first_ranks(session, embedder, relevant, "hybrid", t)) for name, t in variants
    ]
    print_sweep("hybrid fusion sweep", swept, members)
    keyword_variants = [
        (f"keyword norm={n} prefix={p}", SearchTuning(rank_normalization=n, prefix_last=p))
        for n in (0, 1, 4, 5, 6, 12)
        for p in (True, False)
    ] + [("keyword ts_rank (no IDF)", SearchTuning(rank_function="ts_rank"))]
    swept = [
        (name, await first_ranks(session, embedder, relevant, "keyword", t))
        for name, t in keyword_variants
    ]
    print_sweep("keyword ranking sweep", swept, members)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also try other fusion settings")
    parser.add_argument(
        "--misses", action="store_true", help="list the dev queries hybrid misses at 10"
    )
    parser.add_argument("--memory-tokens", type=int, default=200)
    parser.add_argument("--transcript-tokens", type=int, default=200)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
