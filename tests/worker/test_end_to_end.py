"""start → observe ×N → results → end, through HTTP, ends with a summarised session whose summary
is in the context block."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import make_settings
from tests.fakes.gemini import fake_gemini
from tests.worker.builders import LONG_RESULT, drain
from tests.worker.test_flow import SUMMARY, _answer

PROJECT = "/home/dev/shop"


def _capture_session(client: TestClient, count: int) -> str:
    started = client.post(
        "/api/session/start", json={"projectPath": PROJECT, "userPrompt": "fix the token check"}
    )
    assert started.status_code == 201
    session_id: str = started.json()["id"]
    for n in range(count):
        call = client.post(
            "/api/observe",
            json={
                "sessionId": session_id,
                "functionName": "read_file",
                "functionArgs": {"path": f"src/o{n}.ts"},
            },
        )
        assert call.status_code == 201
        result = client.post(
            "/api/observe/result",
            json={
                "sessionId": session_id,
                "functionName": "read_file",
                "result": LONG_RESULT,
                "observationId": call.json()["id"],
            },
        )
        assert result.json()["status"] == "captured"
    ended = client.post("/api/session/end", json={"sessionId": session_id})
    assert ended.status_code == 202
    return session_id


def test_http_flow_ends_summarised_with_the_summary_in_context(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    session_id = _capture_session(client, 4)
    assert client.get(f"/api/sessions/{session_id}").json()["status"] == "ending"

    with fake_gemini() as fake:
        fake.on(":generateContent", _answer)
        drain(
            make_settings(
                gemini_api_key="k", gemini_base_url=fake.url, gemini_requests_per_minute=100_000
            ),
            database_url,
        )
        assert len(fake.calls(":generateContent")) == 5  # four compressions, one summary

    session = client.get(f"/api/sessions/{session_id}").json()
    assert session["status"] == "summarized"
    assert session["summary"] == SUMMARY
    assert session["totalObservations"] == 4
    assert session["tokensSaved"] > 0

    context = client.get("/api/context", params={"projectPath": PROJECT, "format": "json"}).json()
    assert SUMMARY in context["context"]
    assert context["tokenCount"] <= context["budget"]
    block = client.get("/api/context", params={"projectPath": PROJECT})
    assert block.text.startswith("<memory>")
    assert SUMMARY in block.text


def test_serve_with_its_worker_summarises_without_being_asked(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    app = create_app(make_settings(home=tmp_path), database_url=database_url, run_worker=True)
    with TestClient(app) as client:
        session_id = _capture_session(client, 3)
        deadline = time.monotonic() + 30
        while client.get(f"/api/sessions/{session_id}").json()["status"] != "summarized":
            assert time.monotonic() < deadline, "the in-process worker never summarised"
            time.sleep(0.05)
        session = client.get(f"/api/sessions/{session_id}").json()
        context = client.get("/api/context", params={"projectPath": PROJECT}).text

    assert session["totalObservations"] == 3
    assert session["summary"].startswith("This session in /home/dev/shop")
    assert session["summary"] in context


def test_a_cut_output_keeps_its_original_token_count(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # A 1 MB log is cut to 65,536 characters at capture and to 24,000 for the worker, which
    # recorded the cut's ~6,000 tokens as the original: tokensSaved was 160 times too small.
    started = client.post("/api/session/start", json={"projectPath": PROJECT})
    session_id = started.json()["id"]
    log = "".join(f"{n:07d} GET /api/items 200 12ms ok\n" for n in range(30_000))
    client.post(
        "/api/observe",
        json={"sessionId": session_id, "functionName": "read_file", "functionArgs": {}, "id": "o"},
    )
    captured = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": log},
    ).json()
    assert captured["truncated"] is True
    assert captured["originalTokens"] > 200_000

    drain(make_settings(), database_url)

    stored = client.get("/api/observations/o").json()
    assert stored["status"] == "compressed"
    assert stored["originalTokens"] == captured["originalTokens"]
    assert stored["tokensSaved"] == stored["originalTokens"] - stored["compressedTokens"]
