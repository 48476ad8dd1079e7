"""File names a sync meets on disk that Postgres cannot store as they are."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg

from app.config import Settings
from tests.sync.helpers import CountingEmbedder, make_project, run_sync


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_synced(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A name in another encoding (Latin-1's é is the byte 0xE9) reaches Python as a lone
    # surrogate, which UTF-8 and so Postgres cannot hold: the whole run failed with
    # `UnicodeEncodeError: 'utf-8' codec can't encode character '\udce9'`, no file indexed.
    project = make_project(tmp_path / "proj")
    memory = bytes(project / "memory")
    Path(os.fsdecode(memory + b"/caf\xe9.md")).write_text("# Old notes\n\nThe capybara cache.\n")
    Path(os.fsdecode(memory + b"/old\xe9/node_modules")).mkdir(parents=True)

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert report.errors == []
    shown = str(project / "memory")
    assert sorted((s.path, s.reason) for s in report.skipped) == [
        (shown + "/caf\\xe9.md", "the file name is not UTF-8"),
        (shown + "/old\\xe9/node_modules", "excluded directory node_modules"),
    ]
    assert len(db.execute("SELECT path FROM memory_files").fetchall()) == 6
