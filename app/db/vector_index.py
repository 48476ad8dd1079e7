"""One partial expression HNSW index per embedding model over the untyped `embedding` column.

`memory_chunks.embedding` has no fixed width, so several models can live side by side while a
model switch re-embeds. Each model gets `USING hnsw ((embedding::halfvec(D)) halfvec_cosine_ops)
WHERE model = '<identity>'`; a query must repeat the same cast and predicate to use it, so every
query that wants the index takes its distance from `indexed_distance_sql`.

The graph holds half-precision copies (the column keeps full precision, and exact search reads
it): an index 40% smaller, built and searched somewhat faster, at the same recall and the same
relevance figures (docs/benchmarks.md, Sync, "Branch vector5").
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

HNSW_INDEX_PREFIX = "ix_memory_chunks_hnsw_"
MAX_HNSW_DIMS = 2000


def hnsw_index_name(model: str) -> str:
    """A readable, stable index name for a model identity, within Postgres's 63-byte limit."""
    readable = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")
    name = HNSW_INDEX_PREFIX + readable
    if len(name) <= 63:
        return name
    digest = hashlib.sha1(model.encode()).hexdigest()[:12]
    return f"{HNSW_INDEX_PREFIX}{readable[: 63 - len(HNSW_INDEX_PREFIX) - 13]}_{digest}"


def indexed_distance_sql(dims: int, *, column: str, query: str) -> str:
    """The cosine distance the model's HNSW index orders by: `column` (a `memory_chunks.embedding`
    reference) against `query`, an SQL expression of type `vector`."""
    return f"({column}::halfvec({dims}) <=> CAST({query} AS halfvec({dims})))"


def hnsw_index_ddl(model: str, dims: int, *, concurrently: bool = False) -> str:
    if not 1 <= dims <= MAX_HNSW_DIMS:
        raise ValueError(f"HNSW indexes support 1..{MAX_HNSW_DIMS} dimensions, not {dims}")
    literal = model.replace("'", "''")
    how = "CONCURRENTLY " if concurrently else ""
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {hnsw_index_name(model)} ON memory_chunks "
        f"USING hnsw ((embedding::halfvec({dims})) halfvec_cosine_ops) "
        f"WITH (m = 16, ef_construction = 64) WHERE model = '{literal}'"
    )


async def ensure_hnsw_index_async(
    connection: AsyncConnection | psycopg.AsyncConnection[Any], *, model: str, dims: int
) -> None:
    """Create the model's index if it is missing (through an ORM or a psycopg connection)."""
    ddl = hnsw_index_ddl(model, dims)
    if isinstance(connection, psycopg.AsyncConnection):
        await connection.execute(ddl)
    else:
        await connection.execute(text(ddl))


def drop_hnsw_index_ddl(model: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {hnsw_index_name(model)}"


_INDEX_VALID = text(
    "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
    "WHERE c.relname = :name AND c.relkind = 'i'"
)


async def hnsw_index_valid(connection: AsyncConnection, *, model: str) -> bool | None:
    """Whether the model's index exists and is valid; None when it does not exist (an
    interrupted `CREATE INDEX CONCURRENTLY` leaves an invalid one behind)."""
    result = await connection.execute(_INDEX_VALID, {"name": hnsw_index_name(model)})
    valid: bool | None = result.scalar_one_or_none()
    return valid
