"""Embedding index rows, cache first: `memory_embedding_cache` is keyed by (content hash, model).

Two identical chunks anywhere cost one embedding, and a re-sync of unchanged text costs none.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import psycopg
from numpy.typing import NDArray
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.db.binary_vectors import VectorSession, binary_vector_connection
from app.db.vector_index import ensure_hnsw_index_async
from app.llm.embeddings import Embedder, EmbeddingFailed
from app.llm.generation import capped_delay


@dataclass(slots=True)
class EmbedStats:
    chunks: int = 0  # index rows given a vector
    computed: int = 0  # distinct texts sent to the provider
    cached: int = 0  # distinct texts served from the cache
    error: str | None = None  # the provider's failure, when it failed

    def add(self, other: EmbedStats) -> None:
        self.chunks += other.chunks
        self.computed += other.computed
        self.cached += other.cached


def vector_literal(vector: NDArray[np.float32] | list[float]) -> str:
    """pgvector's text form; cast with `CAST(:v AS vector)` in SQL."""
    # One %-format over the whole list: the same text as formatting each float in turn, in
    # half the time (~0.15 ms less per 256-dim query vector, a search's only per-query encoding).
    values = vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]
    return "[" + ("%.7g," * len(values) % tuple(values))[:-1] + "]"


Vectors = dict[str, NDArray[np.float32]]

# Vectors travel in pgvector's binary form (app/db/binary_vectors.py): as text, each costs a
# float formatting per component in Python and a parse in Postgres. `%b`: psycopg would otherwise
# dump an array of vectors as text, element by element.
_CACHE_LOOKUP_BINARY = (
    "SELECT hash, embedding FROM memory_embedding_cache WHERE model = %s AND hash = ANY(%s)"
)
_CACHE_STORE_BINARY = (
    "INSERT INTO memory_embedding_cache (hash, model, embedding) "
    "SELECT h, %s, e FROM unnest(%s::text[], %b::vector[]) AS t(h, e) "
    "ON CONFLICT (hash, model) DO NOTHING"
)


async def cached_arrays(session: VectorSession, *, model: str, hashes: list[str]) -> Vectors:
    """Vectors already known for these content hashes under `model`, as float32 arrays."""
    if not hashes:
        return {}
    driver = await binary_vector_connection(session)
    found: Vectors = {}
    unique = sorted(set(hashes))
    async with driver.cursor(binary=True) as cursor:
        for start in range(0, len(unique), 5000):
            await cursor.execute(_CACHE_LOOKUP_BINARY, (model, unique[start : start + 5000]))
            found.update({h: v.to_numpy() for h, v in await cursor.fetchall()})
    return found


async def store_arrays(session: VectorSession, *, model: str, vectors: Vectors) -> None:
    """Add `{content hash: vector}` to the cache; hashes already there keep their vector.

    In hash order: concurrent writers (a worker's lanes, a sync) whose texts overlap then take
    the cache's row locks in one order. In each caller's own order one could hold `a` and wait
    for `b` while the other held `b` and waited for `a`, and Postgres killed one (a deadlock).
    """
    if vectors:
        hashes = sorted(vectors)
        driver = await binary_vector_connection(session)
        async with driver.cursor() as cursor:
            await cursor.execute(_CACHE_STORE_BINARY, (model, hashes, [vectors[h] for h in hashes]))


async def arrays_for(
    session: VectorSession, embedder: Embedder, items: dict[str, str]
) -> tuple[Vectors, EmbedStats]:
    """Vectors for `{content hash: text}`: cached where present, else computed and cached."""
    stats = EmbedStats()
    vectors = await cached_arrays(session, model=embedder.identity, hashes=list(items))
    stats.cached = len(vectors)
    missing = [h for h in items if h not in vectors]
    if missing:
        # In a thread: a provider call (CPU for wordllama, which releases the GIL in its tokenizer
        # and numpy; HTTP for Gemini) must not stall the event loop the API, the worker and the
        # sync's other writer share.
        computed = await asyncio.to_thread(embedder.embed_documents, [items[h] for h in missing])
        fresh = dict(zip(missing, computed, strict=True))
        await store_arrays(session, model=embedder.identity, vectors=fresh)
        vectors.update(fresh)
        stats.computed = len(missing)
    return vectors, stats


# A lease, not a lock: the rows were locked FOR UPDATE through the provider's call, and a write
# of them (a kv memory's PUT or DELETE) waited for Gemini (walk-through: over 120 s).
EMBED_LEASE_SECONDS = 900
_CLAIM = (
    "UPDATE memory_chunks SET embed_claimed_until = now() + make_interval(secs => :lease) "
    "WHERE id IN (SELECT id FROM memory_chunks WHERE embedding IS NULL "
    "AND embed_attempts < :max_attempts AND (embed_claimed_until IS NULL "
    "OR embed_claimed_until < now()) {only} ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED) "
    "RETURNING id, hash, content"
)
_CLAIM_UNEMBEDDED = text(_CLAIM.format(only=""))
# A sync with a batch-capable provider (Gemini) writes its file chunks without vectors and then
# embeds them itself, inline or with one Batch API job (app/sync/embed.py); a worker that took
# them as they were written paid for them a second time, at the inline price.
_CLAIM_UNEMBEDDED_NOT_FILES = text(_CLAIM.format(only="AND source NOT IN ('memory', 'sessions')"))

_SET_VECTORS_BINARY = (
    "UPDATE memory_chunks AS c SET embedding = t.e, model = %s, embed_error = NULL, "
    "embed_claimed_until = NULL FROM unnest(%s::bigint[], %b::vector[]) AS t(id, e) "
    "WHERE c.id = t.id"
)


async def set_chunk_vectors(
    session: AsyncSession, *, model: str, ids: list[int], vectors: list[NDArray[np.float32]]
) -> int:
    """Give index rows `ids` their `vectors` (in order) under `model`; the rows still there."""
    if not ids:
        return 0
    driver = await binary_vector_connection(session)
    async with driver.cursor() as cursor:
        await cursor.execute(_SET_VECTORS_BINARY, (model, ids, vectors))
        return max(cursor.rowcount, 0)


_RECORD_FAILURE = text(
    "UPDATE memory_chunks SET embed_attempts = embed_attempts + 1, embed_error = :error, "
    "embed_claimed_until = NULL WHERE id = ANY(CAST(:ids AS bigint[]))"
)

# A quota's long Retry-After: the rows wait it out under a lease, no attempt spent. Charged an
# attempt a poll instead, they were given up within seconds, inside the quota window.
_PAUSE = text(
    "UPDATE memory_chunks SET embed_error = :error, "
    "embed_claimed_until = now() + make_interval(secs => :seconds) "
    "WHERE id = ANY(CAST(:ids AS bigint[]))"
)

# What a text the provider refused is recorded as (`embed_error`): such a row is not retried
# when the provider answers again, only by a worker's start.
REFUSED = "refused: "

# Rows given up on (`max_attempts` failures) wait for proof that the provider works again: a
# worker's start (a fixed key, a switched provider) or an embedding that reached it. They stayed
# without a vector for good (walk-through: a 40-second 403 left 14 rows so). A text refused for
# itself comes back only with a worker's start: retried after each success, it headed every next
# batch and took the rows captured since down with it.
_RELEASE_GIVEN_UP = text(
    "UPDATE memory_chunks SET embed_attempts = 0 "
    "WHERE embedding IS NULL AND embed_attempts >= :max_attempts "
    "AND (:refused_too OR embed_error IS NULL OR embed_error NOT LIKE :refused)"
)


_RELEASE_CLAIMS = text(
    "UPDATE memory_chunks SET embed_claimed_until = NULL WHERE id = ANY(CAST(:ids AS bigint[]))"
)


async def release_claims(session: AsyncSession, ids: list[int]) -> None:
    """End the lease on rows a worker stopped embedding."""
    await session.execute(_RELEASE_CLAIMS, {"ids": ids})


async def release_given_up(
    session: AsyncSession, *, max_attempts: int, refused_too: bool = True
) -> int:
    """Give the rows whose embedding failed `max_attempts` times their attempts back; with
    `refused_too` False, not those whose text the provider refused."""
    params = {"max_attempts": max_attempts, "refused_too": refused_too, "refused": REFUSED + "%"}
    result: Any = await session.execute(_RELEASE_GIVEN_UP, params)
    return int(result.rowcount or 0)


_known_indexes: set[str] = set()


def model_index_known(embedder: Embedder) -> bool:
    """Whether this process has made sure of the model's HNSW index already."""
    return embedder.identity in _known_indexes


async def ensure_model_index(
    connection: AsyncConnection | psycopg.AsyncConnection[Any], embedder: Embedder
) -> None:
    """Create the model's partial HNSW index the first time this process uses the model."""
    if model_index_known(embedder):
        return
    await ensure_hnsw_index_async(connection, model=embedder.identity, dims=embedder.dims)
    _known_indexes.add(embedder.identity)


class Claimed(NamedTuple):
    id: int
    hash: str
    content: str


async def claim_unembedded(
    session: AsyncSession, *, limit: int, max_attempts: int, skip_file_chunks: bool = False
) -> list[Claimed]:
    """Lease up to `limit` index rows without a vector for `EMBED_LEASE_SECONDS`.

    SKIP LOCKED and the lease split the backlog between lanes and workers; a worker that dies
    leaves rows another takes when the lease ends. With `skip_file_chunks`, the memory files'
    and transcripts' rows are left to the sync that wrote them."""
    claim = _CLAIM_UNEMBEDDED_NOT_FILES if skip_file_chunks else _CLAIM_UNEMBEDDED
    params = {"limit": limit, "max_attempts": max_attempts, "lease": EMBED_LEASE_SECONDS}
    return [Claimed(*row) for row in (await session.execute(claim, params)).all()]


async def embed_claimed(
    session: AsyncSession, embedder: Embedder, rows: list[Claimed]
) -> EmbedStats:
    """Give claimed rows a vector (cache first). A provider failure counts an attempt on the
    rows (or pauses them, see `_failed`), is returned in `error`, and leaves them for a later
    try. Rows deleted meanwhile (a kv memory rewritten while Gemini answered) are not written
    back."""
    if not rows:
        return EmbedStats()
    await ensure_model_index(await session.connection(), embedder)
    outcome = await _try_embedding(session, embedder, rows)
    if isinstance(outcome, EmbedStats):
        return outcome
    return await _failed(session, embedder, rows, outcome)


async def _try_embedding(
    session: AsyncSession, embedder: Embedder, rows: list[Claimed]
) -> EmbedStats | Exception:
    """The rows' vectors written, or the provider's failure (nothing recorded)."""
    try:
        vectors, stats = await arrays_for(session, embedder, {r.hash: r.content for r in rows})
    except (psycopg.Error, sa_exc.DBAPIError):
        # The database's, not the provider's: the transaction is aborted (recording it here
        # failed in turn, hiding it), and the rows are not at fault. The caller sees it as is.
        raise
    except Exception as error:  # any provider failure: network, quota, malformed answer
        return error
    stats.chunks = await set_chunk_vectors(
        session,
        model=embedder.identity,
        ids=[r.id for r in rows],
        vectors=[vectors[r.hash] for r in rows],
    )
    return stats


async def _failed(
    session: AsyncSession, embedder: Embedder, rows: list[Claimed], error: Exception
) -> EmbedStats:
    """Record a provider failure on `rows`: an attempt each, or a pause for a quota's long wait.

    A batch refused for its texts is split to find the text at fault: one refused text failed
    its whole batch of up to 256 rows. Each half is tried once; if both are refused, the refusal
    is the batch's as a whole (a setting, not a text) and is charged to every row; otherwise the
    failing half is split in turn: about 2 log2(n) calls for one bad text among n."""
    message = f"{type(error).__name__}: {error}"[:1000]
    ids = [r.id for r in rows]
    if isinstance(error, EmbeddingFailed) and error.pause_seconds is not None:
        params = {"ids": ids, "seconds": capped_delay(error.pause_seconds), "error": message}
        await session.execute(_PAUSE, params)
        return EmbedStats(error=message)
    refused = isinstance(error, EmbeddingFailed) and error.refused
    if refused and len(rows) > 1:
        middle = len(rows) // 2
        halves = (rows[:middle], rows[middle:])
        outcomes = [await _try_embedding(session, embedder, half) for half in halves]
        stats = EmbedStats()
        if not any(isinstance(outcome, EmbedStats) for outcome in outcomes) and all(
            isinstance(outcome, EmbeddingFailed) and outcome.refused for outcome in outcomes
        ):
            await session.execute(_RECORD_FAILURE, {"ids": ids, "error": REFUSED + message})
            return EmbedStats(error=message)
        for half, outcome in zip(halves, outcomes, strict=True):
            if not isinstance(outcome, EmbedStats):
                outcome = await _failed(session, embedder, half, outcome)
                stats.error = outcome.error
            stats.add(outcome)
        return stats
    await session.execute(
        _RECORD_FAILURE, {"ids": ids, "error": (REFUSED if refused else "") + message}
    )
    return EmbedStats(error=message)


async def embed_pending_chunks(
    session: AsyncSession,
    embedder: Embedder,
    *,
    limit: int = 512,
    max_attempts: int = 5,
    skip_file_chunks: bool = False,
) -> EmbedStats:
    """Claim up to `limit` index rows without a vector and give them one, in the session's one
    transaction (the worker claims and embeds in two: see `app.worker.jobs.embed_batch`)."""
    rows = await claim_unembedded(
        session, limit=limit, max_attempts=max_attempts, skip_file_chunks=skip_file_chunks
    )
    return await embed_claimed(session, embedder, rows)
