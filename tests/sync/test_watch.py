from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.sync.indexer import SyncRequest
from app.sync.report import SyncReport
from app.sync.watch import watch_project
from tests.conftest import make_settings
from tests.sync.helpers import CountingEmbedder, make_project


def test_watch_syncs_at_start_and_once_per_burst_of_changes(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=200)
    reports: list[SyncReport] = []

    async def go() -> None:
        engine = make_async_engine(database_url)
        stop = asyncio.Event()
        task = asyncio.create_task(
            watch_project(
                make_sessionmaker(engine),
                settings,
                CountingEmbedder(),
                SyncRequest(project_path=str(project)),
                on_report=reports.append,
                stop=stop,
            )
        )
        try:
            await _until(lambda: len(reports) == 1)
            await asyncio.sleep(0.3)  # let the watchers start
            for n in range(3):  # one burst: three saves inside the debounce window
                (project / "memory" / "new.md").write_text(f"# New\n\nversion {n}\n")
            (project / "MEMORY.md").write_text("# Root memory\n\nrewritten\n")
            await _until(lambda: len(reports) >= 2)
            await asyncio.sleep(0.6)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await engine.dispose()

    asyncio.run(go())

    assert reports[0].files_changed == 6
    assert sum(r.files_changed for r in reports[1:]) == 2
    content = db.execute("SELECT content FROM memory_chunks WHERE file_path LIKE '%new.md'")
    assert content.fetchall() == [("# New\n\nversion 2",)]


async def _until(condition: Any, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
