from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from watchfiles._rust_notify import WatchfilesRustInternalError

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.sync import watch as watch_module
from app.sync.discover import Skip
from app.sync.indexer import ProjectFolderMissing, SyncRequest
from app.sync.reading import LEASED
from app.sync.report import SyncReport
from app.sync.watch import watch_project
from tests.conftest import make_settings
from tests.sync.helpers import TESTDATA, CountingEmbedder, leased, make_project, run_sync

SYNC_CONNECTIONS = (
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'agmem-sync' ORDER BY pid"
)


@asynccontextmanager
async def watching(
    database_url: str, settings: Settings, project: Path, reports: list[SyncReport]
) -> AsyncIterator[None]:
    """The watch of `project` running, its first (whole) sync done and its watchers started."""
    engine = make_async_engine(database_url)
    stop = asyncio.Event()
    task = _start_watch(engine, settings, project, reports, stop)
    try:
        await _until(lambda: len(reports) == 1)
        await asyncio.sleep(0.3)  # let the watchers start
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await engine.dispose()


def _start_watch(
    engine: AsyncEngine,
    settings: Settings,
    project: Path,
    reports: list[SyncReport],
    stop: asyncio.Event,
) -> asyncio.Task[None]:
    return asyncio.create_task(
        watch_project(
            make_sessionmaker(engine),
            settings,
            CountingEmbedder(),
            SyncRequest(project_path=str(project)),
            on_report=reports.append,
            stop=stop,
        )
    )


def _watch_end(database_url: str, settings: Settings, project: Path) -> str:
    """The error a watch of `project` ends with (within 10 s)."""

    async def go() -> str:
        engine = make_async_engine(database_url)
        try:
            task = _start_watch(engine, settings, project, [], asyncio.Event())
            with pytest.raises(ProjectFolderMissing) as ended:
                await asyncio.wait_for(task, 10)
        finally:
            await engine.dispose()
        return str(ended.value)

    return asyncio.run(go())


def test_watch_syncs_at_start_and_once_per_burst_of_changes(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=200)
    reports: list[SyncReport] = []

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            for n in range(3):  # one burst: three saves inside the debounce window
                (project / "memory" / "new.md").write_text(f"# New\n\nversion {n}\n")
            (project / "MEMORY.md").write_text("# Root memory\n\nrewritten\n")
            await _until(lambda: len(reports) >= 2)
            await asyncio.sleep(0.6)

    asyncio.run(go())

    assert reports[0].files_changed == 6
    assert sum(r.files_changed for r in reports[1:]) == 2
    # A burst's sync looks at the files its events name (the root's watcher and the memory
    # folder's may wake one sync each), not at the whole project.
    assert sum(r.files_scanned for r in reports[1:]) == 2
    content = db.execute("SELECT content FROM memory_chunks WHERE file_path LIKE '%new.md'")
    assert content.fetchall() == [("# New\n\nversion 2",)]


def test_a_watched_memory_root_whose_files_are_all_deleted_is_synced_not_refused(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A named root must hold a memory file when the watch starts; deleted while watched, the
    # files' chunks go, as in a default root, and the watch goes on (refused at each burst's
    # sync, it ended the watch).
    project = make_project(tmp_path / "proj")
    notes = project / "notes"
    notes.mkdir()
    (project / "MEMORY.md").rename(notes / "MEMORY.md")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []

    def notes_files() -> int:
        row = db.execute("SELECT count(*) FROM memory_files WHERE path LIKE '%/notes/%'").fetchone()
        return int(row[0]) if row else -1

    async def go() -> None:
        engine = make_async_engine(database_url)
        stop = asyncio.Event()
        task = asyncio.create_task(
            watch_project(
                make_sessionmaker(engine),
                settings,
                CountingEmbedder(),
                SyncRequest(project_path=str(project), memory_dir="notes"),
                on_report=reports.append,
                stop=stop,
            )
        )
        try:
            await _until(lambda: len(reports) == 1)
            assert notes_files() == 1
            await asyncio.sleep(0.3)  # let the watchers start
            (notes / "MEMORY.md").unlink()
            await _until(lambda: notes_files() == 0 or task.done())
            assert not task.done(), task.exception()
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await engine.dispose()

    asyncio.run(go())


def test_watch_follows_a_folder_moved_out_and_back_in(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A move is one event for the folder, none for its files.
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    bank, parked = project / "memory" / "bank", tmp_path / "parked"

    def bank_files() -> int:
        row = db.execute("SELECT count(*) FROM memory_files WHERE path LIKE '%/bank/%'").fetchone()
        return int(row[0]) if row else -1

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            assert bank_files() == 2
            bank.rename(parked)
            await _until(lambda: bank_files() == 0)
            parked.rename(bank)
            await _until(lambda: bank_files() == 2)

    asyncio.run(go())


def test_watch_sees_edits_in_every_folder_the_sync_indexes(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The whole sync indexes memory/.idea/ (only .git, node_modules and .venv are passed over);
    # watchfiles' default filter dropped its events, so edits there stayed unindexed.
    project = make_project(tmp_path / "proj")
    note = project / "memory" / ".idea" / "n.md"
    note.parent.mkdir()
    note.write_text("# N\n\nfirst\n")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            assert _chunks(db, note) == [("# N\n\nfirst",)]
            note.write_text("# N\n\nedited\n")
            await _until(lambda: _chunks(db, note) == [("# N\n\nedited",)])

    asyncio.run(go())


def test_watch_goes_on_after_a_file_whose_name_is_not_utf8(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # watchfiles cannot hand over such a name ("Unable to decode path"): its watcher raised and
    # ended, and the watch went on silently seeing nothing, every later edit unindexed.
    project = make_project(tmp_path / "proj")
    note = project / "memory" / "n.md"
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            with open(os.fsencode(project / "memory") + b"/caf\xe9.md", "wb") as latin1:
                latin1.write(b"# Latin-1 name\n\nA note.\n")
            await _until(lambda: any(r.skipped for r in reports[1:]))
            note.write_text("# N\n\nwritten after\n")
            await _until(lambda: _chunks(db, note) == [("# N\n\nwritten after",)])

    asyncio.run(go())


def test_watch_ends_with_an_error_when_a_folder_name_is_not_utf8(
    database_url: str, tmp_path: Path
) -> None:
    # watchfiles cannot set up a watch over such a folder: the watch said "watching" and never
    # saw an edit under memory/.
    project = make_project(tmp_path / "proj")
    os.mkdir(os.fsencode(project / "memory") + b"/d\xff")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)

    assert "d\ufffd has a name that is not UTF-8" in _watch_end(database_url, settings, project)


@pytest.mark.parametrize("where", ["memory", "root"])
def test_watch_goes_on_while_a_file_whose_name_is_not_utf8_is_written_again_and_again(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    # Each such write fails watchfiles' watcher. One failing again within a second of the last
    # (re)start counted as a folder that cannot be watched: the second ended the watch ("a name
    # under it is not UTF-8"), and each one cost a whole sync and its summary line, even for a
    # log file in the project root that nothing indexes.
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    scopes: list[Any] = []
    real_sync = watch_module.sync_project

    async def counting(*args: Any, **kwargs: Any) -> SyncReport:
        scopes.append(kwargs["changed"])
        return await real_sync(*args, **kwargs)

    monkeypatch.setattr(watch_module, "sync_project", counting)
    if where == "memory":
        name = os.fsencode(project / "memory") + b"/bad\xff.md"
    else:
        name = os.fsencode(project) + b"/build-caf\xe9.log"
    note = project / "memory" / "n.md"

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            # Each write comes within a second of the watcher's restart after the one before:
            # the second already ended the watch, the first cost a whole sync.
            for _ in range(5):
                with open(name, "ab") as repeated:
                    repeated.write(b"# A line\n")
                await asyncio.sleep(0.4)
            note.write_text("# N\n\nwritten after\n")
            await _until(lambda: _chunks(db, note) == [("# N\n\nwritten after",)])

    asyncio.run(go())

    shown = [s.path for r in reports for s in r.skipped if "not UTF-8" in s.reason]
    if where == "memory":
        assert len(shown) == 1  # reported once, not at every write
    else:  # nothing indexes it: each write costs a look at the root's memory files, no more
        assert shown == []
        assert None not in scopes[1:]
        assert len(reports) == 2  # the first sync and the edit's


def test_watch_ends_naming_a_watched_folder_whose_own_name_is_not_utf8(
    database_url: str, tmp_path: Path
) -> None:
    # watchfiles refuses such a folder with UnicodeEncodeError: that watcher ended unseen, and
    # the root's, seeing the sync open it, ended the watch with "a name under it is not UTF-8".
    project = make_project(tmp_path / "proj")
    sessions = os.fsencode(project) + b"/sess\xff"
    os.mkdir(sessions)
    settings: Settings = make_settings(
        home=tmp_path / "home", sync_watch_debounce_ms=100, sync_sessions_dir=os.fsdecode(sessions)
    )

    ended = _watch_end(database_url, settings, project)
    assert ended.endswith("sess\ufffd: its name is not UTF-8")


LIMIT = "error in underlying watcher: OS file watch limit reached."


def test_watch_ends_with_watchfiles_own_words_when_a_watcher_cannot_start(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every failure of watchfiles' watcher was called "a name under it is not UTF-8", the
    # system's limit of watches reached included.
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)

    async def refused(*args: Any, **kwargs: Any) -> AsyncIterator[set[Any]]:
        raise WatchfilesRustInternalError(LIMIT)
        yield set()

    monkeypatch.setattr(watch_module, "awatch", refused)

    ended = _watch_end(database_url, settings, project)
    assert ended.endswith(f": {LIMIT}")
    assert "UTF-8" not in ended


def test_watch_picks_up_a_sessions_folder_made_after_it_started(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    shutil.rmtree(project / "sessions")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    transcript = TESTDATA / "claude-code" / "entire_c9883595c929_v2.0.74_small.jsonl"

    def transcripts() -> int:
        row = db.execute("SELECT count(*) FROM memory_files WHERE source = 'sessions'").fetchone()
        return int(row[0]) if row else -1

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            (project / "sessions").mkdir()
            await _until(lambda: len(reports) >= 2)  # the new folder: a whole sync
            await asyncio.sleep(0.3)
            shutil.copy(transcript, project / "sessions" / "later.jsonl")  # watched now
            await _until(lambda: transcripts() == 1)

    asyncio.run(go())


def test_watch_follows_a_memory_folder_replaced_between_two_looks(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # As `git checkout` of a branch whose memory/ shares no file does: the old folder goes, a new
    # one comes, well within the second between two looks at the roots.
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    memory, fresh = project / "memory", tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "x.md").write_text("# X\n\nfrom the other branch\n")

    def indexed(name: str) -> bool:
        row = db.execute("SELECT count(*) FROM memory_files WHERE path = %s", (str(memory / name),))
        return (row.fetchone() or (0,))[0] == 1

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            memory.rename(tmp_path / "old")
            fresh.rename(memory)
            await _until(lambda: indexed("x.md"))
            await _until(lambda: len(reports) >= 3)  # the new folder watched: a whole sync
            await asyncio.sleep(0.3)
            (memory / "later.md").write_text("# Later\n\nwritten in the new folder\n")
            await _until(lambda: indexed("later.md"))

    asyncio.run(go())


def test_watch_keeps_its_connections_and_makes_new_ones_when_they_are_ended(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    note = project / "memory" / "a.md"

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            kept = db.execute(SYNC_CONNECTIONS).fetchall()
            assert len(kept) == 2  # the lock's and the second writer's, idle between syncs
            note.write_text("# A\n\nfirst edit\n")
            await _until(lambda: _chunks(db, note) == [("# A\n\nfirst edit",)])
            assert db.execute(SYNC_CONNECTIONS).fetchall() == kept
            # The server ends them (a restart, an idle timeout): the next burst reconnects.
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'agmem-sync'"
            )
            note.write_text("# A\n\nsecond edit\n")
            await _until(lambda: _chunks(db, note) == [("# A\n\nsecond edit",)])

    asyncio.run(go())
    assert all(not r.errors for r in reports)


def test_watch_survives_the_server_ending_its_engine_connections_too(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A re-sync reads through the engine as well (here the bulk-index check, which every sync
    # with changed files makes at this threshold; a Gemini sync's Batch API look-up, always).
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(
        home=tmp_path / "home", sync_watch_debounce_ms=100, sync_bulk_index_min_chunks=1
    )
    reports: list[SyncReport] = []
    note = project / "memory" / "a.md"

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name IN ('agmem', 'agmem-sync')"
            )
            note.write_text("# A\n\nedited after a restart\n")
            await _until(lambda: _chunks(db, note) == [("# A\n\nedited after a restart",)])

    asyncio.run(go())


def _chunks(db: psycopg.Connection[Any], note: Path) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT content FROM memory_chunks WHERE file_path = %s", (str(note),)
    ).fetchall()


async def _until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def test_stopping_the_watch_cancels_the_sync_in_progress(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C during a sync waited for that sync to end: 20 s for a --force sync of 3,000 files,
    # where a one-shot sync stops at once (each file is its own transaction, and a bulk index
    # build is finished in a `finally`). Here the sync never ends by itself.
    project = make_project(tmp_path / "proj")
    settings: Settings = make_settings(home=tmp_path / "home")
    started, cancelled = asyncio.Event(), []

    async def endless_sync(*_args: Any, **_kwargs: Any) -> SyncReport:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        raise AssertionError("unreachable")

    monkeypatch.setattr("app.sync.watch.sync_project", endless_sync)

    async def go() -> None:
        engine = make_async_engine(database_url)
        stop = asyncio.Event()
        watch = _start_watch(engine, settings, project, [], stop)
        try:
            await asyncio.wait_for(started.wait(), 30)
            stop.set()
            # A guard against a hang, not a timing: it returns once the sync is cancelled.
            await asyncio.wait_for(watch, 30)
        finally:
            watch.cancel()
            await engine.dispose()

    asyncio.run(go())

    assert cancelled == [True]


def test_watch_reads_a_file_again_once_another_process_s_lease_on_it_is_gone(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lease given up without a write makes no event: the burst's sync skipped the file, and its
    # old chunks stayed until another event named it or the watch was restarted.
    project = make_project(tmp_path / "proj")
    note = project / "memory" / "a.md"
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    reports: list[SyncReport] = []
    syncs: list[float] = []
    real_sync = watch_module.sync_project

    async def counting(*args: Any, **kwargs: Any) -> SyncReport:
        syncs.append(asyncio.get_running_loop().time())
        return await real_sync(*args, **kwargs)

    monkeypatch.setattr(watch_module, "sync_project", counting)
    # Written outside the watched folders and moved in under the lease: a write of the file
    # itself would wait for the lease.
    edited = tmp_path / "edited.md"
    edited.write_text("# A\n\nedited while another process held it\n")

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            before = _chunks(db, note)
            with leased(edited):
                edited.rename(note)
                await _until(lambda: any(s.path == str(note) for r in reports for s in r.skipped))
                held_from = len(syncs)
                await asyncio.sleep(2.0)
                assert _chunks(db, note) == before  # kept while held
                # Retried, backing off: 0.1 s, then 0.2, 0.4, 0.8 (every 0.1 s: 20 syncs).
                assert len(syncs) - held_from <= 5
            await _until(
                lambda: _chunks(db, note) == [("# A\n\nedited while another process held it",)]
            )

    asyncio.run(go())

    held = [s for r in reports for s in r.skipped]
    assert [(s.path, s.for_now) for s in held] == [(str(note), True)]  # shown once


def test_a_file_held_for_hours_is_looked_at_once_a_minute_until_a_sync_reads_it() -> None:
    note = "/p/memory/a.md"
    retries = watch_module._LeaseRetries(0.1)
    held = SyncReport(skipped=[Skip(note, LEASED, for_now=True)])
    waits: list[float] = []
    now = 0.0
    for _ in range(14):
        retries.after_sync({note}, held, now)
        due = retries.next_due()
        assert due is not None
        waits.append(round(due - now, 3))
        assert retries.take(due - 0.001) == set()
        now = due
        assert retries.take(now) == {note}
        assert retries.next_due() is None  # taken: its sync reschedules it
    assert waits[:5] == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert waits[-2:] == [watch_module.LEASE_RETRY_MAX_SECONDS] * 2

    retries.after_sync({"/p/memory/bank"}, SyncReport(), now)  # a sync of other files
    assert retries.next_due() is None
    assert note in retries.waits
    retries.after_sync({"/p/memory"}, SyncReport(), now)  # its folder's sync read it
    assert retries.waits == {}


def test_watch_says_a_gone_roots_kept_files_once(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Each whole sync of the watch (at its start, and after a root folder came or went) named the
    # files it kept of a gone root again, the same line over and over.
    project = make_project(tmp_path / "proj")
    (project / "notes").mkdir()
    (project / "notes" / "MEMORY.md").write_text("# Notes\n\nport 8080\n")
    settings: Settings = make_settings(home=tmp_path / "home", sync_watch_debounce_ms=100)
    run_sync(database_url, settings, CountingEmbedder(), project, memory_dir="notes")
    shutil.rmtree(project / "notes")
    shutil.rmtree(project / "sessions")
    reports: list[SyncReport] = []

    async def go() -> None:
        async with watching(database_url, settings, project, reports):
            (project / "sessions").mkdir()
            await _until(lambda: len(reports) >= 2)  # the new folder: a whole sync

    asyncio.run(go())

    said = [warning for report in reports for warning in [*report.warnings, *report.errors]]
    assert said == ["kept 1 file of folders that are gone: notes/ (forget them to drop them)"]
