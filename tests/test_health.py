from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.db.supervisor import EmbeddedSupervisor
from app.main import create_app
from app.worker.metrics import WORKER_APPLICATION_NAME
from tests.conftest import libpq_url, make_settings


def test_health_reports_database_and_pgvector(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    response = client.get("/health")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"] == "ok"
    installed = db.execute(
        "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
    ).fetchone()
    assert installed is not None
    assert body["pgvector"] == installed[0]
    assert body["embedding"] == {"provider": "local", "model": "wordllama-l2_supercat", "dims": 256}
    assert (body["worker"]["pending"], body["worker"]["failed"]) == (0, 0)


def test_health_is_503_when_database_is_down(tmp_path: Any) -> None:
    unreachable = f"postgresql://nobody@/agmem?host={tmp_path}"
    app = create_app(make_settings(home=tmp_path), database_url=unreachable)

    with TestClient(app) as client:
        response = client.get("/health")

    assert response.status_code == 503
    assert response.headers["Retry-After"]
    body = response.json()
    assert body["database"].startswith("unreachable")
    assert body["error"] == "DatabaseUnavailable"


def test_health_says_when_the_embedded_server_is_being_restarted(tmp_path: Any) -> None:
    unreachable = f"postgresql://nobody@/agmem?host={tmp_path}"
    app = create_app(make_settings(home=tmp_path), database_url=unreachable)

    async def nothing() -> None:
        return None

    with TestClient(app) as client:
        supervisor = EmbeddedSupervisor(tmp_path / "pgdata", unreachable, nothing)
        supervisor.down_since, supervisor.attempts = 0.0, 3
        supervisor.last_error = "could not start the embedded PostgreSQL in /x: no space left"
        app.state.agmem.supervisor = supervisor
        response = client.get("/health")

    assert response.status_code == 503
    assert response.json()["detail"] == (
        "the database is unreachable (the embedded PostgreSQL stopped; restart attempt 3, "
        "last failure: could not start the embedded PostgreSQL in /x: no space left); "
        "retry shortly"
    )


def test_health_names_no_server_path_or_host_without_the_token(tmp_path: Any) -> None:
    # /health stays open for probes; with a token set (a shared or exposed server), its 503 gave
    # anyone the database's error: the embedded server's socket path, or a remote database's
    # host, port and user name. A caller presenting the token still gets the reason.
    unreachable = f"postgresql://agmem_user@/agmem?host={tmp_path}"
    app = create_app(make_settings(home=tmp_path, api_token="s3cret"), database_url=unreachable)

    async def nothing() -> None:
        return None

    with TestClient(app) as client:
        supervisor = EmbeddedSupervisor(tmp_path / "pgdata", unreachable, nothing)
        supervisor.down_since, supervisor.attempts = 0.0, 3
        supervisor.last_error = f"could not start the embedded PostgreSQL in {tmp_path}: full"
        app.state.agmem.supervisor = supervisor
        anonymous = client.get("/health")
        authorized = client.get("/health", headers={"Authorization": "Bearer s3cret"})

    assert anonymous.status_code == authorized.status_code == 503
    assert anonymous.headers["Retry-After"]
    assert str(tmp_path) not in anonymous.text
    assert anonymous.json()["database"] == "unreachable"
    assert anonymous.json()["detail"] == "the database is unreachable; retry shortly"
    assert str(tmp_path) in authorized.json()["database"]
    assert "restart attempt 3" in authorized.json()["detail"]


@contextmanager
def disk_full(db: psycopg.Connection[Any]) -> Iterator[None]:
    """A trigger stands in for the full disk: Postgres answers a write with SQLSTATE 53100."""
    db.execute(
        "CREATE FUNCTION agmem_test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'could not extend file: No space left on device' "
        "USING ERRCODE = '53100'; END $$"
    )
    db.execute(
        "CREATE TRIGGER agmem_test_disk_full BEFORE INSERT ON memories "
        "FOR EACH ROW EXECUTE FUNCTION agmem_test_disk_full()"
    )
    try:
        yield
    finally:
        db.execute("DROP TRIGGER agmem_test_disk_full ON memories")
        db.execute("DROP FUNCTION agmem_test_disk_full()")


def test_health_is_degraded_while_the_database_refuses_writes_for_a_full_disk(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Every write was answered 503 "disk is full" while /health, which only reads, said "ok".
    with disk_full(db):
        assert client.get("/health").json()["status"] == "ok"
        written = client.put("/api/memories/k", json={"value": 1, "scope": "global"})
        assert written.status_code == 503
        assert written.json()["detail"] == "the database's disk is full; retry once space is freed"

        response = client.get("/health")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["database"]) == ("degraded", "ok")
    [problem] = body["problems"]
    assert problem.startswith("the database refused a request ")
    assert problem.endswith(" s ago: the database's disk is full; retry once space is freed")


def test_health_is_degraded_after_a_tool_call_met_a_full_disk(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Only the HTTP API's handlers noted the refusal: agents write through MCP tools, whose
    # refusals left /health saying "ok" (review of ops28).
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "write_memory",
            "arguments": {"key": "k", "value": 1, "scope": "global"},
        },
    }
    with disk_full(db):
        written = client.post(
            "/mcp", json=call, headers={"Accept": "application/json, text/event-stream"}
        )
        response = client.get("/health")

    result = written.json()["result"]
    assert result["isError"] is True
    assert "the database's disk is full" in result["content"][0]["text"]
    body = response.json()
    assert (body["status"], body["database"]) == ("degraded", "ok")
    [problem] = body["problems"]
    assert problem.endswith(" s ago: the database's disk is full; retry once space is freed")


def test_health_is_degraded_when_work_waits_and_no_worker_runs(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # With no worker at all, only `oldestPendingSeconds` growing showed that nothing would ever
    # be compressed or summarised.
    db.execute("INSERT INTO sessions (id, project_path, status) VALUES ('s1', '/p', 'ending')")

    alone = client.get("/health").json()
    assert alone["status"] == "degraded"
    assert (alone["worker"]["pending"], alone["worker"]["running"]) == (1, 0)
    assert alone["problems"] == [
        "no worker is running: 1 jobs wait "
        "(start `agmem worker`, or `agmem serve` without --no-worker)"
    ]

    # A worker holds its LISTEN connection under this name while it runs (app/worker/loop.py).
    with psycopg.connect(libpq_url(database_url), application_name=WORKER_APPLICATION_NAME):
        served = client.get("/health").json()
    assert (served["status"], served["problems"], served["worker"]["running"]) == ("ok", [], 1)
