"""An excluded project (AGMEM_CAPTURE_EXCLUDE_PROJECTS) stores nothing by any path: capture has
its own tests (tests/capture/test_privacy_and_size.py); here the memories and the sync, whose
writes stored an excluded project's memories and files as any other's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.main import create_app
from tests.conftest import make_settings


@pytest.fixture
def secret_project(tmp_path: Path) -> Path:
    project = tmp_path / "secret-client"
    (project / "sessions").mkdir(parents=True)
    (project / "MEMORY.md").write_text("# Client\n\nThe zebracorn contract terms.\n")
    return project


@pytest.fixture
def excluding(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> Iterator[TestClient]:
    settings = make_settings(
        home=tmp_path / "home", capture_exclude_projects=[f"{tmp_path}/secret*"]
    )
    with TestClient(create_app(settings, database_url=database_url)) as client:
        yield client


def stored(db: psycopg.Connection[Any]) -> tuple[Any, ...]:
    counts = db.execute(
        "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memory_chunks), "
        "(SELECT count(*) FROM memory_files), (SELECT count(*) FROM sync_runs)"
    ).fetchone()
    assert counts is not None
    return tuple(counts)


def test_a_memory_of_an_excluded_project_is_refused(
    excluding: TestClient, db: psycopg.Connection[Any], secret_project: Path
) -> None:
    for scope in ("project", "shared"):
        response = excluding.put(
            "/api/memories/project.terms",
            json={"value": "zebracorn", "scope": scope, "projectPath": f"{secret_project}/"},
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "ProjectExcluded"
    assert stored(db) == (0, 0, 0, 0)
    # A session that session/start answered `excluded` for, named without its project.
    start = excluding.post("/api/session/start", json={"projectPath": str(secret_project)})
    assert start.json()["status"] == "excluded"
    response = excluding.put(
        "/api/memories/current.task",
        json={"value": "zebracorn", "scope": "session", "sessionId": start.json()["id"]},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "ProjectExcluded"
    assert stored(db) == (0, 0, 0, 0)
    # A global memory belongs to no project.
    response = excluding.put("/api/memories/user.editor", json={"value": "vim", "scope": "global"})
    assert response.status_code == 201


def test_a_sync_of_an_excluded_project_is_refused(
    excluding: TestClient,
    db: psycopg.Connection[Any],
    database_url: str,
    secret_project: Path,
    tmp_path: Path,
) -> None:
    response = excluding.post("/api/sync", json={"projectPath": str(secret_project)})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "ProjectExcluded"
    assert stored(db) == (0, 0, 0, 0)

    result = CliRunner().invoke(
        cli,
        ["sync", "--project", str(secret_project)],
        env={
            "DATABASE_URL": database_url,
            "AGMEM_CAPTURE_EXCLUDE_PROJECTS": f"{tmp_path}/secret*",
        },
    )
    assert result.exit_code == 1, result.output
    assert "excluded" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert stored(db) == (0, 0, 0, 0)
