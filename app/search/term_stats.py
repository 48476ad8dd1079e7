"""How common each query word is in the index, for choosing which words the keyword branch's
costly GIN scans may use (see `queries.rare_terms`).

The shares come from `pg_stats` (ANALYZE's most common elements of `memory_chunks.tsv`: the
~1,000 lexemes held by the most rows, with the share of rows holding each). Both the shares and
each word's stem are cached in the process, so a search costs an extra round trip only when it
holds a word not seen before, or once every `REFRESH_SECONDS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from app.search import queries

REFRESH_SECONDS = 300.0
MAX_CACHED_STEMS = 50_000


@dataclass(slots=True)
class _Snapshot:
    shares: dict[str, float] = field(default_factory=dict)
    rows: float = 0.0
    loaded_at: float = float("-inf")


@dataclass(slots=True)
class TermStats:
    """Per-database cache of lexeme shares and word stems."""

    snapshots: dict[str, _Snapshot] = field(default_factory=dict)
    stems: dict[str, str | None] = field(default_factory=dict)

    async def shares(self, session: AsyncSession, terms: list[str]) -> dict[str, float]:
        """Each term's share of index rows; 0 for a term rarer than any tracked lexeme, or held
        by fewer than `queries.COMMON_TERM_ROWS` rows (whose scan is cheap whatever its share)."""
        if not terms:
            return {}
        key = str(session.get_bind().engine.url)
        snapshot = self.snapshots.get(key)
        now = time.monotonic()
        if snapshot is None or now - snapshot.loaded_at > REFRESH_SECONDS:
            snapshot = _Snapshot(*await queries.lexeme_rows(session), now)
            self.snapshots[key] = snapshot
        unknown = [term for term in terms if term not in self.stems]
        if unknown:
            if len(self.stems) > MAX_CACHED_STEMS:
                self.stems.clear()
            self.stems.update(await queries.stems(session, unknown))
        result = {}
        for term in terms:
            lexeme = self.stems.get(term)
            share = snapshot.shares.get(lexeme, 0.0) if lexeme else 0.0
            result[term] = share if share * snapshot.rows > queries.COMMON_TERM_ROWS else 0.0
        return result


TERM_STATS = TermStats()
