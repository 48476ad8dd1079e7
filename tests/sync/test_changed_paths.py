"""A sync limited to a watcher's changed paths: files and folders, present or gone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg

from app.config import Settings
from tests.sync.helpers import CountingEmbedder, make_project, run_sync


def indexed(db: psycopg.Connection[Any], project: Path) -> dict[str, int]:
    rows = db.execute(
        "SELECT f.path, count(c.id) FROM memory_files f LEFT JOIN memory_chunks c "
        "ON c.file_id = f.id GROUP BY f.path"
    ).fetchall()
    return {str(Path(path).relative_to(project)): count for path, count in rows}


def test_only_the_changed_paths_are_looked_at(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    memory = project / "memory"
    (memory / "a.md").write_text("# A\n\nrewritten while watched\n")
    (memory / "bank" / "nftbk_memory-bank_progress.md").write_text("# Progress\n\nnot named\n")
    before = db.execute("SELECT content FROM memory_chunks WHERE file_path LIKE '%progress.md'")
    progress_chunks = before.fetchall()

    report = run_sync(
        database_url, settings, CountingEmbedder(), project, changed=[memory / "a.md"]
    )

    assert (report.files_scanned, report.files_changed) == (1, 1)
    assert db.execute(
        "SELECT content FROM memory_chunks WHERE file_path LIKE '%/a.md'"
    ).fetchall() == [("# A\n\nrewritten while watched",)]
    # A change no event named waits for the next whole sync.
    after = db.execute("SELECT content FROM memory_chunks WHERE file_path LIKE '%progress.md'")
    assert after.fetchall() == progress_chunks


def test_a_folder_moved_out_and_back_and_a_deleted_file(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    everything = indexed(db, project)
    bank, parked = project / "memory" / "bank", tmp_path / "parked"

    bank.rename(parked)
    moved_out = run_sync(database_url, settings, CountingEmbedder(), project, changed=[bank])
    assert (moved_out.files_scanned, moved_out.files_deleted) == (0, 2)
    assert set(indexed(db, project)) == {p for p in everything if not p.startswith("memory/bank")}

    parked.rename(bank)
    embedder = CountingEmbedder()
    moved_in = run_sync(database_url, settings, embedder, project, changed=[bank])
    assert (moved_in.files_scanned, moved_in.files_changed) == (2, 2)
    assert indexed(db, project) == everything
    assert embedder.texts_embedded == 0  # the cache still held every chunk's vector

    (project / "sessions" / "small.jsonl").unlink()
    deleted = run_sync(
        database_url,
        settings,
        CountingEmbedder(),
        project,
        changed=[project / "sessions" / "small.jsonl", project / "sessions" / "never.jsonl"],
    )
    assert (deleted.files_scanned, deleted.files_deleted) == (0, 1)
    assert "sessions/small.jsonl" not in indexed(db, project)


def test_a_root_folder_among_the_changed_paths_makes_a_whole_sync(
    database_url: str, settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    (project / "memory" / "a.md").write_text("# A\n\nrewritten\n")

    report = run_sync(
        database_url, settings, CountingEmbedder(), project, changed=[project / "memory"]
    )

    assert (report.files_scanned, report.files_changed) == (6, 1)


def test_a_changed_name_that_is_not_utf8_is_reported_not_the_sync_failed(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # The watcher names such a file (or folder, present or gone) as Python holds it, with lone
    # surrogates: looking up its indexed files sent that to Postgres, and the sync failed.
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    memory = os.fsencode(project / "memory")
    with open(memory + b"/caf\xe9.md", "wb") as latin1:
        latin1.write(b"# Latin-1 name\n\nA note.\n")
    (project / "memory" / "a.md").write_text("# A\n\nrewritten while watched\n")
    changed = [Path(os.fsdecode(memory + name)) for name in (b"/caf\xe9.md", b"/gone\xff")]

    report = run_sync(
        database_url,
        settings,
        CountingEmbedder(),
        project,
        changed=[*changed, project / "memory" / "a.md"],
    )

    assert report.errors == []
    assert report.files_changed == 1
    assert [(s.path, s.reason) for s in report.skipped] == [
        (f"{project}/memory/caf\ufffd.md", "file name is not UTF-8")
    ]
