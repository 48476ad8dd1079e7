"""All SQL of the sync job: the file table, chunk replacement, the per-project advisory lock."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
import psycopg
from numpy.typing import NDArray
from psycopg import AsyncCursor
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.limits import utf8_size
from app.db.binary_vectors import VECTOR_TYPE, use_vector_type
from app.db.raw_pool import Conn
from app.privacy import RULES_VERSION
from app.sync.discover import Scope, is_utf8

# Session-level advisory locks: one per project (a second sync of the project waits for the
# first) and one per model's HNSW index (one rebuild at a time, see app/sync/bulk_index.py).
_TRY_LOCK = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))")
AUTOCOMMIT = {"isolation_level": "AUTOCOMMIT"}

# The sync's own statements run on psycopg connections it opens itself (see `lock_project`), in
# psycopg's placeholder style.
_TRY_LOCK_RAW = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK_RAW = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"

# Of the root, only whether there is one: reading and decoding every file's source and root cost a
# no-change re-sync of 10k files 15-24% (rev-sync27); `_PLACED_FILES` reads them for the few
# files a sync judges.
_KNOWN_FILES = (
    "SELECT id, path, hash, size, mtime, rules, root IS NULL FROM memory_files "
    "WHERE project_path = %s"
)
# Those at a watcher's changed paths (an index scan), and under those that may be folders (a scan
# of the project's files: ~5 ms for 22 prefixes over 2,201 files, so only when there are any).
_KNOWN_FILES_AT = _KNOWN_FILES + " AND path = ANY(%s::text[])"
_KNOWN_FILES_AT_OR_UNDER = (
    _KNOWN_FILES + " AND (path = ANY(%s::text[]) OR EXISTS (SELECT FROM unnest(%s::text[]) "
    "AS folder(p) WHERE starts_with(path, folder.p)))"
)

# Every changed file of a write transaction in one statement: a round trip per file (upsert,
# delete, COPY) cost more Python time per chunk than the rows themselves.
# What one btree index row holds (a third of an 8 KB page, less overheads): Postgres's limit.
INDEX_ROW_MAX_BYTES = 2704


def index_row_bytes(project: str, path: str) -> int:
    """What a file's entry in the unique index over `memory_files (project_path, path)` takes as
    the two values stand (Postgres's own count): an 8-byte header, each text with a 1-byte length
    up to 126 bytes, else 4-aligned with a 4-byte one, the whole 8-aligned. Postgres first
    compresses a value over 512 bytes, so a longer entry may still fit; only Postgres can say."""
    size = 8
    for value in (project, path):
        length = utf8_size(value)
        size = size + 1 + length if length <= 126 else (size + 3) // 4 * 4 + 4 + length
    return (size + 7) // 8 * 8


_PROBE_FILE = (
    "INSERT INTO memory_files (project_path, path, source, hash, mtime, size) "
    "VALUES (%s, %s, 'memory', '', 0, 0) ON CONFLICT DO NOTHING"
)


async def unindexable(connection: Conn, project: str, paths: list[str]) -> list[str]:
    """Those of `paths` (new files, over `index_row_bytes`'s bound as they stand) whose index
    entry Postgres refuses even compressed: tried one by one and rolled back, before a file is
    read and embedded. Written with the rest and refused, the rollback also lost its embeddings'
    cache rows, so every re-sync embedded it again."""
    refused = []
    for path in paths:
        try:
            async with connection.transaction(force_rollback=True):
                await connection.execute(_PROBE_FILE, (project, path))
        except psycopg.errors.ProgramLimitExceeded as error:
            if "index row size" not in str(error):
                raise
            refused.append(path)
    return refused


_UPSERT_FILES = (
    "INSERT INTO memory_files (project_path, path, source, hash, mtime, size, chunk_count, "
    "rules, root) SELECT %(project)s, p, s, h, m, z, c, %(rules)s, r FROM unnest("
    "%(paths)s::text[], %(sources)s::text[], %(hashes)s::text[], %(mtimes)s::float8[], "
    "%(sizes)s::bigint[], %(counts)s::int[], %(roots)s::text[]) AS t(p, s, h, m, z, c, r) "
    "ON CONFLICT (project_path, path) DO UPDATE SET source = EXCLUDED.source, "
    "hash = EXCLUDED.hash, mtime = EXCLUDED.mtime, size = EXCLUDED.size, "
    "chunk_count = EXCLUDED.chunk_count, rules = EXCLUDED.rules, root = EXCLUDED.root, "
    "indexed_at = now() "
    "RETURNING path, id"
)

# A changed file's rows that are not kept as they are (same text, same lines).
_DELETE_FILES_CHUNKS = (
    "DELETE FROM memory_chunks WHERE file_id = ANY(%s::bigint[]) AND id <> ALL(%s::bigint[])"
)

_FILES_CHUNKS = (
    "SELECT file_id, id, hash, start_line, end_line, COALESCE(search_terms, ''), created_at "
    "FROM memory_chunks WHERE file_id = ANY(%s::bigint[])"
)

# Binary COPY, not INSERT ... unnest: the rows stream in one pass without parameter arrays
# (bench/sync_rows.py: about 1.3x the rows/s into the full set of memory_chunks indexes), and
# vectors travel as float32 bytes instead of decimal text Postgres has to parse.
_COPY_CHUNKS = (
    "COPY memory_chunks (project_path, source, file_id, file_path, start_line, end_line, "
    "content, search_terms, hash, embedding, model, created_at) FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = (
    "text", "varchar", "int8", "text", "int4", "int4", "text", "text", "varchar", "vector",
    "varchar", "timestamptz",
)  # fmt: skip

_TOUCH_FILES = (
    "UPDATE memory_files AS f SET mtime = t.m, size = t.s FROM unnest(%s::bigint[], "
    "%s::float8[], %s::bigint[]) AS t(i, m, s) WHERE f.id = t.i"
)

# Unchanged files found under another root than recorded: rows from before roots were recorded
# (NULL), or a file two overlapping roots both list.
_SET_ROOTS = (
    "UPDATE memory_files AS f SET root = t.r FROM unnest(%s::bigint[], %s::text[]) AS t(i, r) "
    "WHERE f.id = t.i"
)

# Chunks cascade with their file row.
_DELETE_FILES = "DELETE FROM memory_files WHERE id = ANY(%s::bigint[])"
_PLACED_FILES = "SELECT id, path, source, root FROM memory_files WHERE id = ANY(%s::bigint[])"

# `agmem sync --prune-missing`: a project's indexed files; their chunks go with them (ON DELETE
# CASCADE), a captured row (no file) stays.
_PROJECT_FILES = (
    "SELECT count(*), coalesce(sum(chunk_count), 0) FROM memory_files WHERE project_path = %s"
)
_DELETE_PROJECT_FILES = "DELETE FROM memory_files WHERE project_path = %s"

# `--reembed`: the project's file chunks, and its captured rows (observations, summaries, kv
# memories, and the global memories every project's search reaches) that carry another model's
# vector. A captured row without a vector is the worker's: both writing it could deadlock.
_STALE_CHUNKS = text(
    "SELECT id, hash, content FROM memory_chunks WHERE project_path IN (:project, '') "
    "AND model IS DISTINCT FROM :model AND (source IN ('memory', 'sessions') "
    "OR embedding IS NOT NULL) ORDER BY id LIMIT :limit"
)

# The texts a job of the project and model still open holds: the texts to submit leave them
# out. A second `--reembed` (or a sync with a large backlog) while a job ran submitted its texts
# again, paid for at Gemini twice (ops16 review: jobs of 24 and 24 texts). The job's array is
# unnested, not probed with `?` (a scan of the array for each row): a hashed anti-join.
_NOT_HELD = (
    "NOT EXISTS (SELECT 1 FROM embedding_batches AS b, jsonb_array_elements_text(b.hashes) "
    "AS held(hash) WHERE b.project_path = :project AND b.model = :model "
    "AND b.status = 'submitted' AND held.hash = c.hash)"
)

# The texts of `_STALE_CHUNKS`'s rows without a vector of the model in the cache.
_UNCACHED_STALE_TEXTS = text(
    "SELECT DISTINCT ON (c.hash) c.hash, c.content FROM memory_chunks AS c "
    "WHERE c.project_path IN (:project, '') AND c.model IS DISTINCT FROM :model "
    "AND (c.source IN ('memory', 'sessions') OR c.embedding IS NOT NULL) AND NOT EXISTS "
    "(SELECT 1 FROM memory_embedding_cache AS e WHERE e.hash = c.hash AND e.model = :model) "
    f"AND {_NOT_HELD} ORDER BY c.hash"
)

_UNEMBEDDED_CHUNKS = text(
    "SELECT id, hash, content FROM memory_chunks WHERE project_path = :project "
    "AND source IN ('memory', 'sessions') AND embedding IS NULL ORDER BY id LIMIT :limit"
)

# Through the partial index of rows without a vector (OFFSET 0 keeps the project filter out of
# the scan): with the project's filter pushed down, the planner walks the project's index and
# reads all its rows (12-14 ms for 6,685, EXPLAIN ANALYZE) before the statistics catch up.
_ANY_UNEMBEDDED = (
    "SELECT EXISTS (SELECT 1 FROM (SELECT project_path, source FROM memory_chunks "
    "WHERE embedding IS NULL OFFSET 0) AS u "
    "WHERE project_path = %s AND source IN ('memory', 'sessions'))"
)

_MISSING_TEXTS = text(
    "SELECT DISTINCT ON (c.hash) c.hash, c.content FROM memory_chunks AS c "
    "WHERE c.project_path = :project AND c.source IN ('memory', 'sessions') "
    f"AND c.embedding IS NULL AND {_NOT_HELD} ORDER BY c.hash"
)

_FILL_FROM_CACHE = text(
    "UPDATE memory_chunks AS c SET embedding = e.embedding, model = e.model, embed_error = NULL "
    "FROM memory_embedding_cache AS e WHERE c.project_path = :project "
    "AND c.source IN ('memory', 'sessions') AND c.embedding IS NULL "
    "AND e.hash = c.hash AND e.model = :model"
)

_OPEN_BATCHES = text(
    "SELECT id, provider_job, hashes FROM embedding_batches WHERE project_path = :project "
    "AND model = :model AND status = 'submitted' ORDER BY created_at"
)

_NEW_BATCH = text(
    "INSERT INTO embedding_batches (project_path, model, hashes) "
    "VALUES (:project, :model, CAST(:hashes AS jsonb)) RETURNING id"
)

# A job is resumed for its own model only (its vectors are that model's): after a switch it was
# left `submitted` for good. The sync of its project with another model closes it, and asks for
# its cancel at Gemini (where it ran to its end, paid for, its result never read). The same
# statement takes every cancel of the project that is due, those closed now included (the
# outer SELECT sees the table as it was, so none comes twice): a sync with nothing to cancel
# costs no round trip more than before. A failed cancel is due again once its last try
# (`updated_at`) is `CANCEL_RETRY_MINUTES` old: during an outage a watch's every sync waited on
# a cancel's timeout. Taking one moves its `updated_at` to now, under a row lock the others
# skip: a worker's sweep (`_TAKE_DUE_CANCELS`) and a sync never ask one job's cancel at once.
CANCEL_RETRY_MINUTES = 10
# "JOB_STATE_EXPIRED: The job has expired because it was running or pending for more than 48
# hours" (https://ai.google.dev/gemini-api/docs/batch-api, "Monitoring job status"): past that
# there is nothing left to cancel, and a cancel still pending is settled `expired` without a
# call. Our `created_at` is the row's, written just before the job's submission, so a few
# seconds older than Gemini's own: those seconds are all a job could still run uncancelled.
JOB_LIFETIME_HOURS = 48
_EXPIRED = f"created_at < now() - interval '{JOB_LIFETIME_HOURS} hours'"
_DUE = (
    "cancel_status = 'pending' AND provider_job IS NOT NULL "
    f"AND updated_at < now() - interval '{CANCEL_RETRY_MINUTES} minutes'"
)
_TAKEN = "id, project_path, provider_job, created_at, cancel_error"
_CLOSE_SUPERSEDED_BATCHES = (
    "WITH closed AS (UPDATE embedding_batches SET status = 'failed', updated_at = now(), "
    "last_error = 'superseded: the embedding model is now ' || %(model)s, "
    "cancel_status = CASE WHEN provider_job IS NOT NULL THEN 'pending' END, "
    "cancel_requested_at = CASE WHEN provider_job IS NOT NULL THEN now() END "
    "WHERE project_path = %(project)s AND model <> %(model)s AND status = 'submitted' "
    f"RETURNING {_TAKEN}, true AS closed_now), "
    "due AS (UPDATE embedding_batches SET updated_at = now() WHERE id IN (SELECT id FROM "
    f"embedding_batches WHERE project_path = %(project)s AND {_DUE} FOR UPDATE SKIP LOCKED) "
    f"RETURNING {_TAKEN}, false AS closed_now) "
    f"SELECT id, project_path, provider_job, {_EXPIRED}, cancel_error, closed_now FROM closed "
    f"UNION ALL SELECT id, project_path, provider_job, {_EXPIRED}, cancel_error, closed_now "
    "FROM due"
)

# The worker's sweep: due cancels of any project, the longest waiting first, through the
# partial index of pending cancels. Without a key only those past a job's lifetime.
_TAKE_DUE_CANCELS = (
    "UPDATE embedding_batches AS b SET updated_at = now() FROM (SELECT id FROM "
    f"embedding_batches WHERE {_DUE} AND (NOT %(expired_only)s OR {_EXPIRED}) "
    "ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS due WHERE b.id = due.id "
    f"RETURNING b.id, b.project_path, b.provider_job, b.{_EXPIRED}, b.cancel_error"
)

_SETTLE_CANCELS = (
    "UPDATE embedding_batches AS b SET cancel_status = u.status, cancel_error = u.error, "
    "cancel_settled_at = CASE WHEN u.status <> 'pending' THEN now() END, updated_at = now() "
    "FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS u(id, status, error) WHERE b.id = u.id"
)

_UPDATE_BATCH = text(
    "UPDATE embedding_batches SET status = :status, provider_job = COALESCE(:job, provider_job), "
    "last_error = :error, updated_at = now() WHERE id = :id"
)


class KnownFile(NamedTuple):  # what the delta check needs of an indexed file, nothing more
    id: int
    path: str
    hash: str
    size: int
    mtime: float
    rules: str | None
    unrooted: bool  # indexed before roots were recorded (migration 0008)

    @property
    def under_current_rules(self) -> bool:
        """Whether the file's chunks were made under this build's privacy rules: a file indexed
        under others is re-chunked even unchanged (a secret a rule added since catches stayed
        in its chunks). Read here, where `replace_files` stamps it, and only here in the sync."""
        return self.rules == RULES_VERSION


# A root's indexed files: recorded under it, or (indexed before roots were recorded) under it.
_ROOT_HAS_FILES = text(
    "SELECT EXISTS (SELECT FROM memory_files WHERE project_path = :project AND (root = :root "
    "OR (root IS NULL AND starts_with(path, :inside))))"
)


async def root_has_files(session: AsyncSession, project: str, root: str) -> bool:
    """Whether the project has indexed files of the folder `root` (composed, as roots are
    stored)."""
    inside = root.rstrip("/") + "/"
    params = {"project": project, "root": root, "inside": inside}
    return bool((await session.execute(_ROOT_HAS_FILES, params)).scalar_one())


async def hold_lock(session: AsyncSession, key: str) -> bool:
    """Take the advisory lock `key` on this fresh session's connection, until `release_lock`;
    True when it had to wait for another holder.

    Polled with try-lock on an autocommit connection: a statement blocked in `pg_advisory_lock`
    holds a snapshot, and `CREATE INDEX CONCURRENTLY` waits for every older snapshot, so a sync
    waiting for the project would stall the rebuild of the sync it is waiting for.
    """
    await session.connection(execution_options=AUTOCOMMIT)

    async def attempt() -> bool:
        return bool((await session.execute(_TRY_LOCK, {"key": key})).scalar_one())

    return await _poll(attempt)


async def try_lock(session: AsyncSession, key: str) -> bool:
    """Take the advisory lock `key` on this fresh session's connection if it is free, until
    `release_lock`; False when another holder has it (nothing is held then)."""
    await session.connection(execution_options=AUTOCOMMIT)
    return bool((await session.execute(_TRY_LOCK, {"key": key})).scalar_one())


async def _poll(attempt: Callable[[], Awaitable[bool]]) -> bool:
    """Call `attempt` until it takes the lock (10 ms doubling to 500 ms between tries); True when
    it had to wait."""
    delay = 0.01
    waited = False
    while not await attempt():
        waited = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)
    return waited


async def release_lock(session: AsyncSession, key: str) -> None:
    await session.execute(_UNLOCK, {"key": key})


async def lock_project(
    connection: Conn, project: str, scope: Scope | None = None
) -> tuple[bool, dict[str, KnownFile]]:
    """Hold the project's sync lock on this autocommit connection until `unlock_project`, polled
    like `hold_lock`; returns whether another sync held it first, and the project's indexed
    files (those at or under the paths of `scope`, when given) as they are once the lock is held.
    The connection is then ready to send vectors.

    The first try and the read of the files go in one round trip: a sync that finds the lock
    free (nearly all) needs nothing more; one that waited reads the files again.
    """
    key = "agmem.sync:" + project
    async with connection.pipeline() as pipeline:
        tried = await connection.execute(_TRY_LOCK_RAW, (key,))
        listed = await _read_known(connection, project, scope)
        typed = await connection.execute(VECTOR_TYPE)
        await pipeline.sync()
        took = bool((await tried.fetchone() or (False,))[0])
        rows = await listed.fetchall()
        use_vector_type(connection, await typed.fetchone())
    if took:
        return False, {k.path: k for k in map(KnownFile._make, rows)}

    async def attempt() -> bool:
        cursor = await connection.execute(_TRY_LOCK_RAW, (key,))
        return bool((await cursor.fetchone() or (False,))[0])

    await _poll(attempt)
    return True, await known_files(connection, project, scope)


async def unlock_project(connection: Conn, project: str) -> None:
    await connection.execute(_UNLOCK_RAW, ("agmem.sync:" + project,))


async def known_files(
    connection: Conn, project: str, scope: Scope | None = None
) -> dict[str, KnownFile]:
    """Every indexed file of the project (at or under the paths of `scope`, when given), by
    path."""
    cursor = await _read_known(connection, project, scope)
    return {k.path: k for k in map(KnownFile._make, await cursor.fetchall())}


async def _read_known(
    connection: Conn, project: str, scope: Scope | None
) -> AsyncCursor[tuple[Any, ...]]:
    if scope is None:
        return await connection.execute(_KNOWN_FILES, (project,), binary=True)
    # A name that is not UTF-8 (lone surrogates here) has no indexed file at or under it, and
    # Postgres would refuse the text: sent, it failed the watch's sync.
    paths = [path for path in scope.paths if is_utf8(path)]
    if not scope.folders:
        return await connection.execute(_KNOWN_FILES_AT, (project, paths), binary=True)
    folders = [path + "/" for path in scope.folders if is_utf8(path)]
    return await connection.execute(
        _KNOWN_FILES_AT_OR_UNDER, (project, paths, folders), binary=True
    )


ChunkKey = tuple[str, int, int, str]  # (content hash, start line, end line, search terms)
StoredChunk = tuple[int, datetime]  # (row id, its `created_at`)


async def files_chunks(
    connection: Conn, file_ids: list[int]
) -> dict[int, dict[ChunkKey, list[StoredChunk]]]:
    """The current rows of these files: per file, the rows (id, time) under each (hash, start,
    end, search terms)."""
    found: dict[int, dict[ChunkKey, list[StoredChunk]]] = {}
    if file_ids:
        cursor = await connection.execute(_FILES_CHUNKS, (file_ids,), binary=True)
        for file_id, row_id, digest, start, end, terms, at in await cursor.fetchall():
            rows = found.setdefault(file_id, {}).setdefault((digest, start, end, terms), [])
            rows.append((row_id, at))
    return found


@dataclass(frozen=True, slots=True)
class FileChunks:
    """A changed file's new row, the chunks to write as (start, end, content, search terms, hash,
    vector or None, time of the text), and the ids of its current rows that stay as they are
    (`chunk_count` counts both)."""

    path: str
    source: str
    root: str
    hash: str
    mtime: float
    size: int
    chunks: list[tuple[int, int, str, str, str, NDArray[np.float32] | None, datetime]]
    keep: list[int]
    chunk_count: int


async def replace_files(
    connection: Conn, *, project: str, model: str, files: list[FileChunks]
) -> None:
    """Upsert the files' rows and make each file's `chunks` plus its `keep` rows its only chunks,
    in the connection's transaction (the caller's one transaction covers every file it passes);
    the rows are stamped with the privacy rules' version the chunks were made under, this
    build's (`KnownFile.under_current_rules`).
    The connection must carry the vector type (`binary_vector_connection`)."""
    if not files:
        return
    cursor = await connection.execute(
        _UPSERT_FILES,
        {
            "project": project,
            "paths": [f.path for f in files],
            "sources": [f.source for f in files],
            "hashes": [f.hash for f in files],
            "mtimes": [f.mtime for f in files],
            "sizes": [f.size for f in files],
            "counts": [f.chunk_count for f in files],
            "roots": [f.root for f in files],
            "rules": RULES_VERSION,
        },
    )
    ids: dict[str, int] = dict(await cursor.fetchall())
    keep = [row_id for f in files for row_id in f.keep]
    await connection.execute(_DELETE_FILES_CHUNKS, (list(ids.values()), keep))
    if not any(f.chunks for f in files):
        return
    async with connection.cursor() as copy_cursor, copy_cursor.copy(_COPY_CHUNKS) as copy:
        copy.set_types(list(_COPY_TYPES))
        for f in files:
            file_id = ids[f.path]
            for start, end, content, terms, digest, vector, at in f.chunks:
                await copy.write_row(
                    (
                        project,
                        f.source,
                        file_id,
                        f.path,
                        start,
                        end,
                        content,
                        terms,
                        digest,
                        vector,
                        None if vector is None else model,
                        at,
                    )
                )


async def touch_files(connection: Conn, touched: list[tuple[int, float, int]]) -> None:
    """Record a new (mtime, size) for files whose content hash did not change."""
    if touched:
        ids, mtimes, sizes = (list(column) for column in zip(*touched, strict=True))
        await connection.execute(_TOUCH_FILES, (ids, mtimes, sizes))


async def set_roots(connection: Conn, roots: list[tuple[int, str]]) -> None:
    """Record the root each of these files (by id) was found under."""
    if roots:
        ids, folders = (list(column) for column in zip(*roots, strict=True))
        await connection.execute(_SET_ROOTS, (ids, folders))


class PlacedFile(NamedTuple):
    """Where an indexed file was found: what a sync judges it by (app/sync/ownership.py)."""

    id: int
    path: str
    source: str
    root: str | None


async def placed_files(connection: Conn, ids: list[int]) -> list[PlacedFile]:
    if not ids:
        return []
    cursor = await connection.execute(_PLACED_FILES, (ids,), binary=True)
    return list(map(PlacedFile._make, await cursor.fetchall()))


async def delete_files(connection: Conn, ids: list[int]) -> None:
    if ids:
        await connection.execute(_DELETE_FILES, (ids,))


async def project_files(connection: Conn, project: str) -> tuple[int, int]:
    """How many indexed files the project has, and their chunks."""
    cursor = await connection.execute(_PROJECT_FILES, (project,))
    files, chunks = await cursor.fetchone() or (0, 0)
    return int(files), int(chunks)


async def delete_project_files(connection: Conn, project: str) -> int:
    """Delete the project's indexed files and their chunks; how many files."""
    cursor = await connection.execute(_DELETE_PROJECT_FILES, (project,))
    return cursor.rowcount


async def stale_chunks(
    session: AsyncSession, *, project: str, model: str, limit: int, only_missing: bool = False
) -> list[tuple[int, str, str]]:
    """File chunks of the project without a vector, or (unless `only_missing`) every row of the
    project and of the global memories with another model's vector (see `_STALE_CHUNKS`)."""
    query = _UNEMBEDDED_CHUNKS if only_missing else _STALE_CHUNKS
    result = await session.execute(query, {"project": project, "model": model, "limit": limit})
    return [(row.id, row.hash, row.content) for row in result]


async def any_unembedded(connection: Conn, *, project: str) -> bool:
    """Whether any file chunk of the project has no vector."""
    cursor = await connection.execute(_ANY_UNEMBEDDED, (project,))
    return bool((await cursor.fetchone() or (False,))[0])


async def missing_texts(session: AsyncSession, *, project: str, model: str) -> dict[str, str]:
    """`{hash: content}` of the project's file chunks that have no vector yet and that no open
    job of `model` holds."""
    result = await session.execute(_MISSING_TEXTS, {"project": project, "model": model})
    return {row.hash: row.content for row in result}


async def uncached_stale_texts(
    session: AsyncSession, *, project: str, model: str
) -> dict[str, str]:
    """`{hash: content}` of the rows `--reembed` moves whose vector the cache lacks and that no
    open job of `model` holds."""
    result = await session.execute(_UNCACHED_STALE_TEXTS, {"project": project, "model": model})
    return {row.hash: row.content for row in result}


async def fill_from_cache(session: AsyncSession, *, project: str, model: str) -> int:
    """Give chunks without a vector the cached one for their hash; returns rows updated."""
    result = await session.execute(_FILL_FROM_CACHE, {"project": project, "model": model})
    return int(getattr(result, "rowcount", 0) or 0)


async def open_batches(
    session: AsyncSession, *, project: str, model: str
) -> list[tuple[uuid.UUID, str | None, list[str]]]:
    """Batch API jobs submitted for the project and model and not yet applied."""
    result = await session.execute(_OPEN_BATCHES, {"project": project, "model": model})
    return [(row.id, row.provider_job, list(row.hashes)) for row in result]


async def new_batch(
    session: AsyncSession, *, project: str, model: str, hashes: list[str]
) -> uuid.UUID:
    result = await session.execute(
        _NEW_BATCH, {"project": project, "model": model, "hashes": json.dumps(hashes)}
    )
    batch_id: uuid.UUID = result.scalar_one()
    return batch_id


class CancelToDo(NamedTuple):
    """A job to cancel at Gemini, taken by whoever asks it."""

    id: uuid.UUID
    project: str
    job: str
    expired: bool  # past the JOB_LIFETIME_HOURS Gemini gives a job: nothing to cancel
    error: str | None  # the last attempt's failure


async def close_superseded_batches(
    connection: Conn, *, project: str, model: str
) -> tuple[list[str | None], list[CancelToDo]]:
    """Close the project's jobs still open for another model: their remote names, and every job
    of the project whose cancel at Gemini is due, taken. On the sync's own connection, one
    statement: in a session of its own it cost a watch's every re-sync ~7 ms of its ~25
    (bench.sync's watch mode 1.0% -> 1.35%)."""
    cursor = await connection.execute(
        _CLOSE_SUPERSEDED_BATCHES, {"project": project, "model": model}
    )
    closed: list[str | None] = []
    to_cancel: list[CancelToDo] = []
    for batch_id, project_path, job, expired, error, closed_now in await cursor.fetchall():
        if closed_now:
            closed.append(job)
        if job is not None:
            to_cancel.append(CancelToDo(batch_id, project_path, job, bool(expired), error))
    return closed, to_cancel


async def take_due_cancels(connection: Conn, *, limit: int, expired_only: bool) -> list[CancelToDo]:
    """Up to `limit` due cancels of any project, taken (not due again for
    `CANCEL_RETRY_MINUTES`); those another process is taking are skipped."""
    cursor = await connection.execute(
        _TAKE_DUE_CANCELS, {"limit": limit, "expired_only": expired_only}
    )
    return [CancelToDo(i, p, j, bool(x), e) for i, p, j, x, e in await cursor.fetchall()]


async def settle_cancels(
    connection: Conn, outcomes: list[tuple[uuid.UUID, str, str | None]]
) -> None:
    """Record each cancel's `(id, status, error)`: settled unless `pending`; `updated_at` is
    its last try."""
    ids, statuses, errors = (list(column) for column in zip(*outcomes, strict=True))
    await connection.execute(_SETTLE_CANCELS, (ids, statuses, errors))


async def update_batch(
    session: AsyncSession,
    batch_id: uuid.UUID,
    *,
    status: str,
    job: str | None = None,
    error: str | None = None,
) -> None:
    await session.execute(
        _UPDATE_BATCH, {"id": batch_id, "status": status, "job": job, "error": error}
    )
