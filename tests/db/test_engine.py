"""Connections the app opens: every one works in UTC, whatever the server or client zone."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import engine as engine_module
from app.db.engine import sqlalchemy_url
from app.main import create_app
from tests.pools import terminate_backends


def test_times_are_utc_when_the_session_zone_is_not(
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libpq sets the session's zone from PGTZ, as a server's `timezone` setting would; Postgres
    # then returns timestamptz values in that zone, and the API must still answer in UTC.
    monkeypatch.setenv("PGTZ", "Asia/Kolkata")
    app = create_app(settings, database_url=database_url)
    with TestClient(app, raise_server_exceptions=False) as client:
        written = client.put("/api/memories/project.stack", json={"value": "x", "scope": "global"})
        assert written.status_code == 201, written.text
        read = client.get("/api/memories/project.stack")  # the exact read's own pool
        listed = client.get("/api/memories")
    times = [written.json()["createdAt"], read.json()["accessedAt"]]
    times += [memory["updatedAt"] for memory in listed.json()["memories"]]
    assert all(at.endswith("Z") for at in times), times


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@h:5432/db",
        "postgres://u:p@h:5432/db",
        "postgresql+psycopg2://u:p@h:5432/db",
        "postgresql+asyncpg://u:p@h:5432/db",
        "postgresql+pg8000://u:p@h:5432/db",
        "postgres+psycopg://u:p@h:5432/db",
    ],
)
def test_every_postgresql_driver_url_becomes_psycopg(url: str) -> None:
    # docs/configuration.md: any postgresql+driver:// form is accepted and normalised.
    assert sqlalchemy_url(url) == "postgresql+psycopg://u:p@h:5432/db"


def test_requests_after_the_engines_backends_were_terminated_answer(
    database_url: str, db: psycopg.Connection[Any], settings: Settings
) -> None:
    # The engine's pool keeps idle connections whose backends can go (pg_terminate_backend,
    # Postgres restarting its backends after the OOM killer took one, an external server's
    # restart): the next request through each took one of them and answered 503.
    app = create_app(settings, database_url=database_url)
    with TestClient(app, raise_server_exceptions=False) as client:
        started = client.post("/api/session/start", json={"projectPath": "/p", "id": "s"})
        assert started.status_code == 201, started.text
        for path in ("/health", "/api/sessions", "/api/sessions/s", "/health"):
            assert terminate_backends(db, "agmem") >= 1
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)


def test_a_connection_made_for_a_checkout_is_not_checked_again(
    database_url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pooled connection found without its backend is replaced in its slot and checked out
    # again. Were the new one checked too, a second "gone" (backends killed that fast) made the
    # pool give up with an error no handler knows: a 500 (SQLAlchemy's InvalidRequestError).
    app = create_app(settings, database_url=database_url)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/api/sessions").status_code == 200  # a connection now in the pool
        checked: list[object] = []

        def gone(connection: object) -> bool:
            checked.append(connection)
            return False

        monkeypatch.setattr(engine_module, "usable", gone)
        response = client.get("/api/sessions")
        assert response.status_code == 200, response.text
        assert len(checked) == 1  # the pooled one, not the one made to replace it
