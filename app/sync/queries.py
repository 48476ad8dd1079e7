"""All SQL of the sync job: the file table, chunk replacement, the per-project advisory lock."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

# One lock key per project; a second sync of the same project waits for the first to finish.
_LOCK = text("SELECT pg_advisory_lock(hashtextextended('agmem.sync:' || :project, 0))")
_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended('agmem.sync:' || :project, 0))")

_KNOWN_FILES = text(
    "SELECT id, path, source, hash, size, mtime FROM memory_files WHERE project_path = :project"
)

_UPSERT_FILE = text(
    "INSERT INTO memory_files (project_path, path, source, hash, mtime, size, chunk_count) "
    "VALUES (:project, :path, :source, :hash, :mtime, :size, :chunks) "
    "ON CONFLICT (project_path, path) DO UPDATE SET source = EXCLUDED.source, "
    "hash = EXCLUDED.hash, mtime = EXCLUDED.mtime, size = EXCLUDED.size, "
    "chunk_count = EXCLUDED.chunk_count, indexed_at = now() RETURNING id"
)

_DELETE_FILE_CHUNKS = text("DELETE FROM memory_chunks WHERE file_id = :file_id")

_INSERT_CHUNKS = text(
    "INSERT INTO memory_chunks (project_path, source, file_id, file_path, start_line, end_line, "
    "content, hash, embedding, model) "
    "SELECT :project, :source, :file_id, :path, s, e, c, h, CAST(v AS vector), "
    "CASE WHEN v IS NULL THEN NULL ELSE CAST(:model AS varchar) END "
    "FROM unnest(CAST(:starts AS int[]), CAST(:ends AS int[]), CAST(:contents AS text[]), "
    "CAST(:hashes AS text[]), CAST(:vectors AS text[])) AS t(s, e, c, h, v)"
)

_TOUCH_FILES = text(
    "UPDATE memory_files AS f SET mtime = t.m, size = t.s FROM unnest(CAST(:ids AS bigint[]), "
    "CAST(:mtimes AS float8[]), CAST(:sizes AS bigint[])) AS t(i, m, s) WHERE f.id = t.i"
)

# Chunks cascade with their file row.
_DELETE_FILES = text("DELETE FROM memory_files WHERE id = ANY(CAST(:ids AS bigint[]))")

_STALE_CHUNKS = text(
    "SELECT id, hash, content FROM memory_chunks WHERE project_path = :project "
    "AND source IN ('memory', 'sessions') AND (model IS DISTINCT FROM :model) "
    "ORDER BY id LIMIT :limit"
)

_SET_VECTORS = text(
    "UPDATE memory_chunks AS c SET embedding = CAST(t.e AS vector), model = :model, "
    "embed_error = NULL FROM unnest(CAST(:ids AS bigint[]), CAST(:embeddings AS text[])) "
    "AS t(id, e) WHERE c.id = t.id"
)


@dataclass(frozen=True, slots=True)
class KnownFile:
    id: int
    path: str
    source: str
    hash: str
    size: int
    mtime: float


async def lock_project(session: AsyncSession, project: str) -> None:
    """Hold the project's sync lock on this session's connection until `unlock_project`."""
    await session.execute(_LOCK, {"project": project})


async def unlock_project(session: AsyncSession, project: str) -> None:
    await session.execute(_UNLOCK, {"project": project})


async def known_files(session: AsyncSession, project: str) -> dict[str, KnownFile]:
    """Every indexed file of the project, by path."""
    result = await session.execute(_KNOWN_FILES, {"project": project})
    return {row.path: KnownFile(*row) for row in result}


async def replace_file(
    session: AsyncSession,
    *,
    project: str,
    path: str,
    source: str,
    hash: str,
    mtime: float,
    size: int,
    chunks: list[tuple[int, int, str, str, str | None]],
    model: str,
) -> int:
    """Upsert the file row and make `chunks` (start, end, content, hash, vector) its only chunks."""
    file_id: int = (
        await session.execute(
            _UPSERT_FILE,
            {
                "project": project,
                "path": path,
                "source": source,
                "hash": hash,
                "mtime": mtime,
                "size": size,
                "chunks": len(chunks),
            },
        )
    ).scalar_one()
    await session.execute(_DELETE_FILE_CHUNKS, {"file_id": file_id})
    if chunks:
        starts, ends, contents, hashes, vectors = (
            list(column) for column in zip(*chunks, strict=True)
        )
        await session.execute(
            _INSERT_CHUNKS,
            {
                "project": project,
                "source": source,
                "file_id": file_id,
                "path": path,
                "starts": starts,
                "ends": ends,
                "contents": contents,
                "hashes": hashes,
                "vectors": vectors,
                "model": model,
            },
        )
    return file_id


async def touch_files(session: AsyncSession, touched: list[tuple[int, float, int]]) -> None:
    """Record a new (mtime, size) for files whose content hash did not change."""
    if touched:
        ids, mtimes, sizes = (list(column) for column in zip(*touched, strict=True))
        await session.execute(_TOUCH_FILES, {"ids": ids, "mtimes": mtimes, "sizes": sizes})


async def delete_files(session: AsyncSession, ids: list[int]) -> None:
    if ids:
        await session.execute(_DELETE_FILES, {"ids": ids})


async def stale_chunks(
    session: AsyncSession, *, project: str, model: str, limit: int
) -> list[tuple[int, str, str]]:
    """File chunks of the project whose vector is missing or from another model."""
    result = await session.execute(
        _STALE_CHUNKS, {"project": project, "model": model, "limit": limit}
    )
    return [(row.id, row.hash, row.content) for row in result]


async def set_vectors(
    session: AsyncSession, *, model: str, ids: list[int], vectors: list[str]
) -> None:
    await session.execute(_SET_VECTORS, {"model": model, "ids": ids, "embeddings": vectors})
