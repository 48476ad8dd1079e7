"""The MCP server over streamable HTTP at /mcp, through the real `mcp` client and uvicorn."""

from __future__ import annotations

import asyncio
import gc
import importlib.abc
import logging
import random
import re
import string
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import httpx2
import psycopg
import pytest
import structlog
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from structlog.testing import capture_logs

import app.mcp
from app import heap
from app.logs import configure_logging
from app.main import create_app
from app.mcp import http as mcp_http
from app.mcp.http import mount_mcp
from tests.conftest import make_settings
from tests.mcp.conftest import LiveServer, serve
from tests.mcp.tools import PROJECT, exercise_every_tool, structured
from tests.search.seed import add_session


def test_every_tool_over_streamable_http(live_server: LiveServer) -> None:
    async def main() -> None:
        async with Client(f"{live_server.url}/mcp") as client:
            await exercise_every_tool(client)

    asyncio.run(main())


def test_mcp_requires_the_bearer_token_when_set(live_server_with_token: LiveServer) -> None:
    url = f"{live_server_with_token.url}/mcp"
    refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401
    assert refused.json()["error"] == "Unauthorized"

    async def main() -> None:
        headers = {"Authorization": f"Bearer {live_server_with_token.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            listed = await client.list_tools()
            assert "write_memory" in {tool.name for tool in listed.tools}

    asyncio.run(main())


def test_mcp_refuses_foreign_host_headers(live_server: LiveServer) -> None:
    response = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Host": "evil.example", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 421
    cross_site = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Origin": "http://evil.example", "Accept": "application/json, text/event-stream"},
    )
    assert cross_site.status_code == 403
    assert cross_site.json()["error"] == "ForbiddenOrigin"


@pytest.mark.parametrize(
    "origin", ["chrome-extension://abcdefghijklmnopabcdefghijklmnop", "https://localhost:5173"]
)
def test_mcp_answers_the_origins_the_rest_of_the_service_answers(
    live_server: LiveServer, origin: str
) -> None:
    # The SDK's own Origin check allowed http://<loopback>[:port] only, and refused the rest in
    # plain text ("Invalid Origin header"): an extension, which the API and the proxy answer,
    # got a 403 that was not in the error shape. The app's Host and origin rules run first.
    response = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Origin": origin, "Accept": "application/json, text/event-stream"},
    )

    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == origin
    assert "write_memory" in response.text


STARTED = "StreamableHTTP session manager started"


def _starts(caplog: pytest.LogCaptureFixture) -> int:
    """How many session managers the SDK started (it logs each start)."""
    return sum(record.getMessage() == STARTED for record in caplog.records)


def test_the_first_requests_to_mcp_start_one_server_which_the_lifespan_stops(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The MCP server is built on the first request to /mcp (app/mcp/http.py), not at the
    # lifespan's start: requests that come together all wait for that one start and are
    # answered; the lifespan's end stops it, and a request after that end does not start another.
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http_manager")
    app = create_app(make_settings(home=tmp_path / "home"), database_url=database_url)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}

    async def main() -> tuple[int, list[httpx.Response], httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with app.router.lifespan_context(app):
                assert (await client.get("/health")).status_code == 200
                before = _starts(caplog)
                first = await asyncio.gather(
                    *(client.post("/mcp", json=body, headers=headers) for _ in range(4))
                )
            after = await client.post("/mcp", json=body, headers=headers)
        return before, first, after

    before, first, after = asyncio.run(main())

    assert before == 0
    assert [answer.status_code for answer in first] == [200, 200, 200, 200]
    assert all("write_memory" in answer.text for answer in first)
    assert _starts(caplog) == 1
    assert after.status_code == 503
    assert after.json()["error"] == "ServiceUnavailable"


class _Held(importlib.abc.MetaPathFinder):
    """Holds the import of the MCP server until released, as a slow import would."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "app.mcp.server" and not self.entered.is_set():
            self.entered.set()
            self.released.wait(30)
        return None


def test_a_first_request_to_mcp_cancelled_leaves_the_start_to_finish_for_the_next(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client that gives up during the first request's start (the import takes ~0.85 s) must
    # not take the start with it: the next request would pay for it again.
    held = _Held()
    _server_imported_anew(monkeypatch, held)
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http_manager")
    app = create_app(make_settings(home=tmp_path / "home"), database_url=database_url)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}

    async def main() -> tuple[int, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with app.router.lifespan_context(app):
                first = asyncio.create_task(client.post("/mcp", json=body, headers=headers))
                while not held.entered.is_set():
                    await asyncio.sleep(0.01)
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                held.released.set()
                # No request waits for the start now: it finishes on its own.
                for _ in range(1000):
                    if _starts(caplog):
                        break
                    await asyncio.sleep(0.01)
                started_alone = _starts(caplog)
                return started_alone, await client.post("/mcp", json=body, headers=headers)

    started_alone, answer = asyncio.run(main())

    assert started_alone == 1
    assert answer.status_code == 200, answer.text
    assert "write_memory" in answer.text
    assert _starts(caplog) == 1


class _Broken(importlib.abc.MetaPathFinder):
    """Fails the imports of the MCP server while `broken`, as a broken or half-installed SDK
    would; counts the imports tried."""

    def __init__(self) -> None:
        self.broken = True
        self.tried = 0

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "app.mcp.server":
            self.tried += 1
            if self.broken:
                raise ImportError("cannot import name 'MCPServer' from 'mcp.server'")
        return None


def _server_imported_anew(monkeypatch: pytest.MonkeyPatch, finder: Any) -> None:
    """The next start imports app.mcp.server again, through `finder` first."""
    monkeypatch.delitem(sys.modules, "app.mcp.server", raising=False)
    monkeypatch.delattr(app.mcp, "server", raising=False)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])


class _Clock:
    """The endpoint's clock, moved by the test: no test waits for a real backoff."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


MCP_BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
START_FAILED = "the MCP server could not start"
CAUSE = "cannot import name 'MCPServer' from 'mcp.server'"


def _mcp_events(logged: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The endpoint's log lines: each event and whether it carries a traceback."""
    return [
        (entry["event"], "exc_info" in entry)
        for entry in logged
        if entry["event"].startswith("mcp.")
    ]


def test_a_failed_start_of_mcp_is_a_503_with_retry_after_and_is_not_retried_at_once(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A start that failed was tried again by the very next request: a persistently failing start
    # re-imported the SDK in a thread (~0.85 s of CPU) and logged a traceback on every request,
    # and the 503 had no Retry-After to tell a client when to come back.
    broken = _Broken()
    _server_imported_anew(monkeypatch, broken)
    configure_logging("info")
    monkeypatch.setattr(mcp_http, "log", structlog.get_logger(mcp_http.__name__))
    app = create_app(make_settings(home=tmp_path / "home"), database_url=database_url)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with app.router.lifespan_context(app):
                return [
                    await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS) for _ in range(3)
                ]

    with capture_logs() as logged:
        answers = asyncio.run(main())

    assert [answer.status_code for answer in answers] == [503, 503, 503]
    assert answers[0].json() == {
        "error": "ServiceUnavailable",
        "detail": f"{START_FAILED} (retried in 1 s): {CAUSE}",
    }
    assert [answer.headers.get("retry-after") for answer in answers] == ["1", "1", "1"]
    assert broken.tried == 1
    assert _mcp_events(logged) == [("mcp.start_failed", True)]


class _HeldThenBroken(_Held):
    """Holds the import of the MCP server until released, then fails it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "app.mcp.server":
            super().find_spec(name, path, target)
            raise ImportError(CAUSE)
        return None


def test_a_start_failing_as_the_lifespan_ends_answers_not_running_without_retry_after(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request waiting for the start got "retried in 1 s" and a Retry-After, though the
    # lifespan had ended and nothing would start the server again.
    held = _HeldThenBroken()
    _server_imported_anew(monkeypatch, held)
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=_Clock())

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                waiting = asyncio.create_task(
                    client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)
                )
                while not held.entered.is_set():
                    await asyncio.sleep(0.01)
                # The lifespan's end (this block's exit) waits for the start, which fails.
                held.released.set()
            return await waiting

    with capture_logs():
        answer = asyncio.run(main())

    assert answer.status_code == 503
    assert answer.json() == {
        "error": "ServiceUnavailable",
        "detail": "the MCP server is not running",
    }
    assert "retry-after" not in answer.headers


def test_the_first_start_of_mcp_in_a_frozen_process_freezes_what_it_built(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `agmem serve` freezes its heap after the lifespan, but the SDK is imported by the first
    # request to /mcp (~46,700 objects in a new process): they stayed in the collections, and a
    # full collection walked them (~27 ms) under load once an agent had used /mcp.
    whole = _Broken()
    whole.broken = False
    _server_imported_anew(monkeypatch, whole)
    monkeypatch.setattr(heap, "_late_loads_frozen", set())
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=_Clock())

    async def main() -> tuple[httpx.Response, list[bool]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                answer = await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)
                built = [vars(sys.modules["app.mcp.server"]), endpoint.manager]
                collected = {id(item) for item in gc.get_objects()}
                return answer, [id(item) in collected for item in built]

    gc.collect()
    gc.freeze()  # as `agmem serve` does before its first request
    try:
        answer, still_collected = asyncio.run(main())
    finally:
        gc.unfreeze()

    assert answer.status_code == 200, answer.text
    assert whole.tried == 1
    assert still_collected == [False, False]


def test_failed_starts_of_mcp_back_off_log_one_traceback_and_recover_when_the_cause_goes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _Broken()
    _server_imported_anew(monkeypatch, broken)
    configure_logging("info")
    monkeypatch.setattr(mcp_http, "log", structlog.get_logger(mcp_http.__name__))
    clock = _Clock()
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=clock)
    seen: list[tuple[float, int, str | None, int]] = []

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                start = clock.now
                # Seconds after the first request: failures at 0, 1, 3 and 7 (1, 2, 4 s apart),
                # refusals in between without an import.
                for at in (0, 0.5, 1, 2.9, 3, 6.5, 7, 10):
                    clock.now = start + at
                    answer = await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)
                    retry_after = answer.headers.get("retry-after")
                    seen.append((at, answer.status_code, retry_after, broken.tried))
                broken.broken = False  # the SDK is whole again
                clock.now = start + 15
                return await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)

    with capture_logs() as logged:
        recovered = asyncio.run(main())

    assert seen == [
        (0, 503, "1", 1),
        (0.5, 503, "1", 1),
        (1, 503, "2", 2),
        (2.9, 503, "1", 2),
        (3, 503, "4", 3),
        (6.5, 503, "1", 3),
        (7, 503, "8", 4),
        (10, 503, "5", 4),
    ]
    assert recovered.status_code == 200, recovered.text
    assert "write_memory" in recovered.text
    # The traceback once for the streak; the later failures in one line each.
    assert _mcp_events(logged) == [
        ("mcp.start_failed", True),
        ("mcp.start_failed", False),
        ("mcp.start_failed", False),
        ("mcp.start_failed", False),
        ("mcp.recovered", False),
    ]
    assert [entry.get("retry_in") for entry in logged if entry["event"] == "mcp.start_failed"] == [
        1,
        2,
        4,
        8,
    ]


def test_the_backoff_of_mcp_starts_stops_at_its_cap(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _Broken()
    _server_imported_anew(monkeypatch, broken)
    clock = _Clock()
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=clock)

    async def main() -> list[str | None]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                delays = []
                for _ in range(9):
                    answer = await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)
                    delays.append(answer.headers.get("retry-after"))
                    clock.now += int(answer.headers["retry-after"])
                return delays

    with capture_logs():
        delays = asyncio.run(main())

    assert delays == ["1", "2", "4", "8", "16", "30", "30", "30", "30"]
    assert broken.tried == 9


def test_a_session_manager_failing_at_once_is_restarted_after_a_backoff(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A manager that failed as it started was started again by every request.
    run = StreamableHTTPSessionManager.run
    runs: list[StreamableHTTPSessionManager] = []
    failing = [True]

    @asynccontextmanager
    async def failing_at_once(manager: StreamableHTTPSessionManager) -> AsyncIterator[None]:
        runs.append(manager)
        if failing[0]:
            raise RuntimeError("the session manager's task group failed")
        async with run(manager):
            yield

    monkeypatch.setattr(StreamableHTTPSessionManager, "run", failing_at_once)
    configure_logging("info")
    monkeypatch.setattr(mcp_http, "log", structlog.get_logger(mcp_http.__name__))
    clock = _Clock()
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=clock)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                answers = [
                    await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS) for _ in range(3)
                ]
                failing[0] = False
                clock.now += 1
                answers.append(await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS))
                return answers

    with capture_logs() as logged:
        answers = asyncio.run(main())

    assert [answer.status_code for answer in answers] == [503, 503, 503, 200]
    assert answers[1].headers["retry-after"] == "1"
    assert len(runs) == 2
    assert _mcp_events(logged) == [("mcp.start_failed", True), ("mcp.recovered", False)]


def test_a_request_to_mcp_as_the_lifespan_ends_is_a_503_not_the_stopping_server(
    tmp_path: Any,
) -> None:
    # Between the lifespan's end telling the session manager to stop and the manager's task
    # resuming, the manager was still set and was handed the request, under its stop.
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}

    async def main() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            running = endpoint.running()
            await running.__aenter__()
            started = await client.post("/mcp", json=body, headers=headers)
            # Run in this order: the end of `running` up to its first wait (it has told the
            # manager to stop), the request, and only then the manager's task.
            ending = asyncio.create_task(running.__aexit__(None, None, None))
            late = asyncio.create_task(client.post("/mcp", json=body, headers=headers))
            answer = await asyncio.wait_for(late, 10)
            await ending
        return started, answer

    started, late = asyncio.run(main())

    assert started.status_code == 200, started.text
    assert late.status_code == 503
    assert late.json() == {
        "error": "ServiceUnavailable",
        "detail": "the MCP server is not running",
    }


def test_a_session_manager_failing_is_logged_and_the_lifespan_still_ends_cleanly(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The failure of the SDK's manager was raised again by the lifespan's end (the server's
    # shutdown then failed).
    run = StreamableHTTPSessionManager.run

    @asynccontextmanager
    async def failing(manager: StreamableHTTPSessionManager) -> AsyncIterator[None]:
        async with run(manager):
            yield
        raise RuntimeError("the session manager's task group failed")

    monkeypatch.setattr(StreamableHTTPSessionManager, "run", failing)
    configure_logging("info")
    monkeypatch.setattr(mcp_http, "log", structlog.get_logger(mcp_http.__name__))
    app = create_app(make_settings(home=tmp_path / "home"), database_url=database_url)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}

    async def main() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with app.router.lifespan_context(app):
                answer = await client.post("/mcp", json=body, headers=headers)
            return answer, await client.post("/mcp", json=body, headers=headers)

    with capture_logs() as logged:
        answer, after = asyncio.run(main())

    assert answer.status_code == 200, answer.text
    assert after.status_code == 503
    assert [
        (entry["event"], entry["error"]) for entry in logged if entry["event"].startswith("mcp.")
    ] == [("mcp.server_failed", "the session manager's task group failed")]


def test_a_session_manager_failing_while_it_runs_is_started_again_after_a_backoff(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failed manager's start was kept as done: /mcp answered "not running" for the rest
    # of the lifespan. Then every request started a new one, however soon it failed again.
    run = StreamableHTTPSessionManager.run
    crash = asyncio.Event()
    managers: list[StreamableHTTPSessionManager] = []

    @asynccontextmanager
    async def crashing(manager: StreamableHTTPSessionManager) -> AsyncIterator[None]:
        managers.append(manager)

        async def fail_when_told() -> None:
            await crash.wait()
            raise RuntimeError("the session manager's task group failed")

        async with anyio.create_task_group() as group, run(manager):
            if len(managers) == 1:
                group.start_soon(fail_when_told)
            yield

    monkeypatch.setattr(StreamableHTTPSessionManager, "run", crashing)
    configure_logging("info")
    monkeypatch.setattr(mcp_http, "log", structlog.get_logger(mcp_http.__name__))
    clock = _Clock()
    app = FastAPI()
    endpoint = mount_mcp(app, make_settings(home=tmp_path / "home"), clock=clock)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with endpoint.running():
                answers = [await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS)]
                crash.set()
                for _ in range(500):
                    if any(entry["event"] == "mcp.server_failed" for entry in logged):
                        break
                    await asyncio.sleep(0.01)
                answers.append(await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS))
                clock.now += 1
                answers.append(await client.post("/mcp", json=MCP_BODY, headers=MCP_HEADERS))
            return answers

    with capture_logs() as logged:
        before, backing_off, after = asyncio.run(main())

    assert before.status_code == 200, before.text
    assert backing_off.status_code == 503
    assert backing_off.headers["retry-after"] == "1"
    assert backing_off.json() == {
        "error": "ServiceUnavailable",
        "detail": "the MCP server failed (restarted in 1 s): the session manager's task group "
        "failed",
    }
    assert _mcp_events(logged) == [("mcp.server_failed", True), ("mcp.recovered", False)]
    assert after.status_code == 200, after.text
    assert "write_memory" in after.text
    assert len(managers) == 2


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_mcp_other_methods_are_405(live_server: LiveServer, method: str) -> None:
    assert httpx.request(method, f"{live_server.url}/mcp").status_code == 405


@pytest.mark.parametrize("accept", ["text/event-stream", "*/*"])
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_mcp_get_and_delete_answer_405_at_once(
    live_server: LiveServer, method: str, accept: str
) -> None:
    # A stateless server offers no server-initiated SSE stream and no session to end: the spec's
    # answer is 405. GET opened an SSE stream that never sent anything, and `curl` waited forever
    # (the timeout turns that hang into a failure instead of a stuck run).
    response = httpx.request(
        method, f"{live_server.url}/mcp", headers={"Accept": accept}, timeout=10
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"] == "MethodNotAllowed"


def test_get_context_defaults_to_the_servers_context_settings(
    live_server_small_context: LiveServer, database_url: str
) -> None:
    # The server is configured with AGMEM_CONTEXT_BUDGET=120 and AGMEM_CONTEXT_SESSIONS=1.
    for n in range(3):
        add_session(
            database_url,
            f"s{n}",
            project=PROJECT,
            summary=f"Session {n}: reworked the billing module step {n}.",
            created_at=datetime(2026, 3, 1 + n, 9, 0, tzinfo=UTC),
        )

    async def main() -> dict[str, Any]:
        async with Client(f"{live_server_small_context.url}/mcp") as client:
            result = await client.call_tool(
                "get_context", {"project_path": PROJECT, "prompt": "billing\x00 module"}
            )
            return structured(result)

    answer = asyncio.run(main())
    assert answer["budget"] == 120
    assert 0 < answer["tokenCount"] <= 120
    assert "step 2" in answer["context"]
    assert "step 1" not in answer["context"]  # one session, the latest, as GET /api/context


# The arguments each tool needs besides the number under test.
REQUIRED = {"write_memory": {"key": "current.task", "value": "v"}, "search_memory": {"query": "q"}}


def numeric_arguments(schema: dict[str, Any]) -> list[str]:
    """The arguments a tool's input schema types as integers (alone or beside null)."""
    found = []
    for name, spec in schema["properties"].items():
        kinds = [spec, *spec.get("anyOf", [])]
        if any(kind.get("type") in ("integer", "number") for kind in kinds):
            found.append(name)
    return found


def test_a_boolean_or_words_for_a_numeric_argument_is_a_tool_error(
    live_server: LiveServer,
) -> None:
    # The SDK's lax pydantic read `limit: true` as 1 and `ttl: true` as a one-second expiry
    # before any tool saw it.
    async def main() -> list[tuple[str, str, Any, str]]:
        answers = []
        async with Client(f"{live_server.url}/mcp") as client:
            for tool in (await client.list_tools()).tools:
                for name in numeric_arguments(tool.input_schema):
                    for sent in (True, False, "five"):
                        arguments = {**REQUIRED.get(tool.name, {}), "project_path": PROJECT}
                        result = await client.call_tool(tool.name, {**arguments, name: sent})
                        assert result.is_error, (tool.name, name, sent, result.content)
                        answers.append((tool.name, name, sent, result.content[0].text))
            read = await client.call_tool(
                "read_memory", {"key": "current.task", "project_path": PROJECT}
            )
            assert structured(read)["memory"] is None  # no write with `ttl: true` went through
        return answers

    answers = asyncio.run(main())
    checked = {(tool, name) for tool, name, _, _ in answers}
    assert checked == {
        ("write_memory", "ttl"),
        ("write_memory", "if_version"),
        ("list_memories", "limit"),
        ("delete_memory", "if_version"),
        ("smart_resume", "budget"),
        ("search_memory", "limit"),
        ("get_context", "budget"),
    }
    for tool, name, sent, text in answers:
        reason = (
            "Input should be a valid integer, unable to parse string as an integer"  # as over HTTP
            if isinstance(sent, str)
            else "must be a number, not a boolean"
        )
        assert f"{name}: {reason}" in text, (tool, text)


def test_a_number_sent_as_text_is_that_number_for_a_tool(live_server: LiveServer) -> None:
    # Clients send numbers as text: Claude Code passes the model's parameters on as strings
    # (anthropics/claude-code#32524, #24597), and so does OpenHands (OpenHands#8448). "5" was
    # refused, and a model's retry was sent as text again: `if_version`, `limit` and `budget`
    # could not be used at all. The HTTP API's bodies read "5" as 5 too.
    async def main() -> dict[str, Any]:
        async with Client(f"{live_server.url}/mcp") as client:
            at = {"project_path": PROJECT}

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                return structured(await client.call_tool(tool, {**at, **arguments}))

            await call("write_memory", key="current.a", value="jwt rotation", ttl="3600")
            await call("write_memory", key="current.a", value="jwt rotation 2", if_version="1")
            await call("write_memory", key="current.b", value="jwt notes")
            return {
                "listed": await call("list_memories", limit="1"),
                "found": await call("search_memory", query="jwt", limit="1", sources=["kv"]),
                "resume": await call("smart_resume", budget="300"),
                "context": await call("get_context", budget="200"),
                "deleted": await call("delete_memory", key="current.a", if_version="2"),
            }

    answers = asyncio.run(main())
    [listed] = answers["listed"]["memories"]
    assert listed["key"] == "current.a"
    assert listed["version"] == 2
    assert listed["expiresAt"] is not None
    assert len(answers["found"]["results"]) == 1
    assert answers["resume"]["budget"] == 300
    assert answers["context"]["budget"] == 200
    assert answers["deleted"] == {"deleted": True}


def test_a_whole_float_is_still_a_number_for_a_tool(live_server: LiveServer) -> None:
    async def main() -> dict[str, Any]:
        async with Client(f"{live_server.url}/mcp") as client:
            return structured(
                await client.call_tool("list_memories", {"project_path": PROJECT, "limit": 5.0})
            )

    assert asyncio.run(main()) == {"memories": [], "hasMore": False, "nextCursor": None}


def test_an_unknown_argument_is_a_tool_error_naming_the_close_one(live_server: LiveServer) -> None:
    # The SDK dropped arguments a tool does not take: `tag` for `tags` stored an untagged memory.
    async def main() -> tuple[Any, Any]:
        async with Client(f"{live_server.url}/mcp") as client:
            arguments = {"key": "current.task", "value": "v", "project_path": PROJECT}
            refused = await client.call_tool("write_memory", {**arguments, "tag": ["auth"]})
            read = await client.call_tool(
                "read_memory", {"key": "current.task", "project_path": PROJECT}
            )
            return refused, structured(read)

    refused, read = asyncio.run(main())
    assert refused.is_error
    assert (
        "Error executing tool write_memory: ValidationFailed: unknown argument 'tag' (did you "
        "mean 'tags'?); the arguments are key, value, scope" in refused.content[0].text
    )
    assert read["memory"] is None


def test_a_value_too_large_to_index_is_a_tool_error_naming_it(live_server: LiveServer) -> None:
    # Postgres refuses an index row over 2704 bytes; the tool crashed ("Error executing tool"),
    # then quoted the index; the bound names the argument (app/api/limits.py).
    noise = "".join(random.Random(1).choices(string.ascii_letters, k=4000))

    async def main() -> Any:
        async with Client(f"{live_server.url}/mcp") as client:
            arguments = {"key": "k", "value": 1, "project_path": PROJECT, "tags": [noise]}
            return await client.call_tool("write_memory", arguments)

    result = asyncio.run(main())
    assert result.is_error
    assert "ValidationFailed: tags: a tag has at most 200 characters" in result.content[0].text


def test_a_wrong_typed_argument_names_the_json_kind_sent(live_server: LiveServer) -> None:
    # Worded as over HTTP: "key: Input should be a valid string" did not say a null had come.
    async def main() -> Any:
        async with Client(f"{live_server.url}/mcp") as client:
            arguments = {"key": None, "value": 1, "project_path": PROJECT, "tags": "auth"}
            return await client.call_tool("write_memory", arguments)

    result = asyncio.run(main())
    assert result.is_error
    text = result.content[0].text
    assert "ValidationFailed: key: Input should be a valid string, not null" in text
    assert "tags: Input should be a valid list, not a string" in text


def test_a_lone_surrogate_in_tool_arguments_is_cleaned(live_server: LiveServer) -> None:
    # As over the HTTP API (docs/capture.md, "Text in ids and names"): the SDK's JSON parser
    # answered a "\ud800" escape anywhere in the body with a JSON-RPC parse error (-32700).
    arguments = '{"key": "k\\ud800", "value": "v\\ud800", "scope": "global", "tags": ["t\\udc00"]}'
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
        f' "params": {{"name": "write_memory", "arguments": {arguments}}}}}'
    )
    response = httpx.post(
        f"{live_server.url}/mcp",
        content=body.encode(),
        headers={
            "Accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )

    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert not result.get("isError"), result
    memory = result["structuredContent"]["memory"]
    assert (memory["key"], memory["value"], memory["tags"]) == ("k\ufffd", "v\ufffd", ["t\ufffd"])


def test_an_unreachable_database_is_a_tool_error_that_says_retry(tmp_path: Any) -> None:
    # Over HTTP every route answers 503 DatabaseUnavailable "retry shortly"; a tool said only
    # "Error executing tool read_memory", so the model could not tell an outage from a bug.
    unreachable = f"postgresql://nobody@/agmem?host={tmp_path}"

    async def main(url: str) -> list[Any]:
        async with Client(f"{url}/mcp") as client:
            calls = {
                "write_memory": {"key": "k", "value": 1, "scope": "global"},
                "read_memory": {"key": "k"},
                "list_memories": {},
                "delete_memory": {"key": "k"},
                "smart_resume": {"project_path": PROJECT},
                "search_memory": {"query": "k"},
                "get_context": {"project_path": PROJECT},
            }
            return [await client.call_tool(name, arguments) for name, arguments in calls.items()]

    for server in serve(unreachable, tmp_path, None):
        results = asyncio.run(main(server.url))
    for result in results:
        assert result.is_error
        text = result.content[0].text
        assert text.endswith(": DatabaseUnavailable: the database is unreachable; retry shortly")
        assert str(tmp_path) not in text


def test_a_ttl_of_null_removes_the_expiry_as_the_description_says(live_server: LiveServer) -> None:
    # write_memory's description says "omit to keep it; null removes expiry", as PUT
    # /api/memories does; the tool dropped a null like an omitted ttl, and the memory the model
    # meant to keep for good still expired an hour later.
    async def main() -> list[dict[str, Any]]:
        async with Client(f"{live_server.url}/mcp") as client:
            at = {"key": "current.task", "project_path": PROJECT}
            answers = []
            for arguments in ({"ttl": 3600, "tags": ["auth"]}, {}, {"ttl": None, "tags": None}):
                result = await client.call_tool("write_memory", {**at, "value": 1, **arguments})
                answers.append(structured(result)["memory"])
            return answers

    expiring, kept, forever = asyncio.run(main())
    assert expiring["ttl"] == 3600
    assert (kept["ttl"], kept["tags"]) == (3600, ["auth"])  # omitted: kept
    assert forever["ttl"] is None
    assert forever["expiresAt"] is None
    assert forever["tags"] == []  # a null clears them, as in a PUT's body


def test_an_answer_too_large_for_a_models_context_is_a_tool_error_saying_what_to_do(
    live_server: LiveServer,
) -> None:
    # list_memories answered 0.9 MB into the model's context, read_memory a 20 MB value.
    big = "x" * 60_000  # 15,000 tokens by the app's estimate: one fits, two do not
    huge = "y" * 120_000

    async def main() -> list[Any]:
        async with Client(f"{live_server.url}/mcp") as client:
            for key, value in (("big.a", big), ("big.b", big), ("huge", huge)):
                arguments = {"key": key, "value": value, "scope": "global"}
                structured(await client.call_tool("write_memory", arguments))
            calls = [
                ("read_memory", {"key": "big.a", "scope": "global"}),
                ("read_memory", {"key": "huge", "scope": "global"}),
                ("read_memory", {"key": "big.*", "scope": "global"}),
                ("list_memories", {"pattern": "big.*", "scope": "global"}),
                ("list_memories", {"pattern": "big.*", "scope": "global", "limit": 1}),
            ]
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    one, too_large, pattern, listed, limited = asyncio.run(main())
    assert structured(one)["memory"]["value"] == big
    assert structured(limited)["memories"][0]["value"] == big
    assert too_large.is_error
    assert re.fullmatch(
        r"Error executing tool read_memory: AnswerTooLarge: the answer is about 30\d\d\d tokens, "
        r"over the 25000 a tool answers into a model's context; read that memory with "
        r"`agmem memory get` or GET /api/memories/huge",
        too_large.content[0].text,
    ), too_large.content[0].text
    assert pattern.is_error
    assert "use list_memories with a narrower pattern" in pattern.content[0].text
    assert listed.is_error
    # The model is told what limit would do, not left to guess (search_memory said "ask for
    # fewer results" to a model whose limit of 80 could never fit, without saying how many).
    assert listed.content[0].text.endswith(
        "narrow it with pattern, tags or a smaller limit (the first 1 would fit)"
    )


def test_read_and_list_answer_a_memory_holding_an_integer_of_5000_digits(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # Stored by SQL (or an older build): the SDK's json.dumps of the answer raised Python's
    # int-to-string limit, and read_memory and list_memories answered only that message, so
    # one such memory broke every listing that held it.
    digits = "9" * 5000
    stored = f'{{"n": [{digits}, 1.50]}}'
    for key, value in (("a.plain", '"kept"'), ("b.digits", stored), ("project.n", stored)):
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('project', %s, %s, %s::jsonb, 'me')",
            (PROJECT, key, value),
        )

    async def main() -> None:
        async with Client(f"{live_server.url}/mcp") as client:
            read = structured(
                await client.call_tool("read_memory", {"key": "b.digits", "project_path": PROJECT})
            )
            memory = read["memory"]
            assert memory["value"] == f'{{"n":[{digits},1.5]}}'
            assert memory["valueIsJsonText"] is True
            listed = structured(await client.call_tool("list_memories", {"project_path": PROJECT}))
            values = {m["key"]: m["value"] for m in listed["memories"]}
            assert values == {
                "a.plain": "kept",
                "b.digits": memory["value"],
                "project.n": memory["value"],
            }
            assert "valueIsJsonText" not in listed["memories"][0]
            resumed = structured(
                await client.call_tool("smart_resume", {"project_path": PROJECT, "budget": 20000})
            )
            assert [m["value"] for m in resumed["context"]["project"]] == [memory["value"]]

    asyncio.run(main())


def test_read_and_list_answer_a_memory_nested_3000_deep_as_its_text(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # Stored by SQL (or an older build): the read's jsonb parse raised RecursionError.
    deep = "[" * 3000 + "1" + "]" * 3000
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', %s, 'deep', %s::jsonb, 'me')",
        (PROJECT, deep),
    )
    row = db.execute("SELECT value::text FROM memories").fetchone()
    assert row is not None

    async def main() -> None:
        async with Client(f"{live_server.url}/mcp") as client:
            read = structured(
                await client.call_tool("read_memory", {"key": "deep", "project_path": PROJECT})
            )
            assert read["memory"]["value"] == row[0]
            assert read["memory"]["valueIsJsonText"] is True
            listed = structured(await client.call_tool("list_memories", {"project_path": PROJECT}))
            assert [m["value"] for m in listed["memories"]] == [row[0]]

    asyncio.run(main())


def test_a_number_a_write_cannot_keep_is_named_invalid_json_as_over_http(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # The same refusal was `ValidationFailed` here and `400 InvalidJSON` over HTTP.
    for value in ("1e400", "[1, -1e309]", '{"a": -1e999}'):
        body = (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
            f'"write_memory", "arguments": {{"key": "k", "value": {value}, "scope": "global"}}}}}}'
        )
        response = httpx.post(
            f"{live_server.url}/mcp",
            content=body.encode(),
            headers={
                "Accept": "application/json, text/event-stream",
                "content-type": "application/json",
            },
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result["isError"], result
        assert result["content"][0]["text"].startswith(
            "Error executing tool write_memory: InvalidJSON: value: a number is"
        ), (value, result)
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_a_value_read_as_its_text_and_written_back_keeps_its_type(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # read_memory answers it as its JSON text, flagged; written back with the flag ignored it
    # became a jsonb string.
    tiny = "0." + "0" * 500 + "1"
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', %s, 'tiny', %s::jsonb, 'me')",
        (PROJECT, f"[{tiny}, 1.50]"),
    )
    deep = "[" * 3000 + "1" + "]" * 3000

    async def main() -> None:
        async with Client(f"{live_server.url}/mcp") as client:
            read = structured(
                await client.call_tool("read_memory", {"key": "tiny", "project_path": PROJECT})
            )
            memory = read["memory"]
            assert memory["valueIsJsonText"] is True
            written = structured(
                await client.call_tool(
                    "write_memory",
                    {
                        "key": "tiny",
                        "value": memory["value"],
                        "value_is_json_text": True,
                        "project_path": PROJECT,
                        "tags": ["changed"],
                    },
                )
            )
            assert written["memory"]["valueIsJsonText"] is True
            refused = await client.call_tool(
                "write_memory",
                {"key": "deep", "value": deep, "value_is_json_text": True, "scope": "global"},
            )
            assert refused.is_error
            # As a PUT answers it (tests/memories/test_unreadable_values.py).
            assert refused.content[0].text == (
                "Error executing tool write_memory: ValidationFailed: value: nested deeper than "
                "64 levels of arrays and objects"
            ), refused.content[0].text

    asyncio.run(main())
    stored = db.execute("SELECT value::text, tags FROM memories WHERE key = 'tiny'").fetchone()
    assert stored == (f"[{tiny}, 1.50]", ["changed"])
    assert db.execute("SELECT count(*) FROM memories WHERE key = 'deep'").fetchone() == (0,)


def _call(live_server: LiveServer, arguments: str, request_id: str = "1") -> dict[str, Any]:
    """The result of a `write_memory` call whose arguments are the JSON text `arguments`, sent
    as it is (a client's JSON, not Python's)."""
    body = (
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {{"name": '
        f'"write_memory", "arguments": {arguments}}}}}'
    )
    response = httpx.post(
        f"{live_server.url}/mcp",
        content=body.encode(),
        headers={
            "Accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_write_memory_keeps_the_numbers_as_sent_without_the_flag(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # The SDK parses the arguments into floats before the tool runs: `1e-400` was stored as 0.0
    # and `1.50` as 1.5, where a PUT of the same value keeps them.
    tiny = "0." + "0" * 399 + "1"
    # A message with a lone surrogate is cleaned first (app/mcp/wire.py), its numbers kept too.
    for key, value, request_id in (
        ("a", '{"n": [1e-400, 1.50, 0.1, 7]}', "1"),
        ("b", "2.50", '"x"'),
        ("c", '{"s": "a\\ud800", "n": 1.50}', "3"),
    ):
        arguments = f'{{"key": "{key}", "value": {value}, "scope": "global"}}'
        result = _call(live_server, arguments, request_id)
        assert not result.get("isError"), result
    stored = dict(db.execute("SELECT key, value::text FROM memories ORDER BY key").fetchall())
    assert stored == {
        "a": f'{{"n": [{tiny}, 1.50, 0.1, 7]}}',
        "b": "2.50",
        "c": '{"n": 1.50, "s": "a\ufffd"}',
    }
    # One the database cannot keep is refused as a PUT refuses it, not stored as 0.0.
    refused = _call(live_server, '{"key": "d", "value": [1e-999999], "scope": "global"}')
    assert refused["isError"], refused
    assert refused["content"][0]["text"].startswith(
        "Error executing tool write_memory: InvalidJSON: value: a number is written with 999999 "
        "digits after the point"
    ), refused
    assert db.execute("SELECT count(*) FROM memories WHERE key = 'd'").fetchone() == (0,)


def test_write_memory_parses_a_json_string_value_whether_or_not_it_holds_a_float(
    live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # The SDK parses a string argument that reads as a JSON array or object for a value typed
    # Any: `"[1]"` was stored as [1] but `"[1.5]"` as the string "[1.5]" (its float sent the
    # tool to the string as sent). Both are parsed now, their numbers as written.
    for key, value in (
        ("a", '"[1]"'),
        ("b", '"[1.5]"'),
        ("c", '"{\\"a\\": 0.5}"'),
        ("d", '"[1.50, 1e-400]"'),
        ("e", '"1.5"'),
        ("f", '"hello"'),
    ):
        result = _call(live_server, f'{{"key": "{key}", "value": {value}, "scope": "global"}}')
        assert not result.get("isError"), result
    stored = dict(db.execute("SELECT key, value::text FROM memories ORDER BY key").fetchall())
    assert stored == {
        "a": "[1]",
        "b": "[1.5]",
        "c": '{"a": 0.5}',
        "d": "[1.50, 0." + "0" * 399 + "1]",
        # A scalar's text is no array or object: the SDK leaves it a string, and so is it stored.
        "e": '"1.5"',
        "f": '"hello"',
    }


def _post(live_server: LiveServer, body: str, content_type: str) -> httpx.Response:
    """`body` posted to `/mcp` as `content_type`, a JSON answer asked for."""
    return httpx.post(
        f"{live_server.url}/mcp",
        content=body,
        headers={"Content-Type": content_type, "Accept": "application/json"},
        timeout=20,
    )


def test_messages_the_sdk_cannot_take_are_short_json_rpc_errors(live_server: LiveServer) -> None:
    # A wrong Content-Type was the SDK's plain-text 400; a batch (`[]`) or an object of no
    # message's shape was -32602 with pydantic's dump of 4 to 11 validation errors.
    ping = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    batch = (
        "Invalid Request: a batch (JSON array) is not taken; send one JSON-RPC message at a time"
    )
    shape = (
        'Invalid Request: not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0" and a '
        '"method", or a "result" or "error" with an "id")'
    )
    for body, content_type, status, code, message in (
        (
            ping,
            "text/plain",
            415,
            -32600,
            "Unsupported Media Type: Content-Type must be application/json",
        ),
        ("[]", "application/json", 400, -32600, batch),
        (f"[{ping}]", "application/json", 400, -32600, batch),
        ('{"x": 1}', "application/json", 400, -32600, shape),
        (
            "not json",
            "application/json",
            400,
            -32700,
            "Parse error: expected ident at line 1 column 2",
        ),
    ):
        answer = _post(live_server, body, content_type)

        assert (answer.status_code, answer.headers["content-type"]) == (status, "application/json")
        error = {"code": code, "message": message}
        assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": error}


def test_a_json_content_type_in_any_case_or_with_parameters_is_taken(
    live_server: LiveServer,
) -> None:
    # Media types are case-insensitive (RFC 9110, 8.3.1), but the SDK compares the text with
    # "application/json": `Content-Type: Application/JSON` was its 415.
    ping = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    for content_type in (
        "Application/JSON",
        "APPLICATION/JSON; charset=UTF-8",
        "application/Json;charset=utf-8",
    ):
        answer = _post(live_server, ping, content_type)

        assert answer.status_code == 200, (content_type, answer.text)
        assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, content_type


@pytest.mark.parametrize(
    ("state", "detail"),
    [
        (
            "XX001",
            "DatabaseUnavailable: the database failed inside (a damaged or unwritable file, a full "
            "or failing disk: see its log); retry once it is repaired",
        ),
        (
            "58030",
            "DatabaseUnavailable: the database could not read or write its files (see its log); "
            "retry once it is repaired",
        ),
        ("XX000", None),
    ],
)
def test_a_database_failing_inside_is_the_tool_error_http_answers(
    state: str, detail: str | None, live_server: LiveServer, db: psycopg.Connection[Any]
) -> None:
    # As POST /api/session/start's 503 (tests/api/test_errors.py): damaged files and I/O errors
    # say the database failed and to retry once repaired; a fault inside Postgres (XX000) fails
    # every retry the same, so it is not worded as one a retry cures.
    db.execute(
        "CREATE FUNCTION fail_inside() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = '{state}'; END $$"
    )
    db.execute(
        "CREATE TRIGGER fail_inside BEFORE INSERT ON memories "
        "FOR EACH ROW EXECUTE FUNCTION fail_inside()"
    )

    async def main() -> Any:
        async with Client(f"{live_server.url}/mcp") as client:
            return await client.call_tool(
                "write_memory", {"key": "k", "value": 1, "scope": "global"}
            )

    try:
        result = asyncio.run(main())
    finally:
        db.execute("DROP TRIGGER fail_inside ON memories")
        db.execute("DROP FUNCTION fail_inside()")

    assert result.is_error
    text = result.content[0].text
    if detail is None:  # the SDK's word for a bug, whose traceback it logs
        assert text == "Error executing tool write_memory", text
    else:
        assert text.endswith(f": {detail}"), text
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_write_memory_with_a_session_id_but_not_scope_session_is_a_tool_error(
    live_server: LiveServer,
) -> None:
    # The session id was dropped and the memory stored for the whole project.
    async def main() -> tuple[list[Any], Any]:
        async with Client(f"{live_server.url}/mcp") as client:
            arguments = {"key": "current.step", "value": "v", "project_path": PROJECT}
            refused = [
                await client.call_tool("write_memory", {**arguments, "session_id": "s-1"}),
                await client.call_tool(
                    "write_memory", {**arguments, "session_id": "s-1", "scope": "project"}
                ),
            ]
            read = await client.call_tool(
                "read_memory", {"key": "current.step", "project_path": PROJECT}
            )
            return refused, structured(read)

    refused, read = asyncio.run(main())
    for answer in refused:
        assert answer.is_error, answer.content
        assert "session_id names the session of a session memory" in answer.content[0].text
    assert read["memory"] is None


def test_list_memories_pages_with_a_cursor(live_server: LiveServer) -> None:
    # The tool stopped at `limit` with no cursor and no sign that more existed.
    async def main() -> list[dict[str, Any]]:
        async with Client(f"{live_server.url}/mcp") as client:
            for key in ("t.a", "t.b", "t.c"):
                arguments = {"key": key, "value": key, "project_path": PROJECT}
                structured(await client.call_tool("write_memory", arguments))
            pages = [
                structured(
                    await client.call_tool("list_memories", {"project_path": PROJECT, "limit": 2})
                )
            ]
            following = {"project_path": PROJECT, "limit": 2, "cursor": pages[0]["nextCursor"]}
            pages.append(structured(await client.call_tool("list_memories", following)))
            return pages

    first, second = asyncio.run(main())
    assert [m["key"] for m in first["memories"]] == ["t.a", "t.b"]
    assert first["hasMore"] is True
    assert [m["key"] for m in second["memories"]] == ["t.c"]
    assert (second["hasMore"], second["nextCursor"]) == (False, None)
