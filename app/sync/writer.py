"""The sync's writes: changed files' chunks buffered and written in transactions of a few
thousand chunks, at most WRITERS at once, with their vectors (cache first), so that parsing the
next files overlaps Postgres indexing the last ones (docs/benchmarks.md, Sync).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import structlog

from app.db.binary_vectors import use_vector_type
from app.db.raw_pool import Conn
from app.index.embedding import Vectors, arrays_for, cached_arrays
from app.llm.embeddings import Embedder
from app.sync import queries
from app.sync.connections import SyncConnections
from app.sync.embed import BatchEmbedder
from app.sync.ownership import SyncRoots
from app.sync.reading import Prepared
from app.sync.report import SyncReport

log = structlog.get_logger(__name__)

BATCH_CHUNKS = 2000
# The first write transactions are small and grow to BATCH_CHUNKS: Postgres starts on the first
# rows (their tsvector, index entries) within a fraction of a second instead of idling while
# Python parses and embeds the first 2 x 2,000 chunks (docs/benchmarks.md, Sync).
FIRST_BATCH_CHUNKS = 250
WRITERS = 2  # concurrent write transactions: Postgres's tsvector and HNSW work is per backend


def split_by_chunks(pending: list[Prepared], parts: int) -> list[list[Prepared]]:
    """`pending` in up to `parts` consecutive groups of about as many chunks to write."""
    target = sum(len(item.chunks) for item in pending) / parts
    groups: list[list[Prepared]] = [[]]
    size = 0
    for item in pending:
        if groups[-1] and size >= target and len(groups) < parts:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += len(item.chunks)
    return groups


class ChunkWriter:
    """Buffers changed files and writes them in transactions of a few thousand chunks."""

    def __init__(
        self,
        shared: Conn,
        pool: SyncConnections,
        embedder: Embedder,
        project: str,
        roots: SyncRoots,
        report: SyncReport,
        known: dict[str, queries.KnownFile],
        force: bool,
    ) -> None:
        self.pool = pool
        # The lock's (autocommit) connection is one of the WRITERS: a small sync then opens one
        # new connection, not two (a backend start, and a cold catalog cache that makes its first
        # insert slower), and still indexes on two backends at once.
        self.shared = shared
        # What else runs on the shared connection, to end before a write takes it.
        self.shared_ready: asyncio.Task[bool] | None = None
        self.opened: list[Conn] = []  # the other writers' connections, closed at the end
        self.free: list[Conn] = [shared]  # connections no transaction is using
        self.embedder = embedder
        self.project = project
        self.roots = roots
        self.report = report
        self.known = known
        self.force = force
        self.pending: list[Prepared] = []
        self.pending_chunks = 0
        self.batch_chunks = FIRST_BATCH_CHUNKS
        self.touched: list[tuple[int, float, int]] = []
        # The changed files' current rows, read ahead for a small sync (see `_keep_unchanged`).
        self.current: (
            asyncio.Task[dict[int, dict[queries.ChunkKey, list[queries.StoredChunk]]]] | None
        ) = None
        self.inflight: set[asyncio.Task[None]] = set()
        self.connecting: asyncio.Task[None] | None = None
        self.embedding_down = False
        self.wrote_unembedded = False  # a row written without a vector
        # A provider with a Batch API gets only cache hits here; what is missing is embedded
        # after the file pass, in one job when there is enough of it (see app/sync/embed.py).
        self.cache_only = isinstance(embedder, BatchEmbedder)

    def connect(self) -> None:
        """Open the other writers' connections while the first files are read and parsed: a new
        connection (a backend start) is waiting the writes need not do. They take the vector type
        the lock's connection looked up."""

        async def one() -> None:
            connection = await self.pool.acquire()
            self.opened.append(connection)  # closed by `close`, whatever happens next
            use_vector_type(connection, self.shared.adapters.types.get("vector"))
            self.free.append(connection)

        async def all_of_them() -> None:
            await asyncio.gather(*(one() for _ in range(WRITERS - 1)))

        self.connecting = asyncio.create_task(all_of_them())

    async def connected(self) -> None:
        """Wait for `connect`, so that every writer's connection is there to take."""
        if self.connecting is not None:
            connecting, self.connecting = self.connecting, None
            await connecting

    async def take(self) -> Conn:
        """A connection no transaction is using (the shared one first: its backend is warm), once
        one is free; a failed write's error is raised here."""
        while not self.free:
            done, _ = await asyncio.wait(self.inflight, return_when=asyncio.FIRST_COMPLETED)
            self.inflight -= done
            for task in done:
                task.result()
        connection = self.shared if self.shared in self.free else self.free[-1]
        self.free.remove(connection)
        if connection is self.shared and self.shared_ready is not None:
            try:
                await self.shared_ready
            except BaseException:
                self.free.append(connection)
                raise
        return connection

    async def add(self, item: Prepared) -> None:
        self.pending.append(item)
        self.pending_chunks += len(item.chunks)
        if self.pending_chunks >= self.batch_chunks:
            self.batch_chunks = min(self.batch_chunks * 2, BATCH_CHUNKS)
            await self.flush()

    async def flush(self, vectors: Vectors | None = None) -> None:
        """Hand the buffered files (and their `vectors`, when already known) to a writer task;
        at most WRITERS transactions run at once, so parsing the next files overlaps Postgres
        indexing the last ones."""
        if not self.pending and not self.touched:
            return
        pending, touched = self.pending, self.touched
        self.pending, self.pending_chunks, self.touched = [], 0, []
        await self.connected()
        connection = await self.take()
        self.inflight.add(asyncio.create_task(self._commit(connection, pending, touched, vectors)))

    async def finish(self) -> None:
        """Flush the last files split across the writers: a small sync's rows (each an HNSW
        insert of ~2 ms of Postgres CPU) are then indexed by two backends at once, not one."""
        pending, self.pending, self.pending_chunks = self.pending, [], 0
        await self.connected()
        groups = [pending]
        vectors = None
        if pending:
            connection = await self.take()
            try:
                # Split by the chunks left to write once the kept rows are known.
                await self._keep_unchanged(connection, pending)
                groups = split_by_chunks(pending, WRITERS)
                if len(groups) > 1:
                    # Embedded once for all groups: two transactions looking up the cache at
                    # the same time would both miss on a text the two share, and embed it twice.
                    vectors = await self._vectors(connection, pending)
            finally:
                self.free.append(connection)
        for group in groups:
            self.pending = group
            await self.flush(vectors)

    async def drain(self) -> None:
        """Wait for every writer task; the first failure is raised once all have ended."""
        tasks, self.inflight = self.inflight, set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def abandon(self) -> None:
        """Wait for every writer task, ignoring their outcome (an error is already on its way)."""
        tasks, self.inflight = self.inflight, set()
        if self.connecting is not None:
            tasks.add(self.connecting)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Hand back the connections `connect` took (one left inside a transaction is closed)."""
        opened, self.opened = self.opened, []
        for connection in opened:
            await self.pool.release(connection)

    async def _commit(
        self,
        connection: Conn,
        pending: list[Prepared],
        touched: list[tuple[int, float, int]],
        vectors: Vectors | None,
    ) -> None:
        """One transaction on `connection`: new (mtime, size) for touched files, and each changed
        file's chunks replaced whole."""
        files: list[queries.FileChunks] = []
        try:
            await self._write(connection, pending, touched, vectors, files)
        finally:
            self.free.append(connection)
        for item in pending:
            if item.passed_over:
                self.report.transcript_items.update(item.passed_over)
        written = sum(len(f.chunks) for f in files)
        self.report.files_touched += len(touched)
        self.report.files_changed += len(pending)
        self.report.chunks_written += written
        self.report.chunks_kept += sum(len(f.keep) for f in files)

    async def _write(
        self,
        connection: Conn,
        pending: list[Prepared],
        touched: list[tuple[int, float, int]],
        vectors: Vectors | None,
        files: list[queries.FileChunks],
    ) -> None:
        # Autocommit connections: psycopg's transaction block sends BEGIN, then COMMIT (ROLLBACK
        # on an error); the lock's session-level advisory lock holds across it.
        async with connection.transaction():
            await queries.touch_files(connection, touched)
            await self._keep_unchanged(connection, pending)
            if vectors is None:
                vectors = await self._vectors(connection, pending) if pending else {}
            for item in pending:
                found = item.found
                # What search's time filters compare: a transcript chunk's first message time,
                # else the file's mtime (a memory file's text is as old as its last edit; a
                # chunk kept unchanged keeps the time it was first written with).
                modified = datetime.fromtimestamp(found.mtime, UTC)
                rows = [
                    (
                        c.start_line,
                        c.end_line,
                        c.content,
                        terms,
                        digest,
                        vectors.get(digest),
                        c.at or modified,
                    )
                    for c, digest, terms in zip(item.chunks, item.hashes, item.terms, strict=True)
                ]
                self.wrote_unembedded |= any(row[5] is None for row in rows)
                files.append(
                    queries.FileChunks(
                        found.path,
                        found.source,
                        self.roots.of(found.source),
                        item.hash,
                        found.mtime,
                        found.size,
                        rows,
                        item.keep,
                        item.total,
                    )
                )
            await queries.replace_files(
                connection,
                project=self.project,
                model=self.embedder.identity,
                files=files,
            )

    async def _keep_unchanged(self, connection: Conn, pending: list[Prepared]) -> None:
        """Drop from each changed file's chunks those its current rows already hold (same text,
        same lines, same search terms, which carry the section titles): those rows stay as they
        are. An edit then costs only the chunks it changed, not a new row, tsvector and HNSW
        insert (~2-3 ms of Postgres CPU) for every chunk of the file. `--force` rewrites every
        row."""
        unchecked = [item for item in pending if not item.checked]
        for item in unchecked:
            item.checked = True
        if self.force:
            return
        ids = {
            item.found.path: known.id
            for item in unchecked
            if (known := self.known.get(item.found.path)) is not None
        }
        if self.current is not None:  # read ahead: every changed file of a small sync
            current = await self.current
        else:
            current = await queries.files_chunks(connection, list(ids.values()))
        for item in unchecked:
            rows = current.get(ids.get(item.found.path, -1))
            if not rows:
                continue
            chunks, hashes, terms = [], [], []
            for chunk, digest, term in zip(item.chunks, item.hashes, item.terms, strict=True):
                same = rows.get((digest, chunk.start_line, chunk.end_line, term), [])
                # A transcript chunk's time is its first message's, so a row of another time
                # (written before message times were read) is written again; a memory file's
                # chunk keeps the time it was first written with.
                kept = next(
                    (i for i, (_, at) in enumerate(same) if chunk.at is None or at == chunk.at),
                    None,
                )
                if kept is not None:
                    item.keep.append(same.pop(kept)[0])
                else:
                    chunks.append(chunk)
                    hashes.append(digest)
                    terms.append(term)
            item.chunks, item.hashes, item.terms = chunks, hashes, terms

    async def _vectors(self, connection: Conn, pending: list[Prepared]) -> Vectors:
        """Vectors for the buffered chunks; on a provider failure the rows are written without
        one (the worker embeds them later) and the run records the error once."""
        if self.embedding_down:
            return {}
        # Sorted, so that two writers adding the same new hashes to the cache lock them in the
        # same order and one waits for the other instead of deadlocking.
        texts = dict(
            sorted(
                {
                    digest: chunk.content
                    for item in pending
                    for chunk, digest in zip(item.chunks, item.hashes, strict=True)
                }.items()
            )
        )
        if not texts:
            return {}
        if self.cache_only:
            found = await cached_arrays(
                connection, model=self.embedder.identity, hashes=list(texts)
            )
            self.report.embeddings_cached += len(found)
            return found
        try:
            vectors, stats = await arrays_for(connection, self.embedder, texts)
        except Exception as error:  # any provider failure: network, quota, malformed answer
            self.embedding_down = True
            message = f"embedding failed, chunks left for the worker: {type(error).__name__}: "
            self.report.errors.append((message + str(error))[:1000])
            log.warning("sync.embedding_failed", project=self.project, error=str(error)[:300])
            return {}
        self.report.add_embeddings(stats)
        return vectors
