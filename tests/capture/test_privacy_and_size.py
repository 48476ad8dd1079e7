"""Privacy, size caps and project exclusion, applied before anything is stored."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.capture.builders import count, make_session, observation, observe
from tests.conftest import make_settings

TRANSCRIPT = Path(
    "/work/shared/testdata/claude-code/ccviewer_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
)


def test_args_and_results_are_redacted_and_stripped(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    observe(
        client,
        session_id,
        id="a",
        functionName="run_shell_command",
        functionArgs={
            "command": "curl -H 'Authorization: Bearer abcdefgh12345678' https://u:pw@api.x.dev",
            "env": {"GITHUB_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
        },
    )
    client.post(
        "/api/observe/result",
        json={
            "sessionId": session_id,
            "functionName": "run_shell_command",
            "result": "<memory>old context</memory>"
            "GEMINI_API_KEY=AIzaSyA1234567890abcdefghijklmnopqrstuv"
            " <private>diary</private>done",
        },
    )
    row = observation(db, "a")
    assert row["function_args"] == {
        "command": "curl -H 'Authorization: Bearer [REDACTED]' https://u:[REDACTED]@api.x.dev",
        "env": {"GITHUB_TOKEN": "[REDACTED]"},
    }
    assert row["result"] == "GEMINI_API_KEY=[REDACTED] done"
    stored = db.execute("SELECT function_args::text || result::text FROM observations").fetchone()
    assert stored is not None
    for secret in ("abcdefgh12345678", "ghp_", "AIza", "diary", "old context", ":pw@"):
        assert secret not in stored[0]


def test_five_megabyte_result_is_capped_with_original_size(
    client: TestClient, db: psycopg.Connection[Any], settings: Any
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="big", functionArgs={"file_path": "huge.log"})
    output = "FIRST LINE\n" + "log line with some text in it\n" * 180_000 + "LAST LINE"
    started = time.perf_counter()
    response = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": output},
    )
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    assert response.json()["truncated"] is True
    row = observation(db, "big")
    stored: str = row["result"]
    assert stored.startswith("FIRST LINE")
    assert stored.endswith("LAST LINE")
    assert f"{len(output)} chars originally" in stored
    assert len(stored) <= settings.capture_max_field_chars
    assert row["truncated"] is True
    assert row["result_bytes"] == len(output)
    assert row["original_tokens"] >= len(output) // 4
    size = db.execute("SELECT pg_column_size(result) FROM observations").fetchone()
    assert size is not None
    assert size[0] < 100_000
    assert elapsed < 5


def test_large_structured_args_are_capped(
    client: TestClient, db: psycopg.Connection[Any], settings: Any
) -> None:
    session_id = make_session(client)
    args = {"content": "x" * 200_000, "file_path": "big.txt", "items": list(range(10))}
    observe(client, session_id, id="w", functionName="write_file", functionArgs=args)
    row = observation(db, "w")
    assert row["truncated"] is True
    assert row["function_args"]["file_path"] == "big.txt"
    assert row["function_args"]["items"] == list(range(10))
    assert len(row["function_args"]["content"]) < settings.capture_max_field_chars
    assert row["args_bytes"] > 200_000


def test_many_small_strings_are_capped_as_text(
    client: TestClient, db: psycopg.Connection[Any], settings: Any
) -> None:
    session_id = make_session(client)
    result = [f"match {index}: some line of grep output" for index in range(20_000)]
    observe(client, session_id, id="g", functionName="grep", functionArgs={"pattern": "x"})
    client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "grep", "result": result},
    )
    row = observation(db, "g")
    assert row["truncated"] is True
    assert isinstance(row["result"], str)
    assert row["result"].startswith('["match 0: some line')
    assert len(row["result"]) <= settings.capture_max_field_chars


def test_real_transcript_tool_results_capture_cleanly(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    import json

    session_id = make_session(client)
    sent = 0
    for line in TRANSCRIPT.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        content = record.get("message", {}).get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if part.get("type") == "tool_use":
                observe(
                    client,
                    session_id,
                    id=part["id"],
                    functionName=part["name"],
                    functionArgs=part["input"],
                )
                sent += 1
            elif part.get("type") == "tool_result":
                response = client.post(
                    "/api/observe/result",
                    json={
                        "sessionId": session_id,
                        "functionName": "unknown",
                        "observationId": part["tool_use_id"],
                        "result": part.get("content"),
                    },
                )
                assert response.status_code == 200, response.text
    assert sent >= 10
    statuses = db.execute("SELECT DISTINCT status FROM observations").fetchall()
    assert statuses == [("captured",)]
    types = {row[0] for row in db.execute("SELECT observation_type FROM observations")}
    assert {"search", "code_execution", "file_write"} <= types


@pytest.fixture
def excluding_client(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> Any:
    settings = make_settings(
        home=tmp_path / "home",
        capture_exclude_projects=["/home/*/secret*", "/srv/clients/*", "C:/Users/*/Private*/"],
    )
    app = create_app(settings, database_url=database_url)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_excluded_project_stores_nothing(
    excluding_client: TestClient, db: psycopg.Connection[Any]
) -> None:
    client = excluding_client
    start = client.post("/api/session/start", json={"projectPath": "/home/dev/secret-app"})
    assert start.status_code == 200
    body = start.json()
    assert body["status"] == "excluded"
    assert body["id"].startswith("excluded-")
    session_id = body["id"]

    observed = client.post(
        "/api/observe",
        json={"sessionId": session_id, "functionName": "read_file", "functionArgs": {}},
    )
    assert observed.status_code == 200
    assert observed.json() == {"id": None, "status": "excluded"}
    result = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": "x"},
    )
    assert result.json() == {"id": None, "status": "excluded"}
    with_project = client.post(
        "/api/observe",
        json={
            "sessionId": "client-id",
            "functionName": "f",
            "functionArgs": {},
            "projectPath": "/srv/clients/acme",
        },
    )
    assert with_project.json()["status"] == "excluded"
    ended = client.post("/api/session/end", json={"sessionId": session_id})
    assert ended.status_code == 200
    assert ended.json() == {"sessionId": session_id, "status": "excluded"}
    assert count(db, "sessions") == count(db, "observations") == 0


def test_excluded_project_echoes_client_session_id(
    excluding_client: TestClient, db: psycopg.Connection[Any]
) -> None:
    response = excluding_client.post(
        "/api/session/start", json={"projectPath": "/srv/clients/acme/", "id": "mine"}
    )
    assert response.json()["id"] == "mine"
    assert response.json()["status"] == "excluded"
    assert count(db, "sessions") == 0


@pytest.mark.parametrize(
    "path",
    ["/srv/clients/../clients/acme", "//home/dev/secret-app", "c:\\users\\dev\\private-x\\"],
)
def test_exclusion_holds_for_every_spelling_of_the_folder(
    excluding_client: TestClient, db: psycopg.Connection[Any], path: str
) -> None:
    # A glob matched only the spelling it was written in: a Windows client's path with another
    # case or separator, or a path with `..`, was captured although its folder was excluded.
    response = excluding_client.post("/api/session/start", json={"projectPath": path})
    assert response.json()["status"] == "excluded"
    assert count(db, "sessions") == 0


def test_other_projects_still_captured_when_exclusions_set(
    excluding_client: TestClient, db: psycopg.Connection[Any]
) -> None:
    response = excluding_client.post("/api/session/start", json={"projectPath": "/home/dev/shop"})
    assert response.status_code == 201
    assert count(db, "sessions") == 1


def test_huge_user_prompt_is_capped(
    client: TestClient, db: psycopg.Connection[Any], settings: Any
) -> None:
    prompt = "start " + "word " * 100_000 + " end"
    session_id = make_session(client, userPrompt=prompt)
    row = db.execute("SELECT user_prompt FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    assert len(row[0]) <= settings.capture_max_field_chars
    assert row[0].startswith("start word")
    assert f"{len(prompt)} chars originally" in row[0]
