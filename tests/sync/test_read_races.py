"""A sync's read racing another process: a lease on the file, a change in the same mtime tick."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.config import Settings
from app.sync import stamps
from tests.sync.helpers import CountingEmbedder, leased, make_project, run_sync


def _chunks_of(db: psycopg.Connection[Any], path: Path) -> str:
    rows = db.execute(
        "SELECT content FROM memory_chunks WHERE file_path = %s ORDER BY start_line", (str(path),)
    )
    return "\n".join(content for (content,) in rows)


def test_a_file_under_another_process_s_lease_is_skipped_until_the_next_sync(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # It was `unreadable: Resource temporarily unavailable`, and its indexed chunks were
    # deleted as for a file that cannot be read at all, until a sync could read it again.
    project = make_project(tmp_path / "proj")
    notes = project / "memory" / "a.md"
    run_sync(database_url, settings, CountingEmbedder(), project)
    before = _chunks_of(db, notes)
    notes.write_text(notes.read_text() + "\n## Leases\nThe deploy script takes a lease.\n")

    with leased(notes):
        held = run_sync(database_url, settings, CountingEmbedder(), project)
        kept = _chunks_of(db, notes)

    assert [(s.path, s.reason) for s in held.skipped] == [
        (
            str(notes),
            "held by another process's lease: kept as indexed until a sync can read it",
        )
    ]
    assert kept == before  # what the index held of it stays searchable meanwhile
    assert held.files_deleted == 0
    after = run_sync(database_url, settings, CountingEmbedder(), project)
    assert after.skipped == []
    assert after.files_changed == 1
    assert "The deploy script takes a lease." in _chunks_of(db, notes)


def test_a_file_changed_within_the_mtime_tick_of_the_read_is_read_again_next_sync(
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Git's racy-git case: the file changes after the sync read it, within the same tick of
    # the clock that stamps mtimes, and to the same size. Its (size, mtime) is then what the
    # sync stored, and every later sync took it as unchanged: the index kept the old text.
    monkeypatch.setattr(stamps, "TICK_SECONDS", 3600.0)  # a tick longer than any slow run
    project = make_project(tmp_path / "proj")
    notes = project / "memory" / "a.md"
    notes.write_text("# Deploy\nThe deploy runs on Mondays.\n")
    stamp = notes.stat()
    run_sync(database_url, settings, CountingEmbedder(), project)
    notes.write_text("# Deploy\nThe deploy runs on Fridays.\n")  # the same size
    os.utime(notes, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # within the same tick

    again = run_sync(database_url, settings, CountingEmbedder(), project)

    assert again.files_changed == 1
    assert "Fridays" in _chunks_of(db, notes)


def test_a_file_last_changed_ticks_before_the_read_is_stored_as_read(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Only a file stamped within a tick of the read is read again: a re-sync with nothing
    # changed still reads nothing.
    project = make_project(tmp_path / "proj")
    notes = project / "memory" / "a.md"
    os.utime(notes, (1_000_000.5, 1_000_000.5))
    run_sync(database_url, settings, CountingEmbedder(), project)

    again = run_sync(database_url, settings, CountingEmbedder(), project)

    stored = db.execute("SELECT size FROM memory_files WHERE path = %s", (str(notes),))
    assert stored.fetchone() == (notes.stat().st_size,)
    assert again.files_changed == again.files_touched == 0


@pytest.mark.parametrize(
    ("mtime", "read_at", "racy"),
    [
        (100.25, 100.25, True),  # stamped in the tick the read ended in
        (100.25, 100.3, False),  # ticks later: a change now gets another mtime
        (101.5, 100.0, True),  # from the future (another machine's clock): trusted once past
        (100.0, 101.5, True),  # whole seconds: the file system may keep 2 s (FAT)
        (100.0, 102.5, False),
    ],
)
def test_the_racy_rule(mtime: float, read_at: float, racy: bool) -> None:
    assert stamps.racy(mtime, read_at) is racy


def test_a_file_written_as_the_sync_reads_is_racy_on_the_real_clock(tmp_path: Path) -> None:
    # The kernel stamps mtimes from its coarse clock: a reading of the fine one (time.time()) is
    # up to a tick ahead of it, and a file written at that moment looked a tick old, so a change
    # within the same tick kept its (size, mtime) and was never read. No forced tick here.
    notes = tmp_path / "a.md"
    seen_racy = 0
    for n in range(50):
        read_at = stamps.stamp_clock()
        notes.write_text(f"# Notes\nversion {n}\n")  # written after the read's clock reading
        assert stamps.racy(notes.stat().st_mtime, read_at)
        # Read at once after the write: racy unless the clock ticked in between (microseconds,
        # against a tick of 1-10 ms).
        seen_racy += stamps.racy(notes.stat().st_mtime, stamps.stamp_clock())
    assert seen_racy > 0
