"""A lone surrogate (JSON `"\\ud800"`, which no UTF-8 text can hold) in any string a client sends
is cleaned as stored text is, U+FFFD in its place: never a 422 "not a valid string", and ids too
(docs/capture.md, "Text in ids and names")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
LONE = "\\ud800"  # as the JSON escape a client sends
CLEAN = "\ufffd"


def send(client: TestClient, method: str, path: str, raw: str) -> Any:
    """`raw`, a JSON text whose `<?>` stand for a lone surrogate escape, sent as the body."""
    response = client.request(method, path, content=raw.replace("<?>", LONE).encode(), headers=JSON)
    assert response.status_code < 500, response.text
    return response


def test_capture_ids_names_and_paths_are_cleaned(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    start = '{"projectPath": "/p<?>", "id": "s<?>", "createdBy": "c<?>", "userPrompt": "u<?>"}'
    answer = send(client, "POST", "/api/session/start", start)
    assert answer.status_code == 201, answer.text
    assert answer.json()["id"] == f"s{CLEAN}"
    row = db.execute("SELECT id, project_path, created_by, user_prompt FROM sessions").fetchone()
    assert row == (f"s{CLEAN}", f"/p{CLEAN}", f"c{CLEAN}", f"u{CLEAN}")

    call = '"sessionId": "s<?>", "functionName": "f<?>", "projectPath": "/p<?>"'
    observe = f'{{{call}, "functionArgs": {{}}, "id": "o<?>"}}'
    observed = send(client, "POST", "/api/observe", observe)
    assert observed.status_code == 201, observed.text
    assert observed.json()["id"] == f"o{CLEAN}"
    result = f'{{{call}, "result": "r", "observationId": "o<?>"}}'
    assert send(client, "POST", "/api/observe/result", result).status_code == 200
    stored = db.execute("SELECT id, session_id, function_name, status FROM observations").fetchall()
    assert stored == [(f"o{CLEAN}", f"s{CLEAN}", f"f{CLEAN}", "captured")]

    assert send(client, "POST", "/api/compress", '{"observationId": "o<?>"}').status_code == 202
    assert send(client, "POST", "/api/summarize", '{"sessionId": "s<?>"}').status_code == 202
    assert send(client, "POST", "/api/session/end", '{"sessionId": "s<?>"}').status_code == 202


def test_memory_fields_are_cleaned(client: TestClient) -> None:
    body = (
        '{"value": "v<?>", "scope": "session", "sessionId": "s<?>", "createdBy": "c<?>",'
        ' "tags": ["t<?>"]}'
    )
    written = send(client, "PUT", "/api/memories/current.task", body)
    assert written.status_code == 201, written.text
    memory = written.json()
    assert (memory["value"], memory["sessionId"], memory["createdBy"], memory["tags"]) == (
        f"v{CLEAN}",
        f"s{CLEAN}",
        f"c{CLEAN}",
        [f"t{CLEAN}"],
    )
    project = send(client, "PUT", "/api/memories/k", '{"value": 1, "projectPath": "/p<?>"}')
    assert project.json()["projectPath"] == f"/p{CLEAN}"
    resume = send(client, "POST", "/api/resume", '{"projectPath": "/p<?>", "sessionId": "s<?>"}')
    assert resume.status_code == 200, resume.text
    assert [m["key"] for m in resume.json()["context"]["current"]] == ["current.task"]


def test_search_and_sync_fields_are_cleaned(client: TestClient, tmp_path: Path) -> None:
    search = '{"query": "q<?>", "projectPath": "/p<?>", "pathPrefix": "a<?>"}'
    assert send(client, "POST", "/api/search", search).status_code == 200
    for body in (
        f'{{"projectPath": "{tmp_path}<?>"}}',
        f'{{"projectPath": "{tmp_path}", "memoryDir": "m<?>"}}',
        f'{{"projectPath": "{tmp_path}", "sessionsDir": "m<?>"}}',
    ):
        # Cleaned, the folder named is one that does not exist, and the answer says which.
        answer = send(client, "POST", "/api/sync", body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "ProjectFolderNotFound"
        assert CLEAN in answer.json()["detail"]
