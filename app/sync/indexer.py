"""One sync of one project: discover, delta-check, parse, chunk, embed (cache first), write.

An unchanged file costs a `stat` and a dictionary lookup: nothing is read, hashed or written. A
file whose size or mtime moved is hashed; the same hash only records the new (mtime, size). A
changed file's chunks are replaced inside one transaction (rows whose chunk comes out the same,
same text and lines, are kept as they are), and a vanished file's row is deleted, its chunks
going with it by cascade. A per-project advisory lock serialises concurrent syncs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.binary_vectors import use_vector_type
from app.db.engine import sessionmaker_url
from app.db.raw_pool import Conn
from app.index.embedding import Vectors, arrays_for, cached_arrays, ensure_model_index
from app.index.terms import index_terms
from app.index.writer import content_hash
from app.llm.embeddings import Embedder
from app.llm.ratelimit import GeminiGate
from app.privacy import RULES_VERSION, clean_text, redact_secrets_lines, strip_private_lines
from app.projects import canonical_project, refuse_excluded
from app.sync import queries, stamps
from app.sync.bulk_index import begin_bulk_index, end_bulk_index, repair_invalid_index
from app.sync.cancels import cancel_at_gemini
from app.sync.chunking import Chunk, chunk_markdown, chunk_transcript, normalise_newlines
from app.sync.connections import SyncConnections
from app.sync.discover import (
    Discovery,
    FileSource,
    FoundFile,
    Skip,
    binary_reason,
    discover,
    discover_changed,
    looks_binary,
    needs_whole_listing,
    scope_of,
)
from app.sync.embed import (
    BatchEmbedder,
    close_superseded_batches,
    embed_missing,
    reembed_project,
    reembed_with_batch,
    resume_batches,
)
from app.sync.report import Progress, SyncReport
from app.sync.transcripts import parse_transcript, transcript_text

log = structlog.get_logger(__name__)

BATCH_CHUNKS = 2000
# The first write transactions are small and grow to BATCH_CHUNKS: Postgres starts on the first
# rows (their tsvector, index entries) within a fraction of a second instead of idling while
# Python parses and embeds the first 2 x 2,000 chunks (docs/benchmarks.md, Sync).
FIRST_BATCH_CHUNKS = 250
BATCH_FILES = 50
WRITERS = 2  # concurrent write transactions: Postgres's tsvector and HNSW work is per backend

# Not "until the next sync": a watch's next sync may look only at other files (it looks at this
# one again itself, `app/sync/watch.py`), and the lease may outlast it.
LEASED = "held by another process's lease: kept as indexed until a sync can read it"


@dataclass(frozen=True, slots=True)
class SyncRequest:
    project_path: str
    memory_dir: str | None = None
    sessions_dir: str | None = None
    force: bool = False
    reembed: bool = False


@dataclass(slots=True)
class _Prepared:
    found: FoundFile
    hash: str
    chunks: list[Chunk]  # to write: once checked, only those the file's current rows lack
    passed_over: Counter[str] | None = None  # transcript items skipped or trimmed
    hashes: list[str] = field(default_factory=list)  # the chunks' content hashes
    terms: list[str] = field(default_factory=list)  # their `search_terms` (with section titles)
    keep: list[int] = field(default_factory=list)  # current rows that stay as they are
    checked: bool = False  # chunks compared with the file's current rows
    total: int = 0  # the file's chunks, written and kept

    def __post_init__(self) -> None:
        self.hashes = [content_hash(c.content) for c in self.chunks]
        self.terms = [index_terms(c.content, c.headings) for c in self.chunks]
        self.total = len(self.chunks)


class ProjectFolderMissing(Exception):
    """The project path, or a memory or sessions folder named for this sync, is not a folder."""


def resolve_roots(settings: Settings, request: SyncRequest) -> tuple[str, Path, Path]:
    """The project key and the memory and sessions folders (relative ones under the project).

    A folder named in the request must exist: a mistyped one would otherwise sync nothing and
    say nothing. The configured defaults may be absent (a project without transcripts). An
    excluded project (AGMEM_CAPTURE_EXCLUDE_PROJECTS) is ProjectExcluded: nothing of it is stored.
    """
    project = Path(os.path.abspath(Path(request.project_path).expanduser()))
    _require_folder(project, "project folder")
    memory = project / Path(request.memory_dir or settings.sync_memory_dir).expanduser()
    sessions = project / Path(request.sessions_dir or settings.sync_sessions_dir).expanduser()
    memory, sessions = Path(os.path.normpath(memory)), Path(os.path.normpath(sessions))
    if request.memory_dir:
        _require_folder(memory, "memory folder")
    if request.sessions_dir:
        _require_folder(sessions, "sessions folder")
    # Read from disk as spelled (a macOS folder name is NFD), stored under the key every other
    # route uses for that folder (app/projects.py), or its files and its sessions never meet.
    key = canonical_project(str(project))
    refuse_excluded(key, settings, "its files")
    return key, memory, sessions


def _require_folder(path: Path, what: str) -> None:
    try:
        if path.is_dir():
            return
        problem = "is not a folder" if path.exists() else "does not exist"
    except OSError as error:
        # `is_dir` answers False only for a missing path; a name longer than the file system
        # allows (ENAMETOOLONG) or a folder that may not be searched raised, and was a 500.
        problem = f"cannot be read ({error.strerror or error})"
    raise ProjectFolderMissing(f"{what} {path} {problem}")


async def sync_project(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    *,
    progress: Progress | None = None,
    connections: SyncConnections | None = None,
    changed: Collection[str] | None = None,
    gate: GeminiGate | None = None,
) -> SyncReport:
    """Bring the project's file chunks in line with its folders, under the project's lock.

    `changed` (a watcher's paths: files or folders, present or gone) limits the sync to the files
    at or under them; the rest of the project is taken to be as the last sync left it. A path
    that is a root folder itself, or above one, makes it a whole sync. `connections` kept by the
    caller serve the next sync too; without them the sync opens its own and closes them.
    `gate` is the worker's, for a sync it runs: the sync's Batch cancels go to its quota.
    """
    project, memory_root, sessions_root = resolve_roots(settings, request)
    roots = _Roots.of(memory_root, sessions_root)
    scope = None
    if changed is not None and not request.force:
        if not needs_whole_listing(memory_root, sessions_root, changed):
            scope = scope_of(changed, memory_root)

    def listing() -> Discovery:
        if scope is not None:
            return discover_changed(
                memory_root=memory_root,
                sessions_root=sessions_root,
                scope=scope,
                max_bytes=settings.sync_max_file_bytes,
            )
        return discover(
            memory_root=memory_root,
            sessions_root=sessions_root,
            max_bytes=settings.sync_max_file_bytes,
        )

    # Discovery only stats files: it runs while the connection is made and the lock taken.
    early = asyncio.create_task(asyncio.to_thread(listing))
    try:
        # The sync's own connections, not the engine's: psycopg used directly costs a third of
        # the CPU of a SQLAlchemy session here (docs/benchmarks.md, Sync), and a fresh engine's
        # first connection would add its dialect's set-up queries.
        url = sessionmaker_url(sessionmaker)
        pool = connections or SyncConnections(url)
        lock = await pool.acquire()
        unlocked = False
        try:
            waited, known = await queries.lock_project(lock, project, scope)
            try:
                # After waiting for another sync, list the files as they are now.
                found = await (asyncio.to_thread(listing) if waited else early)
                return await _sync_locked(
                    sessionmaker,
                    lock,
                    pool,
                    settings,
                    embedder,
                    request,
                    project,
                    found,
                    roots,
                    known,
                    progress,
                    gate,
                )
            finally:
                await queries.unlock_project(lock, project)
                unlocked = True
        finally:
            # A connection that may still hold the lock is closed, which ends the lock too.
            await pool.release(lock, clean=unlocked)
    finally:
        if not early.done():  # a failure before the listing was needed: let its thread end
            await asyncio.wait([early])


async def _sync_locked(
    sessionmaker: async_sessionmaker[AsyncSession],
    lock: Conn,
    pool: SyncConnections,
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    project: str,
    found: Discovery,
    roots: _Roots,
    known: dict[str, queries.KnownFile],
    progress: Progress | None,
    gate: GeminiGate | None,
) -> SyncReport:
    report = SyncReport()
    report.files_scanned = len(found.files)
    report.skipped.extend(found.skipped)
    candidates = [
        f
        for f in found.files
        if request.force
        or (k := known.get(f.path)) is None
        or k.size != f.size
        or k.mtime != f.mtime
        or k.rules != RULES_VERSION
    ]
    present = {f.path for f in found.files}
    # A known file's path fits: its entry is in the index. A new one over the bound may not.
    if long := [
        f.path
        for f in candidates
        if f.path not in known
        and queries.index_row_bytes(project, f.path) > queries.INDEX_ROW_MAX_BYTES
    ]:
        refused = set(await queries.unindexable(lock, project, long))
        candidates = [f for f in candidates if f.path not in refused]
        limit = queries.INDEX_ROW_MAX_BYTES
        for path in sorted(refused):
            size = queries.index_row_bytes(project, path)
            reason = f"path too long to index ({size} bytes with the project path, over {limit})"
            report.skipped.append(Skip(path, reason))
    bulk = False
    # Also with nothing to index: a build cut short (SIGTERM, a second Ctrl-C) left an invalid
    # index that only a sync with changes repaired, while Postgres kept updating it unused.
    await repair_invalid_index(sessionmaker, embedder)
    if candidates:
        # Created once up front: concurrent writers creating the same index would collide.
        await ensure_model_index(lock, embedder)
        # Not with a Batch API provider: its vectors can arrive hours later, and the index must
        # not stay away that long.
        if not isinstance(embedder, BatchEmbedder):
            bulk = await begin_bulk_index(sessionmaker, settings, embedder, candidates)
    try:
        await _write_all(
            sessionmaker,
            lock,
            pool,
            settings,
            embedder,
            request,
            project,
            report,
            candidates,
            roots,
            known,
            present,
            progress,
            gate,
        )
    finally:
        if bulk:
            await end_bulk_index(sessionmaker, embedder)
    log.info(
        "sync.done",
        project=project,
        **{k: v for k, v in report.stats().items() if k != "skippedFiles"},
    )
    return report


async def _write_all(
    sessionmaker: async_sessionmaker[AsyncSession],
    lock: Conn,
    pool: SyncConnections,
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    project: str,
    report: SyncReport,
    candidates: list[FoundFile],
    roots: _Roots,
    known: dict[str, queries.KnownFile],
    present: set[str],
    progress: Progress | None,
    gate: GeminiGate | None,
) -> None:
    """The file pass (changed files written, touched ones re-stamped, vanished ones deleted) and
    the embedding passes after it."""
    total = len(candidates)
    writer = _Writer(lock, pool, embedder, project, report, known, request.force)
    earlier: asyncio.Task[bool] | None = None
    if total:
        # A small re-sync's changed files were indexed before: their current rows (to keep the
        # unchanged chunks) are read through the lock's connection while the files are read,
        # not after (a round trip and ~5 ms of waiting on the critical path).
        ids = [k.id for f in candidates if (k := known.get(f.path)) is not None]
        if ids and not request.force and total <= BATCH_FILES:
            writer.current = asyncio.create_task(queries.files_chunks(lock, ids))

        async def ready() -> bool:
            # The lock's connection looks for chunks an earlier run left without a vector, while
            # the first files are read: the embedding pass after the writes (a scan of the
            # project's rows, ~10 ms) is then skipped when there is nothing to do.
            if writer.current is not None:
                await writer.current
            if writer.cache_only:  # its pass also resumes Batch API jobs: it always runs
                return True
            return await queries.any_unembedded(lock, project=project)

        earlier = writer.shared_ready = asyncio.create_task(ready())
        writer.connect()
    try:
        for start in range(0, total, BATCH_FILES):
            batch = candidates[start : start + BATCH_FILES]
            prepared = await asyncio.to_thread(
                _prepare_all, batch, settings, roots, known, request.force
            )
            for item in prepared:
                if isinstance(item, Skip):
                    report.skipped.append(item)
                    if not item.for_now:
                        present.discard(item.path)
                elif isinstance(item, _Unchanged):
                    writer.touched.append(
                        (known[item.found.path].id, item.found.mtime, item.found.size)
                    )
                else:
                    await writer.add(item)
            if progress is not None:
                progress("index", min(start + BATCH_FILES, total), total)
        await writer.finish()
        await writer.drain()
    except BaseException:
        # No writer (nor the lock connection's query) may outlive the run and its lock; the
        # first error is the one to report.
        if earlier is not None:
            await asyncio.gather(earlier, return_exceptions=True)
        await writer.abandon()
        raise
    finally:
        await writer.close()
    left_unembedded = True
    if earlier is not None:
        left_unembedded = writer.wrote_unembedded or await earlier
    gone = [k.id for path, k in known.items() if path not in present]
    if gone:
        await queries.delete_files(lock, gone)  # one statement: its own transaction
        report.files_deleted = len(gone)
    to_cancel = await close_superseded_batches(lock, embedder, project)  # one statement
    if report.files_changed and not writer.embedding_down and left_unembedded:
        await embed_missing(sessionmaker, settings, embedder, project, report, progress)
    elif isinstance(embedder, BatchEmbedder):
        # With Gemini the worker leaves file chunks to the sync (a Batch job may hold them), so
        # a run with nothing changed still gives a vector to what an outage or a killed run left
        # without one, unless a job still running holds them (no paying twice).
        still_running = await resume_batches(sessionmaker, settings, embedder, project, report)
        if not (still_running or writer.embedding_down) and await queries.any_unembedded(
            lock, project=project
        ):
            await embed_missing(sessionmaker, settings, embedder, project, report, progress)
    if request.reembed:
        if isinstance(embedder, BatchEmbedder):
            await reembed_with_batch(sessionmaker, settings, embedder, project, report)
        await reembed_project(sessionmaker, embedder, project, report, progress)
    # Last: the sync's own work first, then at most CANCEL_DEADLINE_SECONDS on Gemini's answers.
    await cancel_at_gemini(lock, settings, embedder, to_cancel, gate)


@dataclass(frozen=True, slots=True)
class _Roots:
    """The memory and sessions folders with symlinks resolved: a file is read only from inside
    its own (the listing checked the name; by the read it can point elsewhere)."""

    memory: str
    sessions: str

    @classmethod
    def of(cls, memory: Path, sessions: Path) -> _Roots:
        return cls(os.path.realpath(memory), os.path.realpath(sessions))

    def holds(self, source: FileSource, real: str) -> bool:
        root = self.memory if source == "memory" else self.sessions
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(slots=True)
class _Unchanged:
    found: FoundFile


def _prepare_all(
    batch: list[FoundFile],
    settings: Settings,
    roots: _Roots,
    known: dict[str, queries.KnownFile],
    force: bool,
) -> list[_Prepared | _Unchanged | Skip]:
    return [_prepare(f, settings, known.get(f.path), force, roots) for f in batch]


def _prepare(
    found: FoundFile,
    settings: Settings,
    known: queries.KnownFile | None,
    force: bool,
    roots: _Roots,
) -> _Prepared | _Unchanged | Skip:
    """Read, hash, and (only when the content changed) parse and chunk one file."""
    try:
        data = _read_regular(found, roots)
    except BlockingIOError:
        # The open, non-blocking, found a write lease of another process (Samba, an NFS
        # server): the kernel has told the holder to give it up.
        return Skip(found.path, LEASED, for_now=True)
    except OSError as error:
        return Skip(found.path, f"unreadable: {error.strerror}")
    if isinstance(data, Skip):
        return data
    if stamps.racy(found.mtime, stamps.stamp_clock()):
        found = found._replace(size=stamps.RACY_SIZE)  # read again by the next sync
    # A transcript is judged by its lines (below): one an agent is appending can be read ending
    # inside a character, and a crash can leave its tail as NUL bytes.
    binary = looks_binary(data)
    if binary and found.source == "memory":
        return Skip(found.path, binary_reason(data))
    digest = hashlib.sha256(data).hexdigest()
    # A file indexed under other privacy rules is re-chunked even unchanged: a secret a rule
    # added since catches stayed in its chunks (its rows that come out the same are kept).
    if known is not None and known.hash == digest and known.rules == RULES_VERSION and not force:
        return _Unchanged(found)
    text = "" if binary else data.decode("utf-8-sig")
    tokens, overlap = settings.sync_chunk_tokens, settings.sync_chunk_overlap_tokens
    if found.source == "memory":
        # Private spans and secrets go before chunking, each replaced by the newlines it held:
        # a span or a key longer than a chunk showed in the chunks after its first line's.
        # Line ends made \n first: a span or key keeps only the \n it held, and a lone CR (a
        # line end to the chunker) went with it, every later line's number off.
        text = redact_secrets_lines(strip_private_lines(normalise_newlines(clean_text(text))))
        chunks = chunk_markdown(text, tokens=tokens, overlap=overlap)
    else:
        not_utf8 = 0
        if binary:
            text, not_utf8 = transcript_text(data)
        transcript = parse_transcript(text, tool_output_chars=settings.sync_tool_output_chars)
        if binary and not transcript.entries:
            return Skip(found.path, binary_reason(data))
        if not_utf8:
            transcript.skipped["not UTF-8"] += not_utf8
        chunks = chunk_transcript(transcript, tokens=tokens, overlap=overlap)
        return _Prepared(found, digest, _nonblank(chunks), transcript.skipped)
    return _Prepared(found, digest, _nonblank(chunks))


def _read_regular(found: FoundFile, roots: _Roots) -> bytes | Skip:
    """The file's bytes, or a Skip when it is no longer what the listing saw: its checks were
    earlier, and a FIFO put in its place blocked the read (and the project's lock) for ever, a
    link to outside the root put there had that file indexed."""
    descriptor = os.open(found.path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # Checked on the raw descriptor: wrapping a folder's raised IsADirectoryError and the
        # descriptor was never closed (one leaked per read, in a watch running for days).
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return Skip(found.path, "not a regular file")
        # O_NONBLOCK was for the open (a FIFO); kept for the read, an EAGAIN from a network file
        # system or a lease break ended the read there and a partial file was hashed as whole.
        os.set_blocking(descriptor, True)
        # The file opened, not the name: a check of the name would leave the same race open.
        if not roots.holds(found.source, _opened_path(descriptor, found.path)):
            return Skip(found.path, "symlink escapes the root")
        with open(descriptor, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(descriptor)


def _opened_path(descriptor: int, path: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:  # no /proc (macOS, some sandboxes): the name's target now, the best left
        return os.path.realpath(path)


def _nonblank(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.content.strip()]


def _split(pending: list[_Prepared], parts: int) -> list[list[_Prepared]]:
    """`pending` in up to `parts` consecutive groups of about as many chunks to write."""
    target = sum(len(item.chunks) for item in pending) / parts
    groups: list[list[_Prepared]] = [[]]
    size = 0
    for item in pending:
        if groups[-1] and size >= target and len(groups) < parts:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += len(item.chunks)
    return groups


class _Writer:
    """Buffers changed files and writes them in transactions of a few thousand chunks."""

    def __init__(
        self,
        shared: Conn,
        pool: SyncConnections,
        embedder: Embedder,
        project: str,
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
        self.report = report
        self.known = known
        self.force = force
        self.pending: list[_Prepared] = []
        self.pending_chunks = 0
        self.batch_chunks = FIRST_BATCH_CHUNKS
        self.touched: list[tuple[int, float, int]] = []
        # The changed files' current rows, read ahead for a small sync (see `_keep_unchanged`).
        self.current: asyncio.Task[dict[int, dict[queries.ChunkKey, list[int]]]] | None = None
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

    async def add(self, item: _Prepared) -> None:
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
                groups = _split(pending, WRITERS)
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
        pending: list[_Prepared],
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
        pending: list[_Prepared],
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
                rows = [
                    (c.start_line, c.end_line, c.content, terms, digest, vectors.get(digest))
                    for c, digest, terms in zip(item.chunks, item.hashes, item.terms, strict=True)
                ]
                self.wrote_unembedded |= any(row[5] is None for row in rows)
                found = item.found
                files.append(
                    queries.FileChunks(
                        found.path,
                        found.source,
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
                rules=RULES_VERSION,
            )

    async def _keep_unchanged(self, connection: Conn, pending: list[_Prepared]) -> None:
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
                same = rows.get((digest, chunk.start_line, chunk.end_line, term))
                if same:
                    item.keep.append(same.pop())
                else:
                    chunks.append(chunk)
                    hashes.append(digest)
                    terms.append(term)
            item.chunks, item.hashes, item.terms = chunks, hashes, terms

    async def _vectors(self, connection: Conn, pending: list[_Prepared]) -> Vectors:
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
