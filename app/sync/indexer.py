"""One sync of one project: discover, delta-check, parse, chunk, embed (cache first), write.

An unchanged file costs a `stat` and a dictionary lookup: nothing is read, hashed or written. A
file whose size or mtime moved is hashed; the same hash only records the new (mtime, size). A
changed file's chunks are replaced inside one transaction (rows whose chunk comes out the same,
same text and lines, are kept as they are), and a vanished file's row is deleted, its chunks
going with it by cascade: only a file of the sync's own roots, or of a root it forgets
(app/sync/ownership.py). A per-project advisory lock serialises concurrent syncs.

Here the run's order; a file's read, hash and chunks are app/sync/reading.py's, the buffered
write transactions app/sync/writer.py's.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import sessionmaker_url
from app.db.raw_pool import Conn
from app.index.embedding import ensure_model_index
from app.llm.embeddings import Embedder
from app.llm.ratelimit import GeminiGate
from app.projects import canonical_project, refuse_excluded
from app.sync import queries
from app.sync.bulk_index import begin_bulk_index, end_bulk_index, repair_invalid_index
from app.sync.cancels import cancel_at_gemini
from app.sync.connections import SyncConnections
from app.sync.discover import (
    ROOT_MEMORY_FILES,
    Discovery,
    FoundFile,
    Skip,
    discover,
    discover_changed,
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
from app.sync.ownership import SyncRoots, composed, kept_of_gone_roots
from app.sync.reading import Roots, Unchanged, prepare_all
from app.sync.report import Progress, SyncReport
from app.sync.writer import ChunkWriter

log = structlog.get_logger(__name__)

BATCH_FILES = 50


@dataclass(frozen=True, slots=True)
class SyncRequest:
    project_path: str
    memory_dir: str | None = None
    sessions_dir: str | None = None
    force: bool = False
    reembed: bool = False
    # Roots (memory roots or sessions folders, relative ones under the project) whose indexed
    # files this sync drops: a sync deletes only the missing files of its own roots otherwise.
    forget_dirs: tuple[str, ...] = ()
    # A named memory root must hold a memory file or `memory/` (`resolve_roots`); a watch checks
    # it at its start only: its files deleted later are dropped, the watch going on.
    memory_files_required: bool = True


class ProjectFolderMissing(Exception):
    """The project path, or a memory or sessions folder named for this sync, is not a folder."""


class RootMissing(ProjectFolderMissing):
    """A memory or sessions folder named for this sync is gone, or holds no memory file: the way
    to forget it is named only when it has indexed files to forget (`indexed`, told by
    `said_with_its_files`): for a mistyped folder the hint only sent the user to drop nothing."""

    def __init__(self, folder: Path, project: str) -> None:
        self.folder, self.project = folder, project
        # Unknown until looked up: the hint stays, as it did before anyone looked.
        self.indexed = True
        super().__init__()

    def __str__(self) -> str:
        return self.saying("--forget-dir")

    def saying(self, forget: str) -> str:
        """The message, naming the way to forget the root as the caller's surface spells it."""
        raise NotImplementedError


class MemoryFilesMissing(RootMissing):
    """A memory root named for this sync is a folder without a memory file in it."""

    def saying(self, forget: str) -> str:
        drop = f", or drop what was indexed from it with {forget}" if self.indexed else ""
        return (
            f"memory folder {self.folder} holds no memory file ({', '.join(ROOT_MEMORY_FILES)} "
            f"or memory/): name the folder that holds them{drop}"
        )


class RootFolderGone(RootMissing):
    """A memory or sessions folder named for this sync does not exist (a typo, or a root renamed
    or removed, whose indexed files stay in search until the root is forgotten)."""

    def __init__(self, folder: Path, project: str, what: str) -> None:
        self.what = what
        super().__init__(folder, project)

    def saying(self, forget: str) -> str:
        if not self.indexed:
            return f"{self.what} {self.folder} does not exist"
        return (
            f"{self.what} {self.folder} does not exist (renamed or removed? drop what was "
            f"indexed from it with {forget})"
        )


async def said_with_its_files(session: AsyncSession, missing: RootMissing) -> RootMissing:
    """`missing`, told whether its folder has indexed files (the hint to forget them is given
    only then)."""
    folder = composed(str(missing.folder))
    # No stored path holds a NUL (Postgres refuses one in text, and would fail the look-up).
    missing.indexed = "\x00" not in folder and await queries.root_has_files(
        session, missing.project, folder
    )
    return missing


class ForgetsItsOwnRoot(Exception):
    """A folder to forget is one of the roots the same sync indexes."""


# `C:\...`, `c:/...`, or after slashes as a file URI's path has it (`/C:/...`), or a drive alone.
_WINDOWS_PATH = re.compile(r"\s*/*[A-Za-z]:(?:[\\/]|\s*$)")


def resolve_roots(settings: Settings, request: SyncRequest) -> tuple[str, Path, Path]:
    """The project key and the memory and sessions folders (relative ones under the project).

    A folder named in the request must exist: a mistyped one would otherwise sync nothing and
    say nothing. A memory root named must also hold a memory file or `memory/`: a root one level
    off (`--memory-dir memory`, or a folder of notes) found none, and the sync then deleted the
    chunks of every memory file indexed before from the right root. The configured defaults may
    be absent (a project without transcripts). An excluded project
    (AGMEM_CAPTURE_EXCLUDE_PROJECTS) is ProjectExcluded: nothing of it is stored.
    """
    project = Path(os.path.abspath(Path(request.project_path).expanduser()))
    refuse_windows_path(request.project_path)
    _require_folder(project, "project folder")
    # Read from disk as spelled (a macOS folder name is NFD), stored under the key every other
    # route uses for that folder (app/projects.py), or its files and its sessions never meet.
    key = canonical_project(str(project))
    memory = project / Path(request.memory_dir or settings.sync_memory_dir).expanduser()
    sessions = project / Path(request.sessions_dir or settings.sync_sessions_dir).expanduser()
    memory, sessions = Path(os.path.normpath(memory)), Path(os.path.normpath(sessions))
    if request.memory_dir:
        _require_root(memory, key, "memory folder")
        # The default root named as itself (`--memory-dir .`, as a script passing it always
        # does) is the default's: it may hold no memory file (rev-leftovers26: a project of
        # transcripts alone synced without the flag and was refused with it).
        default = Path(os.path.normpath(project / Path(settings.sync_memory_dir).expanduser()))
        if request.memory_files_required and memory != default:
            _require_memory_root(memory, key)
    if request.sessions_dir:
        _require_root(sessions, key, "sessions folder")
    refuse_excluded(key, settings, "its files")
    return key, memory, sessions


async def resolve_roots_said(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings, request: SyncRequest
) -> tuple[str, Path, Path]:
    """`resolve_roots`, a missing root's error told whether it has indexed files to forget."""
    try:
        return resolve_roots(settings, request)
    except RootMissing as missing:
        try:
            async with sessionmaker() as session:
                await said_with_its_files(session, missing)
        except SQLAlchemyError:
            pass  # the folder is the error to report; the hint stays, as when nobody looked
        raise


def refuse_windows_path(path: str) -> None:
    """A Windows path (no such folder here) on a POSIX server is named as one: read as a name
    under the server's own folder, the error named a folder the client never did
    (`/srv/C:\\Users\\...` does not exist), or said "must be absolute"."""
    if os.name != "nt" and _WINDOWS_PATH.match(path) and not os.path.isdir(path):
        raise ProjectFolderMissing(
            f"project folder {path.strip()} is a Windows path: this server reads POSIX paths "
            "(sync it on the machine that holds it)"
        )


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


def _require_root(path: Path, project: str, what: str) -> None:
    # lexists: a dangling link is a folder that is not one, not a gone one.
    if not os.path.lexists(path):
        raise RootFolderGone(path, project, what)
    _require_folder(path, what)


def _require_memory_root(memory: Path, project: str) -> None:
    # lexists: a `memory/` that is a link, or a root file that is one, is discover's to judge
    # (and to report as skipped); only a root with nothing of memory in it is refused. A root
    # emptied on purpose looks the same as one a level off: its files go by `forget_dirs`.
    if any(os.path.lexists(memory / name) for name in (*ROOT_MEMORY_FILES, "memory")):
        return
    raise MemoryFilesMissing(memory, project)


def sync_roots(memory: Path, sessions: Path, request: SyncRequest) -> SyncRoots:
    """The roots a sync indexes (from `resolve_roots`) and the folders it forgets, resolved as
    the roots are (a relative one under the project). A folder to forget need not exist (its
    files are what is left of it); one the sync also indexes is refused."""
    project = Path(os.path.abspath(Path(request.project_path).expanduser()))
    forget = frozenset(
        composed(os.path.normpath(project / Path(folder).expanduser()))
        for folder in request.forget_dirs
    )
    # Composed, as they are stored and compared (app/sync/ownership.py): the disk is read
    # through `memory` and `sessions` as spelled, not through these.
    own = SyncRoots(composed(str(memory)), composed(str(sessions)), forget)
    if clash := sorted(forget & {own.memory, own.sessions}):
        raise ForgetsItsOwnRoot(
            f"cannot both sync and forget {clash[0]}: it is this sync's memory or sessions folder"
        )
    return own


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
    project, memory_root, sessions_root = await resolve_roots_said(sessionmaker, settings, request)
    owned = sync_roots(memory_root, sessions_root, request)
    roots = Roots.of(memory_root, sessions_root)
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
                    owned,
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
    roots: Roots,
    owned: SyncRoots,
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
        or not k.under_current_rules
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
            owned,
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
    roots: Roots,
    owned: SyncRoots,
    known: dict[str, queries.KnownFile],
    present: set[str],
    progress: Progress | None,
    gate: GeminiGate | None,
) -> None:
    """The file pass (changed files written, touched ones re-stamped, vanished ones of the sync's
    roots and the forgotten roots' deleted) and the embedding passes after it."""
    total = len(candidates)
    writer = ChunkWriter(lock, pool, embedder, project, owned, report, known, request.force)
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
                prepare_all, batch, settings, roots, known, request.force
            )
            for item in prepared:
                if isinstance(item, Skip):
                    report.skipped.append(item)
                    if not item.for_now:
                        present.discard(item.path)
                elif isinstance(item, Unchanged):
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
    # Judged by where they were found (read for these alone: see queries._KNOWN_FILES): the
    # files it did not find, and those indexed before roots were recorded that it found, which
    # get its root. A recorded root is kept: it lists its file still (`lists` judges by the
    # path), and a file two overlapping roots list (`memory/MEMORY.md`: the default's `memory/`,
    # `--memory-dir memory`'s root file) flipped to each with an UPDATE at every alternation.
    judged = [k.id for path, k in known.items() if k.unrooted or path not in present]
    placed = await queries.placed_files(lock, judged)
    await queries.set_roots(lock, [(p.id, owned.of(p.source)) for p in placed if p.path in present])
    # Another root's files stay: a sync that forgot a custom root's flag deleted them all.
    missing = [p for p in placed if p.path not in present]
    gone = [p.id for p in missing if owned.may_delete(p)]
    if said := kept_of_gone_roots([p for p in missing if not owned.may_delete(p)], project):
        report.warnings.append(said)
    if gone:
        await queries.delete_files(lock, gone)  # one statement: its own transaction
        report.files_deleted = len(gone)
    # A forgotten root's files are judged here unless this sync lists them too (then kept, and
    # the folder, forgetting nothing, is reported as well).
    for folder in owned.forgotten_in_vain(placed):
        report.warnings.append(f"no indexed file under {folder} to forget")
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
