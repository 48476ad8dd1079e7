from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

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
