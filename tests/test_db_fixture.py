"""The `db` fixture's reset, done on a connection kept for the run (tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests import postgres
from tests.conftest import RESET_APPLICATION_NAME, TableReset
from tests.pools import terminate_backends

SESSION = "INSERT INTO sessions (id, project_path) VALUES ('s', '/p')"
OBSERVATION = (
    "INSERT INTO observations (id, session_id, project_path, function_name, observation_type)"
    " VALUES (%s, 's', '/p', 'Read', 'read') RETURNING seq"
)


def test_the_reset_empties_what_the_test_wrote_and_restarts_identities(
    db: psycopg.Connection[Any], table_reset: TableReset
) -> None:
    db.execute(SESSION)
    first = db.execute(OBSERVATION, ["o1"]).fetchone()

    table_reset.reset()

    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    db.execute(SESSION)
    assert db.execute(OBSERVATION, ["o1"]).fetchone() == first


def test_the_reset_survives_its_connection_terminated_between_tests(
    db: psycopg.Connection[Any], table_reset: TableReset
) -> None:
    # A test that terminates the database's backends (tests/pools.py) ends the kept one too;
    # the next test's reset must not fail for it.
    assert terminate_backends(db, RESET_APPLICATION_NAME) == 1
    db.execute(SESSION)

    table_reset.reset()

    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_the_test_server_keeps_its_data_in_memory_only_where_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker's 64 MB /dev/shm cannot hold a server: initdb would fail there, not the tests.
    monkeypatch.setattr(postgres, "MEMORY_FOLDER", tmp_path)
    monkeypatch.setattr(postgres, "MEMORY_NEEDED_BYTES", 0)
    assert postgres.data_parent() == tmp_path

    monkeypatch.setattr(postgres, "MEMORY_NEEDED_BYTES", shutil.disk_usage(tmp_path).free + 1)
    assert postgres.data_parent() is None

    monkeypatch.setattr(postgres, "MEMORY_FOLDER", tmp_path / "none")
    monkeypatch.setattr(postgres, "MEMORY_NEEDED_BYTES", 0)
    assert postgres.data_parent() is None
