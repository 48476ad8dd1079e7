"""`agmem serve`'s migration at its start: skipped on a database at head, run otherwise."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from app.db import migrate
from app.db.revision import script_head
from tests.cli.helpers import free_port, invoke_agmem, start_serve, wait_for_health
from tests.conftest import libpq_url
from tests.postgres import PostgresServer, create_database, drop_database

pytestmark = pytest.mark.slow


@contextmanager
def scratch_database(pg_server: PostgresServer, *setup: str) -> Iterator[str]:
    url = create_database(pg_server, prefix="agmem_serve_migration")
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        for statement in setup:
            connection.execute(statement)
    try:
        yield url
    finally:
        drop_database(pg_server, url)


def stopped(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGTERM)
    output, _ = server.communicate(timeout=60)
    return output


def version_rows(url: str) -> list[tuple[str]]:
    with psycopg.connect(libpq_url(url)) as connection:
        return connection.execute("SELECT version_num FROM alembic_version").fetchall()


def test_serve_on_a_database_at_head_starts_without_running_the_upgrade(
    database_url: str,
) -> None:
    # Every start ran Alembic's upgrade, which takes the migration lock: a server at head waited
    # behind another process's migration (here a holder that never lets go) for nothing.
    port = free_port()
    with psycopg.connect(libpq_url(database_url), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK,))
        server = start_serve(port, "--no-worker", DATABASE_URL=database_url)
        try:
            wait_for_health(port, server, timeout=60)
        finally:
            output = stopped(server)
            holder.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK,))

    assert "migrate.waiting" not in output
    assert "schema at head" in output
    assert version_rows(database_url) == [(migrate.head_revision(),)]


def test_serve_on_a_database_behind_head_upgrades_it(pg_server: PostgresServer) -> None:
    with scratch_database(pg_server) as url:
        migrate.upgrade(url, "0006")
        port = free_port()
        server = start_serve(port, "--no-worker", DATABASE_URL=url)
        try:
            wait_for_health(port, server, timeout=120)
        finally:
            output = stopped(server)
        assert version_rows(url) == [(migrate.head_revision(),)], output


@pytest.mark.parametrize("setup", ["empty", "ahead"])
def test_serve_on_a_database_a_newer_agmem_migrated_stops_saying_so(
    pg_server: PostgresServer, setup: str
) -> None:
    # A revision this agmem has no migration for: the check finds it not at head, and the
    # upgrade refuses it in one line, as before the check. With the tables of head (the newer
    # agmem's are a superset), or none.
    with scratch_database(
        pg_server,
        "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)",
    ) as url:
        if setup == "ahead":
            migrate.upgrade(url)
        with psycopg.connect(libpq_url(url)) as connection:
            connection.execute("DELETE FROM alembic_version")
            connection.execute("INSERT INTO alembic_version VALUES ('9999')")
        result = invoke_agmem("serve", "--no-worker", "--port", "0", DATABASE_URL=url)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "agmem: error: cannot migrate to 'head': the database was migrated by a newer agmem "
        "(its schema revision '9999' is unknown to this one): upgrade agmem, or with the newer "
        f"one run `agmem migrate --down {migrate.head_revision()}`"
    )


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    assert script_head() == migrate.head_revision()


def test_serve_on_a_database_that_never_answers_waits_for_it_once(tmp_path: Path) -> None:
    # The check at head waited its 5 s connect timeout, then the upgrade its own 5 s: a database
    # down behind a silent address took twice as long to report. Here a listener that accepts
    # and never speaks counts the connections tried.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        result = invoke_agmem(
            "serve",
            "--no-worker",
            "--port",
            "0",
            AGMEM_HOME=str(tmp_path / "home"),
            DATABASE_URL=f"postgresql://agmem@127.0.0.1:{port}/agmem",
        )
    finally:
        # A close alone does not wake an accept() blocked in another thread (Linux): the join
        # waited its whole 5 s. The shutdown does.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
        for connection in accepted:
            connection.close()

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("agmem: error: database unreachable:")
    assert len(accepted) == 1
