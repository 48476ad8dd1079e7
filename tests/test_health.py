from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.db.supervisor import EmbeddedSupervisor
from app.main import create_app
from tests.conftest import make_settings


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
