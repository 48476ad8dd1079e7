"""Sync runs as rows of `sync_runs`: queued by the API, executed by the worker (or inline).

`execute_sync_run` is the worker's entry point: it performs one queued run and records
status running -> done | failed, the run's figures in `stats` and what went wrong in `errors`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.models import SyncRunRow
from app.errors import NotFound, ValidationFailed
from app.llm.embeddings import get_embedder
from app.llm.ratelimit import GeminiGate
from app.projects import canonical_project
from app.sync.indexer import (
    ForgetsItsOwnRoot,
    MemoryFilesMissing,
    ProjectFolderMissing,
    RootMissing,
    SyncRequest,
    refuse_windows_path,
    resolve_roots,
    said_with_its_files,
    sync_project,
    sync_roots,
)
from app.sync.schemas import SyncIn, SyncRunOut

log = structlog.get_logger(__name__)


class SyncRunNotFound(NotFound):
    pass


class ProjectFolderNotFound(ValidationFailed):
    pass


class MemoryFilesNotFound(ValidationFailed):
    """A memory root named for a run exists and holds no memory file: not a missing folder."""


async def queue_run(session: AsyncSession, *, data: SyncIn, settings: Settings) -> uuid.UUID:
    """Record a queued sync run for the worker; the project folder (and any folder the request
    names) must exist. It is read as spelled, like `agmem sync -p`, and stored under its key."""
    key = canonical_project(data.project_path)
    try:
        refuse_windows_path(data.project_path)
    except ProjectFolderMissing as error:
        raise ProjectFolderNotFound(str(error)) from None
    if not Path(key).is_absolute():
        raise ProjectFolderNotFound(f"projectPath must be absolute: {data.project_path!r}")
    # The same check the run makes: the project, and any folder named, must be folders. A
    # spelling that names none is tried as its key, as all paths were before spellings were kept
    # (an NFD path to an NFC folder, a stray space).
    spellings = [data.project_path] if Path(data.project_path).is_absolute() else []
    if key not in spellings:
        spellings.append(key)
    problems: list[ProjectFolderMissing] = []
    for folder in spellings:
        request = SyncRequest(
            folder, data.memory_dir, data.sessions_dir, forget_dirs=tuple(data.forget_dirs)
        )
        try:
            _, memory, sessions = resolve_roots(settings, request)
            break
        except ProjectFolderMissing as error:
            problems.append(error)
    else:
        first = problems[0]
        if isinstance(first, RootMissing):
            said = (await said_with_its_files(session, first)).saying("forgetDirs")
            if isinstance(first, MemoryFilesMissing):
                raise MemoryFilesNotFound(said)
            raise ProjectFolderNotFound(said)
        raise ProjectFolderNotFound(str(first))
    try:
        sync_roots(memory, sessions, request)
    except ForgetsItsOwnRoot as error:
        raise ValidationFailed(str(error)) from None
    run = SyncRunRow(
        project_path=key,
        folder=None if folder == key else folder,
        memory_dir=data.memory_dir,
        sessions_dir=data.sessions_dir,
        forget_dirs=data.forget_dirs or None,
        force=data.force,
        reembed=data.reembed,
    )
    session.add(run)
    await session.flush()
    log.info("sync.queued", run_id=str(run.id), project=key)
    return run.id


async def read_run(session: AsyncSession, *, run_id: str) -> SyncRunOut:
    """A run's status and figures."""
    try:
        key = uuid.UUID(run_id)
    except ValueError:
        raise SyncRunNotFound(f"no sync run {run_id!r}") from None
    run = await session.get(SyncRunRow, key)
    if run is None:
        raise SyncRunNotFound(f"no sync run {run_id!r}")
    stats = run.stats or {}
    return SyncRunOut(
        run_id=str(run.id),
        project_path=run.project_path,
        status=run.status,
        files_scanned=stats.get("filesScanned", 0),
        files_changed=stats.get("filesChanged", 0),
        files_deleted=stats.get("filesDeleted", 0),
        chunks_written=stats.get("chunksWritten", 0),
        embeddings_computed=stats.get("embeddingsComputed", 0),
        embeddings_cached=stats.get("embeddingsCached", 0),
        transcript_items_skipped=stats.get("transcriptItemsSkipped", {}),
        skipped=stats.get("skipped", 0),
        skipped_files=stats.get("skippedFiles", []),
        errors=run.errors or [],
        warnings=stats.get("warnings", []),
        created_at=_utc_text(run.created_at),
        started_at=_utc_text(run.started_at) if run.started_at else None,
        finished_at=_utc_text(run.finished_at) if run.finished_at else None,
    )


def _utc_text(at: datetime) -> str:
    # The `...Z` form every other route answers with (isoformat alone gives `+00:00`).
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def execute_sync_run(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    run_id: uuid.UUID | str,
    gate: GeminiGate | None = None,
) -> None:
    """Perform one queued run, recording running -> done | failed with its stats and errors;
    `gate` is the worker's (its Batch cancels share the worker's Gemini quota)."""
    key = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    async with sessionmaker() as session, session.begin():
        run = (
            await session.execute(select(SyncRunRow).where(SyncRunRow.id == key).with_for_update())
        ).scalar_one_or_none()
        if run is None or run.status in ("done", "failed"):
            return
        run.status = "running"
        run.started_at = datetime.now(UTC)
        request = SyncRequest(
            project_path=run.folder or run.project_path,
            memory_dir=run.memory_dir,
            sessions_dir=run.sessions_dir,
            forget_dirs=tuple(run.forget_dirs or ()),
            force=run.force,
            reembed=run.reembed,
        )
    status, stats, errors = "done", {}, []
    try:
        report = await sync_project(
            sessionmaker, settings, get_embedder(settings), request, gate=gate
        )
        stats, errors = report.stats(), list(report.errors)
    except Exception as error:  # the run records any failure; the worker must keep going
        status = "failed"
        errors = [f"{type(error).__name__}: {error}"[:1000]]
        log.warning("sync.run_failed", run_id=str(key), error=errors[0])
    async with sessionmaker() as session, session.begin():
        run = await session.get(SyncRunRow, key)
        if run is not None:
            run.status = status
            run.stats = stats
            run.errors = errors
            run.finished_at = datetime.now(UTC)
