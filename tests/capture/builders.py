"""Small typed builders for capture tests, through the real HTTP API."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient


def make_session(client: TestClient, **overrides: Any) -> str:
    body: dict[str, Any] = {"projectPath": "/home/dev/shop"} | overrides
    response = client.post("/api/session/start", json=body)
    assert response.status_code in (200, 201), response.text
    session_id: str = response.json()["id"]
    return session_id


def observe(client: TestClient, session_id: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sessionId": session_id,
        "functionName": "read_file",
        "functionArgs": {"file_path": "app/main.py"},
    } | overrides
    response = client.post("/api/observe", json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer


def send_result(
    client: TestClient, session_id: str, observation_id: str, result: Any, **overrides: Any
) -> Any:
    """POST /api/observe/result for that call; the response, for the test to judge."""
    body: dict[str, Any] = {
        "sessionId": session_id,
        "functionName": "read_file",
        "result": result,
        "observationId": observation_id,
    } | overrides
    return client.post("/api/observe/result", json=body)


def count(db: psycopg.Connection[Any], table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def observation(db: psycopg.Connection[Any], observation_id: str) -> dict[str, Any]:
    cursor = db.execute("SELECT * FROM observations WHERE id = %s", (observation_id,))
    row = cursor.fetchone()
    assert row is not None, f"observation {observation_id} not stored"
    names = [column.name for column in cursor.description or []]
    return dict(zip(names, row, strict=True))
