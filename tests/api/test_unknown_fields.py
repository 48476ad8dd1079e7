"""Every body that refuses unknown fields says so one way: a 422 naming each, with the close one.

Memories and resume named them (`'tag' (did you mean 'tags'?)`); search and sync said only
"Extra inputs are not permitted"; compress and summarize dropped them. Nothing is stored or
queued by a refused request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.api.helpers import refused
from tests.capture.builders import make_session, observation, observe, send_result


def test_search_names_a_misspelt_field_and_the_close_one(client: TestClient) -> None:
    body = {"query": "jwt", "projectPath": "/p", "limt": 5, "sourcse": ["kv"]}

    detail = refused(client, "POST", "/api/search", body)

    assert "'limt' (did you mean 'limit'?)" in detail
    assert "'sourcse' (did you mean 'sources'?)" in detail
    assert "the fields are query, projectPath, limit" in detail
    assert "Extra inputs" not in detail


def test_search_takes_either_spelling_of_its_fields(client: TestClient) -> None:
    body = {"query": "jwt", "project_path": "/p", "min_score": 0.1, "pathPrefix": "/p/src"}
    assert client.post("/api/search", json=body).status_code == 200


def test_sync_names_a_misspelt_field_and_queues_nothing(
    client: TestClient, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    body = {"projectPath": str(tmp_path), "forse": True, "sessionDir": str(tmp_path)}

    detail = refused(client, "POST", "/api/sync", body)

    assert "'forse' (did you mean 'force'?)" in detail
    assert "'sessionDir' (did you mean 'sessionsDir'?)" in detail
    row = db.execute("SELECT count(*) FROM sync_runs").fetchone()
    assert row == (0,)
    (tmp_path / "MEMORY.md").write_text("# notes\n")
    snake = {"project_path": str(tmp_path), "memory_dir": str(tmp_path), "reembed": True}
    assert client.post("/api/sync", json=snake).status_code == 202


def test_compress_names_a_misspelt_field_and_requeues_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    call = observe(client, session_id)
    assert send_result(client, session_id, call["id"], "text").status_code == 200
    db.execute("UPDATE observations SET status = 'compressed' WHERE id = %s", (call["id"],))

    detail = refused(client, "POST", "/api/compress", {"observationID": call["id"]})

    assert "'observationID' (did you mean 'observationId'?)" in detail
    assert observation(db, call["id"])["status"] == "compressed"


def test_summarize_names_an_unknown_field_and_requeues_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)

    detail = refused(client, "POST", "/api/summarize", {"sessionId": session_id, "force": True})

    assert "unknown field 'force'; the fields are sessionId" in detail
    row = db.execute("SELECT status FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row == ("active",)


def test_the_interceptor_stream_still_ignores_fields_it_does_not_know(
    client: TestClient,
) -> None:
    # Interceptors of other versions send more than this one reads: start, observe, result and
    # end stay lenient (tests/memories/test_fields.py checks session start alone).
    extra = {"interceptorVersion": "9.9"}
    session_id = make_session(client, **extra)
    call = observe(client, session_id, **extra)
    assert send_result(client, session_id, call["id"], "ok", **extra).status_code == 200
    ended = client.post("/api/session/end", json={"sessionId": session_id, **extra})
    assert ended.status_code == 202
