"""How common each query word is in the index, for choosing which words the keyword branch's
costly GIN scans may use (see `queries.rare_terms`).

The shares come from `pg_stats` (ANALYZE's most common elements of `memory_chunks.tsv`: the
~1,000 lexemes held by the most rows, with the share of rows holding each), read once per
`REFRESH_SECONDS` per database. Words are stemmed in Python with the Snowball English stemmer,
the algorithm behind Postgres's `english_stem` dictionary, so a search adds no round trip: asking
Postgres (`ts_lexize`) cost one per search with new words, as much as the search itself on the
loaded benchmark machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

import snowballstemmer
from sqlalchemy.ext.asyncio import AsyncSession

from app.search import queries

REFRESH_SECONDS = 300.0
_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=50_000)
def lexeme(term: str) -> str:
    """The term as `to_tsvector('english', ...)` stores it (stop words are removed earlier)."""
    stem: str = _STEMMER.stemWord(term)
    return stem


@dataclass(slots=True)
class _Snapshot:
    shares: dict[str, float] = field(default_factory=dict)
    rows: float = 0.0
    loaded_at: float = float("-inf")
    least: float = field(init=False)  # the smallest share listed (0 when none is)

    def __post_init__(self) -> None:
        self.least = min(self.shares.values(), default=0.0)


@dataclass(slots=True)
class TermStats:
    """Per-database cache of lexeme shares."""

    snapshots: dict[str, _Snapshot] = field(default_factory=dict)

    async def _snapshot(self, session: AsyncSession) -> _Snapshot:
        key = str(session.get_bind().engine.url)
        snapshot = self.snapshots.get(key)
        now = time.monotonic()
        if snapshot is None or now - snapshot.loaded_at > REFRESH_SECONDS:
            snapshot = _Snapshot(*await queries.lexeme_rows(session), now)
            self.snapshots[key] = snapshot
        return snapshot

    async def shares(self, session: AsyncSession, terms: list[str]) -> dict[str, float]:
        """Each term's share of index rows; 0 for a term rarer than any tracked lexeme, or held
        by fewer than `queries.COMMON_TERM_ROWS` rows (whose scan is cheap whatever its share)."""
        if not terms:
            return {}
        snapshot = await self._snapshot(session)
        result = {}
        for term in terms:
            share = snapshot.shares.get(lexeme(term), 0.0)
            result[term] = share if share * snapshot.rows > queries.COMMON_TERM_ROWS else 0.0
        return result

    async def idf(self, session: AsyncSession, terms: list[str]) -> dict[str, float]:
        """Each term's BM25 inverse document frequency in the index.

        pg_stats tracks only the most common lexemes; a term it does not list is held by fewer
        rows than the least common one it does, and counts as half that share. Without
        statistics (an index never analysed) every term weighs 1."""
        if not terms:
            return {}
        snapshot = await self._snapshot(session)
        if not snapshot.shares or snapshot.rows <= 0:
            return dict.fromkeys(terms, 1.0)
        unlisted = snapshot.least / 2
        return {
            term: queries.bm25_idf(snapshot.shares.get(lexeme(term), unlisted), snapshot.rows)
            for term in terms
        }


TERM_STATS = TermStats()
