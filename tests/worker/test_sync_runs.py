"""Queued sync runs are executed by the worker, and a run abandoned mid-way is queued again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import make_settings
from tests.sync.helpers import make_project
from tests.worker.builders import drain, row


def test_worker_executes_a_queued_sync_run(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "shop")
    db.execute(
        "INSERT INTO sync_runs (project_path, memory_dir, sessions_dir) VALUES (%s, %s, %s)",
        (str(project), str(project), str(project / "sessions")),
    )

    drain(make_settings(), database_url)

    run = row(db, "SELECT * FROM sync_runs")
    assert run["status"] == "done", run["errors"]
    assert run["stats"]["filesScanned"] >= 4
    assert (run["locked_by"], run["locked_until"], run["attempts"]) == (None, None, 1)
    chunks = row(
        db,
        "SELECT count(*) AS n, count(embedding) AS embedded FROM memory_chunks "
        "WHERE project_path = %s AND source IN ('memory', 'sessions')",
        str(project),
    )
    assert chunks["n"] > 0
    assert chunks["embedded"] == chunks["n"]


def test_a_run_left_running_by_a_dead_worker_is_queued_again(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "shop")
    db.execute(
        "INSERT INTO sync_runs (project_path, memory_dir, status, attempts, locked_by, "
        "locked_until) VALUES (%s, %s, 'running', 1, 'dead', now() - interval '1 second')",
        (str(project), str(project)),
    )

    drain(make_settings(), database_url)

    run = row(db, "SELECT * FROM sync_runs")
    assert run["status"] == "done"
    assert run["attempts"] == 2
    assert "worker lost during the run" in run["last_error"]
