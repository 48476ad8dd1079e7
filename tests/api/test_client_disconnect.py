"""A client that sends part of a request's body and closes the connection (a killed agent, a
network drop): the app logs one line without a traceback, raises nothing for the server to log as
"Exception in ASGI application", stores nothing, and serves the next request."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import structlog
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from app.api import errors
from app.logs import configure_logging

HALF = b'{"sessionId": "s-1", "functionName": "read_file", "functionArgs": {"path": "/a'
JSON = (b"content-type", b"application/json")

# Every route that reads a body: (method, path, extra headers).
ROUTES = {
    "observe": ("POST", "/api/observe", []),
    "observe result": ("POST", "/api/observe/result", []),
    "session start": ("POST", "/api/session/start", []),
    "session end": ("POST", "/api/session/end", []),
    "compress": ("POST", "/api/compress", []),
    "summarize": ("POST", "/api/summarize", []),
    "search": ("POST", "/api/search", []),
    "resume": ("POST", "/api/resume", []),
    "sync": ("POST", "/api/sync", []),
    "memory put": ("PUT", "/api/memories/k1", []),
    "mcp": ("POST", "/mcp", [(b"accept", b"application/json, text/event-stream")]),
    "proxy generate": ("POST", "/v1beta/models/gemini-2.5-flash:generateContent", []),
    "proxy passthrough": ("POST", "/v1beta/models/gemini-2.5-flash:countTokens", []),
}


def _scope(method: str, path: str, extra: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    headers = [(b"host", b"testserver"), JSON, (b"content-length", b"4000"), *extra]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 37777),
    }


async def _half_sent_then_closed(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one request whose body stops halfway, then reads a disconnect (as uvicorn gives one
    once the connection is closed); what the app sent."""
    messages = [
        {"type": "http.request", "body": HALF, "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if len(messages) > 1 else messages[0]

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Any:
    # A logger keeps the configuration of its first use: a fresh one, so capture_logs sees it.
    configure_logging("info")
    monkeypatch.setattr(errors, "log", structlog.get_logger(errors.__name__))
    with capture_logs() as entries:
        yield entries


@pytest.mark.parametrize("route", ROUTES.values(), ids=list(ROUTES))
def test_a_half_sent_body_then_a_close_is_one_line_without_a_traceback(
    client: TestClient,
    db: psycopg.Connection[Any],
    logged: list[dict[str, Any]],
    route: tuple[str, str, list[tuple[bytes, bytes]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    method, path, extra = route
    # Raised out of the app, uvicorn logs it as "Exception in ASGI application".
    client.portal.call(_half_sent_then_closed, client.app, _scope(method, path, extra))

    # Nor by a library (the MCP SDK logged "Error handling POST request" with a traceback).
    assert [record.getMessage() for record in caplog.records if record.exc_info] == []
    assert [entry["event"] for entry in logged] == ["request.aborted"]
    assert logged[0]["log_level"] == "info"
    assert "exc_info" not in logged[0]
    assert logged[0]["path"] == path
    for table in ("sessions", "observations", "memories"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
    # The app serves the next request.
    assert client.get("/health").status_code == 200
