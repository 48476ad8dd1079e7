"""Search's `since` and `until` compare when a row's text happened, for each source: not when
the worker or a sync got to it (docs/search.md, "Time filters")."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.config import Settings
from tests.conftest import make_settings
from tests.sync.helpers import CountingEmbedder, make_project, run_sync
from tests.worker.builders import PROJECT, drain, make_observation, make_session, row, rows


def search(client: TestClient, query: str, project: str, **body: Any) -> list[dict[str, Any]]:
    payload = {"query": query, "projectPath": project, "limit": 100, **body}
    response = client.post("/api/search", json=payload)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_an_observation_sent_late_is_of_the_hour_it_was_observed(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # Sent two hours after the call (an offline client, a queue): `until: 1h ago` missed it and
    # `since: 1h ago` found it, as its row had the time the worker compressed it.
    make_session(db)
    make_observation(db, "o1")
    db.execute("UPDATE observations SET observed_at = now() - interval '2 hours'")
    drain(make_settings(), database_url)
    observed = row(db, "SELECT observed_at FROM observations")["observed_at"]
    assert row(db, "SELECT created_at FROM memory_chunks")["created_at"] == observed

    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    found = search(client, "validateToken verify", PROJECT, until=hour_ago)
    assert [r["observationId"] for r in found] == ["o1"]
    assert found[0]["createdAt"] == observed.isoformat().replace("+00:00", "Z")
    assert search(client, "validateToken verify", PROJECT, since=hour_ago) == []


def test_a_checkpoint_summary_is_of_the_sessions_last_activity(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A summary of a session not ended (a checkpoint) had the time it was written.
    make_session(db)
    make_observation(db, "o1")
    db.execute(
        "UPDATE sessions SET status = 'ending', ended_at = NULL, "
        "last_activity_at = now() - interval '3 hours'"
    )
    drain(make_settings(), database_url)
    session = row(db, "SELECT status, last_activity_at FROM sessions")
    assert session["status"] == "summarized"
    (summary,) = rows(db, "SELECT created_at FROM memory_chunks WHERE source = 'summary'")
    assert summary["created_at"] == session["last_activity_at"]


def _chunk_times(db: psycopg.Connection[Any]) -> dict[str, list[datetime]]:
    times: dict[str, list[datetime]] = {}
    for path, at in db.execute(
        "SELECT file_path, created_at FROM memory_chunks ORDER BY start_line"
    ).fetchall():
        times.setdefault(Path(path).name, []).append(at)
    return times


def test_synced_files_are_of_their_messages_and_their_mtime(
    client: TestClient,
    db: psycopg.Connection[Any],
    database_url: str,
    settings: Settings,
    tmp_path: Path,
) -> None:
    # Synced today, the rows counted as today's: a transcript's chunk is of its first message's
    # time, a memory file's of the file's last change.
    project = make_project(tmp_path / "proj")
    edited = datetime(2024, 6, 1, 12, tzinfo=UTC)
    os.utime(project / "memory" / "a.md", (edited.timestamp(), edited.timestamp()))
    run_sync(database_url, settings, CountingEmbedder(), project)

    times = _chunk_times(db)
    assert set(times["a.md"]) == {edited}
    # small.jsonl (Claude Code) was said on 19 Jan 2026, legacy.json (Gemini CLI) on 11 Oct 2025;
    # its first chunk starts at the first message.
    assert times["small.jsonl"][0] == datetime(2026, 1, 19, 3, 15, 9, 400000, tzinfo=UTC)
    assert all(at.date().isoformat() == "2026-01-19" for at in times["small.jsonl"])
    assert all(at.date().isoformat() == "2025-10-11" for at in times["legacy.json"])

    query = "the session"
    before = search(client, query, str(project), sources=["sessions"], until="2026-01-01")
    assert before
    assert {Path(r["path"]).name for r in before} == {"legacy.json"}
    after = search(client, query, str(project), sources=["sessions"], since="2026-01-01")
    assert after
    assert {Path(r["path"]).name for r in after} == {"small.jsonl"}
    old_notes = search(client, "claude", str(project), sources=["memory"], until="2024-07-01")
    assert old_notes
    assert {Path(r["path"]).name for r in old_notes} == {"a.md"}


def test_a_sync_gives_a_transcript_row_of_another_time_its_message_time(
    db: psycopg.Connection[Any], database_url: str, settings: Settings, tmp_path: Path
) -> None:
    # Rows written before message times were read (migration 0013 marks their files to be read
    # again): the next sync writes each transcript row again with its time; a memory file's
    # unchanged rows keep theirs.
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    synced = _chunk_times(db)
    stale = datetime(2026, 11, 1, tzinfo=UTC)
    db.execute("UPDATE memory_chunks SET created_at = %s", (stale,))
    db.execute("UPDATE memory_files SET rules = NULL")

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    again = _chunk_times(db)
    transcripts = ("small.jsonl", "legacy.json")
    assert {name: again[name] for name in transcripts} == {
        name: synced[name] for name in transcripts
    }
    assert set(again["a.md"]) == {stale}
    assert report.chunks_written == len(synced["small.jsonl"]) + len(synced["legacy.json"])
