"""Shared fixtures: one migrated PostgreSQL database per run, truncated between tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.config import Settings, load_settings
from app.db import migrate
from app.db.models import Base
from app.main import create_app
from tests.postgres import PostgresServer, choose_kind, create_database, drop_database, start_server

_CHOSEN: dict[str, str] = {}
_OWN_BASETEMP_KEY = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Each run gets its own temporary root. Every pytest run resets /tmp/pytest-of-<user> to mode
    # 0700 when it starts, which locks the embedded Postgres's own system user (pgserver chmods
    # the folders above its data folder) out of the data folders of any other run in progress.
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="agmem-pytest-")
        config.stash[_OWN_BASETEMP_KEY] = config.option.basetemp


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Kept after a failure, like pytest's own, to look at; removed after a clean run.
    own = session.config.stash.get(_OWN_BASETEMP_KEY, None)
    if own is not None and exitstatus == 0:
        shutil.rmtree(own, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str:
    _CHOSEN["kind"] = choose_kind()
    return f"postgres: {_CHOSEN['kind']}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "used" in _CHOSEN:
        terminalreporter.write_line(f"postgres used: {_CHOSEN['used']}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with start_server(_CHOSEN.get("kind") or choose_kind()) as server:
        _CHOSEN["used"] = server.kind
        yield server


@pytest.fixture(scope="session")
def database_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database migrated to head once for the whole run."""
    url = create_database(pg_server)
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


def libpq_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


TABLES = ", ".join(f'"{name}"' for name in sorted(Base.metadata.tables))


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A clean database for this test (every table truncated), and a connection to inspect it."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        connection.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        yield connection


def make_settings(**overrides: Any) -> Settings:
    """Settings for tests: nothing from the developer's environment or .env leaks in."""
    base: dict[str, Any] = {
        "database_url": None,
        "api_token": None,
        "gemini_api_key": None,
        "gemini_base_url": None,
        "_env_file": None,
    }
    base.update(overrides)
    return load_settings(**base)


@pytest.fixture
def settings(tmp_path: Any) -> Settings:
    return make_settings(home=tmp_path / "home")


@pytest.fixture
def client(
    database_url: str, db: psycopg.Connection[Any], settings: Settings
) -> Iterator[TestClient]:
    """The real app on the test database, through httpx."""
    app = create_app(settings, database_url=database_url)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
