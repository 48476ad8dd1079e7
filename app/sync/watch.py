"""`agmem sync --watch`: re-sync a project whenever its memory files or transcripts change.

watchfiles groups the events of each burst (the debounce), and a burst that arrives while a sync
runs is gathered for the next one, so saves during a sync cost one more sync, never a pile-up.
A burst's sync looks only at the paths its events name (a few `stat`s, not a listing of the whole
project) on connections kept from the last sync; the first sync, and the one after a root folder
appears or goes, is a whole one. The memory root itself is watched without recursion: a project
root can hold huge trees (node_modules, build output) that the sync never reads. A file a sync
passed over under another process's lease is looked at again by the watch itself (`_LeaseRetries`):
a lease given up without a write makes no event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import stat
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy.exc
import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from watchfiles import Change, DefaultFilter, awatch
from watchfiles._rust_notify import WatchfilesRustInternalError

from app.config import Settings
from app.db.engine import sessionmaker_engine, sessionmaker_url
from app.llm.embeddings import Embedder
from app.sync.connections import SyncConnections
from app.sync.discover import ROOT_MEMORY_FILES, SKIPPED_DIRS, TRANSCRIPT_SUFFIXES, is_utf8
from app.sync.indexer import (
    ProjectFolderMissing,
    SyncRequest,
    resolve_roots_said,
    sync_project,
)
from app.sync.report import Progress, SyncReport
from app.sync.writer import WRITERS

log = structlog.get_logger(__name__)

# How often the watch looks whether a root folder appeared or went (a folder created after the
# watch started has no watcher yet, and its files' events would never come).
ROOTS_POLL_SECONDS = 1.0
# The longest wait between two looks at a file still under another process's lease: one held for
# hours costs a sync of that one file a minute, not one every debounce.
LEASE_RETRY_MAX_SECONDS = 60.0


class _Relevant(DefaultFilter):
    """Events a sync could care about: indexable files, and folders (a folder moved in or out
    brings or takes its files with one event)."""

    # The folders `discover` passes over, not DefaultFilter's longer list (.idea, __pycache__,
    # .tox, ...): a note under memory/.idea/ is indexed, so its edits must reach the sync.
    ignore_dirs = tuple(sorted(SKIPPED_DIRS))

    def __call__(self, change: Change, path: str) -> bool:
        if not super().__call__(change, path):
            return False
        name = os.path.basename(path)
        return (
            name in ROOT_MEMORY_FILES
            or name.endswith((".md", *TRANSCRIPT_SUFFIXES))
            or change == Change.deleted  # a folder, maybe: nothing indexed under it is a no-op
            or os.path.isdir(path)
        )


class _Changes:
    """The paths changed since the last sync began, or `whole` when only a listing will do."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.whole = True
        # Only recoveries from a lost burst (`recover`) since the last sync: its report is shown
        # only if it found something new.
        self.quiet = False
        self.error: Exception | None = None  # the watch ends with it
        self.ready = asyncio.Event()  # set once the watchers are up (`_watch_roots`)

    def add(self, paths: set[str]) -> None:
        self.paths |= paths
        self.quiet = False
        self.ready.set()

    def recover(self, paths: set[str] | None) -> None:
        """Look again at `paths` (None: everything), where files may have changed unseen (a burst
        watchfiles lost, a lease given up), saying nothing unless something did."""
        if not self.ready.is_set():
            self.quiet = True
        if paths is None:
            self.whole = True
        else:
            self.paths |= paths
        self.ready.set()

    def fail(self, error: Exception) -> None:
        """End the watch with `error` (a folder it cannot watch)."""
        self.error = error
        self.ready.set()

    def rescan(self) -> None:
        self.whole = True
        self.quiet = False
        self.ready.set()

    def take(self) -> tuple[set[str] | None, bool]:
        """What the next sync is to look at (None: everything), whether it is a quiet recovery,
        and a clean slate."""
        paths, whole, quiet = self.paths, self.whole, self.quiet
        self.paths, self.whole, self.quiet = set(), False, False
        self.ready.clear()
        return (None if whole else paths), quiet


class _LeaseRetries:
    """The files syncs passed over under another process's lease (`Skip.for_now`), and when to
    look at each again: after the debounce, then twice as long each time it is still held, up to
    `LEASE_RETRY_MAX_SECONDS`. A file a sync read (or found gone) since is dropped."""

    def __init__(self, first_wait: float) -> None:
        self.first_wait = first_wait
        self.waits: dict[str, float] = {}  # the last wait of each held file
        self.due: dict[str, float] = {}  # when each is looked at again (loop time); not once taken

    def after_sync(self, looked_at: set[str] | None, report: SyncReport, now: float) -> None:
        """Note what a sync of `looked_at` (None: everything) found held, ended at `now`."""
        # A leased file's name is UTF-8 (any other is skipped before it is opened): its Skip
        # keeps the path as found, the one the sync's scope takes.
        held = {skip.path for skip in report.skipped if skip.for_now}
        for path in [p for p in self.waits if p not in held and _covers(looked_at, p)]:
            del self.waits[path]
            self.due.pop(path, None)
        for path in held:
            wait = self.waits.get(path)
            wait = self.first_wait if wait is None else min(wait * 2, LEASE_RETRY_MAX_SECONDS)
            self.waits[path] = wait
            self.due[path] = now + wait

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)

    def take(self, now: float) -> set[str]:
        """The files due by `now`, for the next sync (which reschedules those still held)."""
        ready = {path for path, at in self.due.items() if at <= now}
        for path in ready:
            del self.due[path]
        return ready


def _covers(looked_at: set[str] | None, path: str) -> bool:
    """Whether a sync of the changed paths `looked_at` (None: everything) looked at `path`."""
    if looked_at is None:
        return True
    return any(
        path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
        for folder in map(os.path.normpath, looked_at)
    )


async def watch_project(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    request: SyncRequest,
    *,
    on_report: Callable[[SyncReport], None],
    stop: asyncio.Event,
    progress: Progress | None = None,
) -> None:
    """Sync once, then again after every burst of changes, and at the files syncs passed over
    under another process's lease, until `stop` is set. A burst's sync that found nothing under
    its paths (an editor's temporary file gone) is not reported."""
    _, memory_root, sessions_root = await resolve_roots_said(sessionmaker, settings, request)
    # Checked once: a root whose memory files are all deleted while watched is synced as it is.
    request = replace(request, memory_files_required=False)
    roots = (memory_root, memory_root / "memory", sessions_root)
    changes = _Changes()
    connections = SyncConnections(sessionmaker_url(sessionmaker), keep=WRITERS)
    shown_skips: set[str] = set()  # a quiet recovery does not show a skipped file again
    # Said once a watch: a gone root's kept files were named again at every pass that judged them.
    shown_warnings: set[str] = set()
    retries = _LeaseRetries(settings.sync_watch_debounce_ms / 1000)
    loop = asyncio.get_running_loop()

    async def sync(paths: set[str] | None) -> SyncReport | None:
        return await _unless_stopped(
            sync_project(
                sessionmaker,
                settings,
                embedder,
                request,
                progress=progress,
                connections=connections,
                changed=paths,
            ),
            stop,
        )

    watching = asyncio.create_task(_watch_roots(roots, settings, changes, stop))
    try:
        while not stop.is_set():
            waiter = asyncio.create_task(changes.ready.wait())
            stopper = asyncio.create_task(stop.wait())
            due = retries.next_due()
            await asyncio.wait(
                {waiter, stopper},
                timeout=None if due is None else max(0.0, due - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                break
            if changes.error is not None:
                raise changes.error
            if again := retries.take(loop.time()):
                changes.recover(again)
            elif not changes.ready.is_set():  # woken a hair before the retry was due
                continue
            changed, quiet = changes.take()
            try:
                report = await sync(changed)
            except (psycopg.OperationalError, sqlalchemy.exc.OperationalError) as error:
                # A kept connection the server ended (a restart, an idle timeout): once more on
                # new ones, the engine's too (its pool would hand out its ended ones first); a
                # server that is down fails this one too.
                log.info("sync.watch_reconnect", error=str(error)[:300])
                await connections.close()
                await sessionmaker_engine(sessionmaker).dispose()
                report = await sync(changed)
            if report is None:  # stopped during it
                break
            retries.after_sync(changed, report, loop.time())
            report.warnings = [w for w in report.warnings if w not in shown_warnings]
            if quiet:
                show = bool(
                    report.files_changed or report.files_deleted or report.errors or report.warnings
                ) or any(skip.path not in shown_skips for skip in report.skipped)
            else:
                show = changed is None or _found_anything(report)
            if show:
                shown_skips.update(skip.path for skip in report.skipped)
                shown_warnings.update(report.warnings)
                on_report(report)
    finally:
        stop.set()
        await asyncio.gather(watching, return_exceptions=True)
        await connections.close()


async def _unless_stopped(
    work: Coroutine[Any, Any, SyncReport], stop: asyncio.Event
) -> SyncReport | None:
    """The sync's report, or None: `stop` was set first, and the sync is cancelled.

    Ctrl-C during a sync waited for it to end: 20 s for a forced sync of 3,000 files. A sync
    stops as safely as a one-shot sync on Ctrl-C: a file's row and its chunks commit together,
    the advisory lock goes with its connection, and a bulk index build under way is waited for
    (app/sync/bulk_index.py).
    """
    running = asyncio.create_task(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({running, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    return None if running.cancelled() else running.result()


def _found_anything(report: SyncReport) -> bool:
    return bool(
        report.files_scanned
        or report.files_deleted
        or report.skipped
        or report.errors
        or report.warnings
    )


async def _watch_roots(
    roots: tuple[Path, Path, Path], settings: Settings, changes: _Changes, stop: asyncio.Event
) -> None:
    """Watch the roots that exist; when one appears, goes or is replaced, watch anew and sync
    everything."""
    memory_root, memory_dir, sessions_root = roots
    while not stop.is_set():
        present = tuple(map(_folder_at, roots))
        again = asyncio.Event()
        recursive = [memory_dir, sessions_root]
        watchers = [
            asyncio.create_task(_watch([memory_root], False, settings, changes, again)),
            asyncio.create_task(_watch(recursive, True, settings, changes, again)),
        ]
        try:
            # The whole sync comes once the watchers are up (awatch sets up its inotify watches
            # in its first step, which these tasks take before this one resumes): a file written
            # while the sync lists the folders then still has its event. Started the other way
            # round, a file written in between waited for the next whole sync.
            await asyncio.sleep(0)
            changes.rescan()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), ROOTS_POLL_SECONDS)
                if tuple(map(_folder_at, roots)) != present:
                    break
        finally:
            again.set()
            await asyncio.gather(*watchers, return_exceptions=True)


def _folder_at(root: Path) -> tuple[int, int] | None:
    """Which folder is at `root`, if any: one removed and made again between two looks (a `git
    checkout` that empties it, a folder swapped in by `mv`) is another folder, and the watch of
    the old one never sees its files."""
    try:
        info = os.stat(root)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


async def _watch(
    paths: list[Path],
    recursive: bool,
    settings: Settings,
    changes: _Changes,
    stop: asyncio.Event,
) -> None:
    existing = [p for p in paths if p.is_dir()]
    if not existing:
        return
    folders = ", ".join(map(_shown, existing))
    loop = asyncio.get_running_loop()
    failed_at_start = False
    while not stop.is_set():
        started = loop.time()
        failures: list[Exception] = []
        unnamed: list[UnicodeEncodeError] = []
        try:
            async for batch in awatch(
                *existing,
                watch_filter=_Relevant(),
                debounce=settings.sync_watch_debounce_ms,
                recursive=recursive,
                stop_event=stop,
            ):
                log.debug("sync.watch_changes", count=len(batch))
                changes.add({path for _, path in batch})
        except* UnicodeEncodeError as errors:  # a watched folder's own name: watchfiles takes text
            unnamed.extend(errors.exceptions)  # type: ignore[arg-type]
        except* WatchfilesRustInternalError as errors:  # raised inside awatch's task group
            failures.extend(errors.exceptions)
        if unnamed:
            named = ", ".join(_shown(p) for p in existing if not is_utf8(str(p)))
            changes.fail(ProjectFolderMissing(f"cannot watch {named}: its name is not UTF-8"))
            return
        if not failures:
            return
        error = str(failures[0])
        name = _undecodable_path(error)
        # A name is expected, and may come at every write of a log file: not a warning each time.
        (log.warning if name is None else log.info)("sync.watch_error", error=error[:300])
        if name is not None:
            # An event named a path that is not UTF-8 (written, created, even read): watchfiles
            # raises, losing the burst's other events, and its watcher is done. The watch goes
            # on with a new one, however often that happens (a log file written every 0.1 s);
            # only a folder so named under a recursive watch fails every new one as it starts.
            if recursive and os.path.isdir(name):
                problem = f"the folder {_shown(name)} has a name that is not UTF-8; rename it"
                changes.fail(ProjectFolderMissing(f"cannot watch {folders}: {problem}"))
                return
            # The lost burst: the root's watcher only serves its memory files; a recursive one,
            # anything under it (a quiet whole sync, shown only if it finds something new).
            if recursive:
                changes.recover(None)
            else:
                changes.recover({str(p / n) for p in existing for n in ROOT_MEMORY_FILES})
            continue
        # Another failure (the system's limit of watches reached, say): a watcher that fails as
        # it starts, twice in a row, ends the watch with watchfiles' own words.
        at_start = loop.time() - started < ROOTS_POLL_SECONDS
        if at_start and failed_at_start:
            changes.fail(ProjectFolderMissing(f"cannot watch {folders}: {error}"))
            return
        failed_at_start = at_start
        changes.rescan()


# How watchfiles (Rust's Debug of a path) writes a byte that is not UTF-8, and other escapes.
_RUST_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u\{[0-9A-Fa-f]+\}|.)", re.DOTALL)
_RUST_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _undecodable_path(error: str) -> bytes | None:
    """The path of watchfiles' "Unable to decode path "…" to string", as bytes."""
    match = re.fullmatch(r'Unable to decode path "(.*)" to string', error, re.DOTALL)
    if match is None:
        return None
    out = bytearray()
    position = 0
    for escape in _RUST_ESCAPE.finditer(match.group(1)):
        out += match.group(1)[position : escape.start()].encode()
        code = escape.group(1)
        if code[0] == "x" and len(code) == 3:
            out.append(int(code[1:], 16))
        elif code[0] == "u" and len(code) > 1:
            out += chr(int(code[2:-1], 16)).encode()
        else:
            out += _RUST_SIMPLE.get(code, code).encode()
        position = escape.end()
    out += match.group(1)[position:].encode()
    return bytes(out)


def _shown(path: Path | bytes) -> str:
    """A path for a message: a byte that is not UTF-8 shown as U+FFFD."""
    return os.fsencode(path).decode("utf-8", "replace")
