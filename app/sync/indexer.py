"""One sync of one project: discover, delta-check, parse, chunk, embed (cache first), write.

An unchanged file costs a `stat` and a dictionary lookup: nothing is read, hashed or written. A
file whose size or mtime moved is hashed; the same hash only records the new (mtime, size). A
changed file's chunks are replaced inside one transaction, and a vanished file's row is deleted,
its chunks going with it by cascade. A per-project advisory lock serialises concurrent syncs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.index.embedding import Vectors, arrays_for, cached_arrays, ensure_model_index
from app.index.terms import index_terms
from app.index.writer import content_hash
from app.llm.embeddings import Embedder
from app.privacy import sanitize_text
from app.sync import queries
from app.sync.bulk_index import begin_bulk_index, end_bulk_index
from app.sync.chunking import Chunk, chunk_markdown, chunk_transcript
from app.sync.discover import FoundFile, Skip, discover, looks_binary
from app.sync.embed import BatchEmbedder, embed_missing, reembed_project, resume_batches
from app.sync.report import Progress, SyncReport
from app.sync.transcripts import parse_transcript

log = structlog.get_logger(__name__)

BATCH_CHUNKS = 2000
BATCH_FILES = 200
WRITERS = 2  # concurrent write transactions: Postgres's tsvector and HNSW work is per backend


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
    chunks: list[Chunk]
    passed_over: Counter[str] | None = None  # transcript items skipped or trimmed


class ProjectFolderMissing(Exception):
    """The project path is not a directory."""


def resolve_roots(settings: Settings, request: SyncRequest) -> tuple[str, Path, Path]:
    """The project key and the memory and sessions folders (relative ones under the project)."""
    project = Path(os.path.abspath(Path(request.project_path).expanduser()))
    if not project.is_dir():
        raise ProjectFolderMissing(f"project folder {project} does not exist")
    memory = project / Path(request.memory_dir or settings.sync_memory_dir).expanduser()
    sessions = project / Path(request.sessions_dir or settings.sync_sessions_dir).expanduser()
    return str(project), Path(os.path.normpath(memory)), Path(os.path.normpath(sessions))


async def sync_project(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    *,
    progress: Progress | None = None,
) -> SyncReport:
    """Bring the project's file chunks in line with its folders, under the project's lock."""
    project, memory_root, sessions_root = resolve_roots(settings, request)
    async with sessionmaker() as lock_session:
        await queries.lock_project(lock_session, project)
        try:
            return await _sync_locked(
                sessionmaker,
                settings,
                embedder,
                request,
                project,
                memory_root,
                sessions_root,
                progress,
            )
        finally:
            await queries.unlock_project(lock_session, project)
            await lock_session.rollback()


async def _sync_locked(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    project: str,
    memory_root: Path,
    sessions_root: Path,
    progress: Progress | None,
) -> SyncReport:
    report = SyncReport()
    found = await asyncio.to_thread(
        discover,
        memory_root=memory_root,
        sessions_root=sessions_root,
        max_bytes=settings.sync_max_file_bytes,
    )
    report.files_scanned = len(found.files)
    report.skipped.extend(found.skipped)
    async with sessionmaker() as session:
        known = await queries.known_files(session, project)
    candidates = [
        f
        for f in found.files
        if request.force
        or (k := known.get(f.path)) is None
        or k.size != f.size
        or k.mtime != f.mtime
    ]
    present = {f.path for f in found.files}
    bulk = False
    if candidates:
        # Created once up front: concurrent writers creating the same index would collide.
        async with sessionmaker() as session, session.begin():
            await ensure_model_index(await session.connection(), embedder)
        # Not with a Batch API provider: its vectors can arrive hours later, and the index must
        # not stay away that long.
        if not isinstance(embedder, BatchEmbedder):
            bulk = await begin_bulk_index(sessionmaker, settings, embedder, candidates)
    try:
        await _write_all(
            sessionmaker,
            settings,
            embedder,
            request,
            project,
            report,
            candidates,
            known,
            present,
            progress,
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
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    project: str,
    report: SyncReport,
    candidates: list[FoundFile],
    known: dict[str, queries.KnownFile],
    present: set[str],
    progress: Progress | None,
) -> None:
    """The file pass (changed files written, touched ones re-stamped, vanished ones deleted) and
    the embedding passes after it."""
    writer = _Writer(sessionmaker, settings, embedder, project, report)
    total = len(candidates)
    try:
        for start in range(0, total, BATCH_FILES):
            batch = candidates[start : start + BATCH_FILES]
            prepared = await asyncio.to_thread(_prepare_all, batch, settings, known, request.force)
            for item in prepared:
                if isinstance(item, Skip):
                    report.skipped.append(item)
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
    except BaseException:
        # No writer may outlive the run (and its lock); the first error is the one to report.
        await writer.abandon()
        raise
    await writer.drain()
    gone = [k.id for path, k in known.items() if path not in present]
    if gone:
        async with sessionmaker() as session, session.begin():
            await queries.delete_files(session, gone)
        report.files_deleted = len(gone)
    if report.files_changed and not writer.embedding_down:
        await embed_missing(sessionmaker, settings, embedder, project, report, progress)
    elif isinstance(embedder, BatchEmbedder):
        await resume_batches(sessionmaker, settings, embedder, project, report)
    if request.reembed:
        await reembed_project(sessionmaker, embedder, project, report, progress)


@dataclass(slots=True)
class _Unchanged:
    found: FoundFile


def _prepare_all(
    batch: list[FoundFile], settings: Settings, known: dict[str, queries.KnownFile], force: bool
) -> list[_Prepared | _Unchanged | Skip]:
    return [_prepare(f, settings, known.get(f.path), force) for f in batch]


def _prepare(
    found: FoundFile, settings: Settings, known: queries.KnownFile | None, force: bool
) -> _Prepared | _Unchanged | Skip:
    """Read, hash, and (only when the content changed) parse and chunk one file."""
    try:
        data = Path(found.path).read_bytes()
    except OSError as error:
        return Skip(found.path, f"unreadable: {error.strerror}")
    if looks_binary(data):
        return Skip(found.path, "binary file")
    digest = hashlib.sha256(data).hexdigest()
    if known is not None and known.hash == digest and not force:
        return _Unchanged(found)
    text = data.decode("utf-8-sig")
    tokens, overlap = settings.sync_chunk_tokens, settings.sync_chunk_overlap_tokens
    if found.source == "memory":
        chunks = [
            Chunk(sanitize_text(c.content), c.start_line, c.end_line, sanitize_text(c.headings))
            for c in chunk_markdown(text, tokens=tokens, overlap=overlap)
        ]
    else:
        transcript = parse_transcript(text, tool_output_chars=settings.sync_tool_output_chars)
        chunks = chunk_transcript(transcript, tokens=tokens, overlap=overlap)
        return _Prepared(found, digest, _nonblank(chunks), transcript.skipped)
    return _Prepared(found, digest, _nonblank(chunks))


def _nonblank(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.content.strip()]


class _Writer:
    """Buffers changed files and writes them in transactions of a few thousand chunks."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        embedder: Embedder,
        project: str,
        report: SyncReport,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.embedder = embedder
        self.project = project
        self.report = report
        self.pending: list[_Prepared] = []
        self.pending_chunks = 0
        self.touched: list[tuple[int, float, int]] = []
        self.inflight: set[asyncio.Task[None]] = set()
        self.embedding_down = False
        # A provider with a Batch API gets only cache hits here; what is missing is embedded
        # after the file pass, in one job when there is enough of it (see app/sync/embed.py).
        self.cache_only = isinstance(embedder, BatchEmbedder)

    async def add(self, item: _Prepared) -> None:
        self.pending.append(item)
        self.pending_chunks += len(item.chunks)
        if self.pending_chunks >= BATCH_CHUNKS:
            await self.flush()

    async def flush(self, vectors: Vectors | None = None) -> None:
        """Hand the buffered files (and their `vectors`, when already known) to a writer task;
        at most WRITERS transactions run at once, so parsing the next files overlaps Postgres
        indexing the last ones."""
        if not self.pending and not self.touched:
            return
        pending, touched = self.pending, self.touched
        self.pending, self.pending_chunks, self.touched = [], 0, []
        while len(self.inflight) >= WRITERS:
            done, _ = await asyncio.wait(self.inflight, return_when=asyncio.FIRST_COMPLETED)
            self.inflight -= done
            for task in done:
                task.result()
        self.inflight.add(asyncio.create_task(self._commit(pending, touched, vectors)))

    async def finish(self) -> None:
        """Flush the last files split across the writers: a small sync's rows (each an HNSW
        insert of ~2 ms of Postgres CPU) are then indexed by two backends at once, not one."""
        pending, self.pending, self.pending_chunks = self.pending, [], 0
        target = sum(len(item.chunks) for item in pending) / WRITERS
        groups: list[list[_Prepared]] = [[]]
        size = 0
        for item in pending:
            if size >= target and len(groups) < WRITERS:
                groups.append([])
                size = 0
            groups[-1].append(item)
            size += len(item.chunks)
        vectors = None
        if len(groups) > 1:
            # Embedded once for all groups: two transactions looking up the cache at the same
            # time would both miss on a text the two share, and embed it twice.
            async with self.sessionmaker() as session, session.begin():
                vectors = await self._vectors(session, pending)
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
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _commit(
        self,
        pending: list[_Prepared],
        touched: list[tuple[int, float, int]],
        vectors: Vectors | None,
    ) -> None:
        """One transaction: new (mtime, size) for touched files, and each changed file's chunks
        replaced whole."""
        files = []
        async with self.sessionmaker() as session, session.begin():
            await queries.touch_files(session, touched)
            if vectors is None:
                vectors = await self._vectors(session, pending) if pending else {}
            for item in pending:
                rows = []
                for chunk in item.chunks:
                    digest = content_hash(chunk.content)
                    rows.append(
                        (
                            chunk.start_line,
                            chunk.end_line,
                            chunk.content,
                            index_terms(chunk.content, chunk.headings),
                            digest,
                            vectors.get(digest),
                        )
                    )
                found = item.found
                files.append(
                    queries.FileChunks(
                        found.path, found.source, item.hash, found.mtime, found.size, rows
                    )
                )
            await queries.replace_files(
                session, project=self.project, model=self.embedder.identity, files=files
            )
        for item in pending:
            if item.passed_over:
                self.report.transcript_items.update(item.passed_over)
        written = sum(len(f.chunks) for f in files)
        self.report.files_touched += len(touched)
        self.report.files_changed += len(pending)
        self.report.chunks_written += written

    async def _vectors(self, session: AsyncSession, pending: list[_Prepared]) -> Vectors:
        """Vectors for the buffered chunks; on a provider failure the rows are written without
        one (the worker embeds them later) and the run records the error once."""
        if self.embedding_down:
            return {}
        # Sorted, so that two writers adding the same new hashes to the cache lock them in the
        # same order and one waits for the other instead of deadlocking.
        texts = dict(
            sorted({content_hash(c.content): c.content for i in pending for c in i.chunks}.items())
        )
        if not texts:
            return {}
        if self.cache_only:
            found = await cached_arrays(session, model=self.embedder.identity, hashes=list(texts))
            self.report.embeddings_cached += len(found)
            return found
        try:
            vectors, stats = await arrays_for(session, self.embedder, texts)
        except Exception as error:  # any provider failure: network, quota, malformed answer
            self.embedding_down = True
            message = f"embedding failed, chunks left for the worker: {type(error).__name__}: "
            self.report.errors.append((message + str(error))[:1000])
            log.warning("sync.embedding_failed", project=self.project, error=str(error)[:300])
            return {}
        self.report.add_embeddings(stats)
        return vectors
