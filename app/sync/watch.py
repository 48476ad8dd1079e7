"""`agmem sync --watch`: re-sync a project whenever its memory files or transcripts change.

watchfiles groups the events of each burst (the debounce), and a burst that arrives while a sync
runs only marks the project dirty, so saves during a sync cost one more sync, never a pile-up.
The memory root itself is watched without recursion: a project root can hold huge trees
(node_modules, build output) that the sync never reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from watchfiles import Change, DefaultFilter, awatch

from app.config import Settings
from app.llm.embeddings import Embedder
from app.sync.discover import ROOT_MEMORY_FILES, TRANSCRIPT_SUFFIXES
from app.sync.indexer import SyncRequest, resolve_roots, sync_project
from app.sync.report import Progress, SyncReport

log = structlog.get_logger(__name__)


class _Relevant(DefaultFilter):
    """Only files a sync could index (or their removal) wake it."""

    def __call__(self, change: Change, path: str) -> bool:
        name = Path(path).name
        return super().__call__(change, path) and (
            name in ROOT_MEMORY_FILES or name.endswith((".md", *TRANSCRIPT_SUFFIXES))
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
    """Sync once, then again after every burst of changes, until `stop` is set."""
    _, memory_root, sessions_root = resolve_roots(settings, request)
    dirty = asyncio.Event()
    watchers = [
        asyncio.create_task(_watch([memory_root], False, settings, dirty, stop)),
        asyncio.create_task(
            _watch([memory_root / "memory", sessions_root], True, settings, dirty, stop)
        ),
    ]
    try:
        dirty.set()
        while not stop.is_set():
            waiter = asyncio.create_task(dirty.wait())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                break
            dirty.clear()
            on_report(
                await sync_project(sessionmaker, settings, embedder, request, progress=progress)
            )
    finally:
        stop.set()
        await asyncio.gather(*watchers, return_exceptions=True)


async def _watch(
    paths: list[Path],
    recursive: bool,
    settings: Settings,
    dirty: asyncio.Event,
    stop: asyncio.Event,
) -> None:
    existing = [p for p in paths if p.is_dir()]
    if not existing:
        return
    async for changes in awatch(
        *existing,
        watch_filter=_Relevant(),
        debounce=settings.sync_watch_debounce_ms,
        recursive=recursive,
        stop_event=stop,
    ):
        log.debug("sync.watch_changes", count=len(changes))
        dirty.set()
