"""Embedding after the file pass: missing vectors, model migration (`--reembed`), and large
backlogs through the Gemini Batch API, resumable through `embedding_batches`.

A sync with a batch-capable provider writes its chunks with cached vectors only, then embeds what
is still missing: through one Batch API job when at least `AGMEM_GEMINI_EMBED_BATCH_THRESHOLD`
distinct texts are missing, inline otherwise, and inline for whatever a failed job leaves. The job
is recorded (content hashes in submission order, then the remote name) before anything waits on
it, so a run killed mid-wait picks the same job up on the project's next sync. A job closed
because the project's model changed is cancelled at Gemini (app/sync/cancels.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import structlog
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.raw_pool import Conn
from app.index.embedding import arrays_for, ensure_model_index, set_chunk_vectors, store_arrays
from app.llm.embeddings import Embedder
from app.sync import queries
from app.sync.report import Progress, SyncReport

if TYPE_CHECKING:
    from app.llm.gemini_embeddings import CancelOutcome

log = structlog.get_logger(__name__)

BATCH_CHUNKS = 2000


@runtime_checkable
class BatchEmbedder(Embedder, Protocol):
    def submit_batch(self, texts: list[str], *, label: str) -> str: ...

    def batch_result(self, name: str, expected: int) -> NDArray[np.float32] | None: ...

    async def cancel_batch(self, name: str) -> CancelOutcome: ...


class BatchStillRunning(Exception):
    """The job did not finish within the wait allowed; it stays recorded for the next sync."""


async def reembed_project(
    sessionmaker: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    project: str,
    report: SyncReport,
    progress: Progress | None = None,
    *,
    only_missing: bool = False,
) -> None:
    """Give every file chunk of the project a vector from the current model (cache first), or
    with `only_missing` every chunk that has none.

    Rows keep their old vector until their new one is written, so search never loses them.
    """
    while True:
        async with sessionmaker() as session, session.begin():
            rows = await queries.stale_chunks(
                session,
                project=project,
                model=embedder.identity,
                limit=BATCH_CHUNKS,
                only_missing=only_missing,
            )
            if not rows:
                return
            await ensure_model_index(await session.connection(), embedder)
            try:
                vectors, stats = await arrays_for(session, embedder, {h: c for _, h, c in rows})
            except Exception as error:  # provider failure: stop, the rest stays as it was
                report.errors.append(
                    f"re-embedding stopped: {type(error).__name__}: {error}"[:1000]
                )
                return
            await set_chunk_vectors(
                session,
                model=embedder.identity,
                ids=[i for i, _, _ in rows],
                vectors=[vectors[h] for _, h, _ in rows],
            )
        report.add_embeddings(stats)
        if not only_missing:
            report.chunks_reembedded += len(rows)
        if progress is not None:
            progress("embed", report.chunks_reembedded, report.chunks_reembedded)


async def embed_missing(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    project: str,
    report: SyncReport,
    progress: Progress | None = None,
) -> None:
    """Give the project's file chunks without a vector one: open jobs first, then a new job for
    a large backlog, then inline calls for the rest."""
    if isinstance(embedder, BatchEmbedder):
        await resume_batches(sessionmaker, settings, embedder, project, report)
        async with sessionmaker() as session:
            missing = await queries.missing_texts(session, project=project, model=embedder.identity)
        await _batch_if_large(sessionmaker, settings, embedder, project, missing, report)
    await reembed_project(sessionmaker, embedder, project, report, progress, only_missing=True)


async def reembed_with_batch(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: BatchEmbedder,
    project: str,
    report: SyncReport,
) -> None:
    """Before `--reembed`'s pass: the texts of the rows to move that the cache lacks, as one
    job when they are as many as a sync's backlog that goes to one; the pass then finds them
    cached. A switch's re-embedding, a project's largest, was inline calls only."""
    async with sessionmaker() as session:
        uncached = await queries.uncached_stale_texts(
            session, project=project, model=embedder.identity
        )
    await _batch_if_large(sessionmaker, settings, embedder, project, uncached, report)


async def _batch_if_large(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: BatchEmbedder,
    project: str,
    texts: dict[str, str],
    report: SyncReport,
) -> None:
    """`texts` through one new job when at least the threshold; what it leaves goes inline."""
    if len(texts) < settings.gemini_embed_batch_threshold:
        return
    try:
        await _run_new_batch(sessionmaker, settings, embedder, project, texts, report)
    except BatchStillRunning as error:  # kept for the next sync; inline calls meanwhile
        report.errors.append(f"{error}; embedding inline meanwhile")
    except Exception as error:  # any failure of the job: inline calls take over
        report.errors.append(
            f"batch embedding failed, falling back to inline calls: {error}"[:1000]
        )
        log.warning("sync.batch_failed", project=project, error=str(error)[:300])


async def resume_batches(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: BatchEmbedder,
    project: str,
    report: SyncReport,
) -> bool:
    """Finish the jobs an earlier run submitted and did not apply; True when one of them is
    still running (its chunks stay without a vector until a later run applies it)."""
    still_running = False
    async with sessionmaker() as session:
        pending = await queries.open_batches(session, project=project, model=embedder.identity)
    for batch_id, job, hashes in pending:
        if job is None:  # the run died between recording and submitting: nothing to wait for
            await _finish(sessionmaker, batch_id, "failed", "never submitted")
            continue
        log.info("sync.batch_resumed", project=project, job=job, texts=len(hashes))
        try:
            await _wait_and_apply(
                sessionmaker, settings, embedder, project, batch_id, job, hashes, report
            )
        except BatchStillRunning as error:
            report.errors.append(str(error))
            still_running = True
        except Exception as error:  # the job failed remotely: its texts go inline
            await _finish(sessionmaker, batch_id, "failed", str(error)[:1000])
            report.errors.append(f"batch {job} failed: {error}"[:1000])
    return still_running


async def close_superseded_batches(
    connection: Conn, embedder: Embedder, project: str
) -> list[queries.CancelToDo]:
    """Close the project's jobs of a model switched from (nothing resumes them any more); the
    jobs of the project closed so whose cancel at Gemini is due, taken for this sync, for
    `cancels.cancel_at_gemini` once the sync's embedding is done."""
    closed, to_cancel = await queries.close_superseded_batches(
        connection, project=project, model=embedder.identity
    )
    if closed:
        log.info("sync.batch_superseded", project=project, jobs=closed, model=embedder.identity)
    return to_cancel


async def _run_new_batch(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: BatchEmbedder,
    project: str,
    missing: dict[str, str],
    report: SyncReport,
) -> None:
    hashes = list(missing)
    async with sessionmaker() as session, session.begin():
        batch_id = await queries.new_batch(
            session, project=project, model=embedder.identity, hashes=hashes
        )
    label = f"agmem-{batch_id}"
    try:
        job = await asyncio.to_thread(
            embedder.submit_batch, [missing[h] for h in hashes], label=label
        )
    except Exception as error:
        await _finish(sessionmaker, batch_id, "failed", str(error)[:1000])
        raise
    async with sessionmaker() as session, session.begin():
        await queries.update_batch(session, batch_id, status="submitted", job=job)
    log.info("sync.batch_submitted", project=project, job=job, texts=len(hashes))
    try:
        await _wait_and_apply(
            sessionmaker, settings, embedder, project, batch_id, job, hashes, report
        )
    except BatchStillRunning:
        raise
    except Exception as error:
        await _finish(sessionmaker, batch_id, "failed", str(error)[:1000])
        raise


async def _wait_and_apply(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: BatchEmbedder,
    project: str,
    batch_id: uuid.UUID,
    job: str,
    hashes: list[str],
    report: SyncReport,
) -> None:
    deadline = time.monotonic() + settings.gemini_batch_timeout_seconds
    while True:
        vectors = await asyncio.to_thread(embedder.batch_result, job, len(hashes))
        if vectors is not None:
            break
        if time.monotonic() >= deadline:
            raise BatchStillRunning(f"batch {job} still running; the next sync picks it up")
        await asyncio.sleep(settings.gemini_batch_poll_seconds)
    async with sessionmaker() as session, session.begin():
        fresh = dict(zip(hashes, vectors, strict=True))
        await store_arrays(session, model=embedder.identity, vectors=fresh)
        await queries.fill_from_cache(session, project=project, model=embedder.identity)
        await queries.update_batch(session, batch_id, status="done")
    report.embeddings_computed += len(hashes)
    log.info("sync.batch_applied", project=project, job=job, texts=len(hashes))


async def _finish(
    sessionmaker: async_sessionmaker[AsyncSession], batch_id: uuid.UUID, status: str, error: str
) -> None:
    async with sessionmaker() as session, session.begin():
        await queries.update_batch(session, batch_id, status=status, error=error)
