"""Shared fixtures: one migrated PostgreSQL database per run, truncated between tests."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy
import structlog
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.config import Settings, load_settings
from app.db import migrate
from app.db.models import Base
from app.logs import configure_logging
from app.main import create_app
from tests import cpu_accounting, route_cache
from tests.cli.helpers import run_agmem

# A suite started in the background of a non-interactive shell (`make test &`, a CI runner's
# `bash -c`) inherits Ctrl-C ignored, and so did every agmem process a test starts: the tests
# of what Ctrl-C does saw nothing happen (5 failed so, in the lead's background run of round
# 21). Exec keeps an ignored signal ignored but puts a handled one back to its default, so
# handling it here gives the processes the tests start a user's shell's Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
from tests.postgres import PostgresServer, choose_kind, create_database, drop_database, start_server
from tests.run_roots import make_run_root, prune_finished_roots
from tests.timeouts import pytest_timeout_set_timer  # noqa: F401  (the hook, registered here)

_CHOSEN: dict[str, str] = {}
_OWN_BASETEMP_KEY = pytest.StashKey[str]()
_OWN_LOCK_KEY = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Each run gets its own temporary root. Every pytest run resets /tmp/pytest-of-<user> to mode
    # 0700 when it starts, which locks the embedded Postgres's own system user (pgserver chmods
    # the folders above its data folder) out of the data folders of any other run in progress.
    if config.option.basetemp is None:
        prune_finished_roots(Path(tempfile.gettempdir()))
        config.option.basetemp, config.stash[_OWN_LOCK_KEY] = make_run_root()
        config.stash[_OWN_BASETEMP_KEY] = config.option.basetemp
    share_bytecode_with_subprocesses(config.option.basetemp)
    # The logging every `agmem` command sets up (app/cli/common.py), from the first test: left
    # to structlog's default until the first in-process command set it, the tests before that
    # logged each exception as rich's traceback with every frame's locals (~2.5 s a 500 in
    # tests/api), which no agmem process prints.
    configure_logging("info")
    cpu_accounting.configure(config)
    route_cache.install()


@pytest.fixture(autouse=True)
def _logging_at_the_suites_level() -> Iterator[None]:
    """After a test that set another level (an in-process command at AGMEM_LOG_LEVEL=error), the
    suite's again. Left so, every logger first used in a later test kept that level (a logger
    keeps its configuration of its first use): tests/proxy/test_capture_live.py's log checks
    saw nothing, 4 failed after tests/worker/test_unanswered.py in one process."""
    yield
    if structlog.get_config()["wrapper_class"] is not _SUITE_LEVEL:
        configure_logging("info")


_SUITE_LEVEL = structlog.make_filtering_bound_logger(logging.INFO)


def share_bytecode_with_subprocesses(basetemp: str) -> None:
    """Let the `agmem` processes the tests start compile each module once per run, not each time.

    With PYTHONDONTWRITEBYTECODE set (as in many container images) and a venv without bytecode
    (`uv sync` writes none; `make install` compiles it), every process compiled its ~2,500
    modules from source: ~3 s of CPU of each of the ~30 processes the suite starts. They then
    write bytecode to a folder of this run (removed with it), never next to the sources.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or _venv_has_bytecode():
        return
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(basetemp, "pycache"))


def _venv_has_bytecode() -> bool:
    # A bytecode folder would hide it: Python reads compiled modules from one place only.
    return Path(importlib.util.cache_from_source(sqlalchemy.__file__)).exists()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Kept after a failure, like pytest's own, to look at (the next runs keep the newest three:
    # tests/run_roots.py); removed after a clean run.
    _record_used(session.config)
    own = session.config.stash.get(_OWN_BASETEMP_KEY, None)
    if own is not None and exitstatus == 0:
        shutil.rmtree(own, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str:
    _CHOSEN["kind"] = choose_kind()
    return f"postgres: {_CHOSEN['kind']}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "used" in _CHOSEN:
        terminalreporter.write_line(f"postgres used: {_CHOSEN['used']}")


# Under pytest-xdist (`make pytest`) each worker starts its own server: a worker hands the kind
# it used back to the controller, which prints the summary.
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    used = getattr(node, "workeroutput", {}).get("postgres_used")
    if used:
        _CHOSEN["used"] = used


def _record_used(config: pytest.Config) -> None:
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None and "used" in _CHOSEN:
        workeroutput["postgres_used"] = _CHOSEN["used"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with start_server(_CHOSEN.get("kind") or choose_kind(), in_memory=True) as server:
        _CHOSEN["used"] = server.kind
        yield server


@pytest.fixture(scope="session")
def database_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database migrated to head once for the whole run."""
    url = create_database(pg_server)
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="session")
def _embedded_home_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("embedded-template") / "home"
    migrated = run_agmem("migrate", AGMEM_HOME=str(home))
    assert migrated.returncode == 0, migrated.stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "migrate left its server running"
    (home / "pgdata" / "log").unlink()  # each copy's server log starts empty
    return home


@pytest.fixture
def embedded_home(_embedded_home_template: Path, tmp_path: Path) -> Path:
    """`tmp_path / "home"`: an AGMEM_HOME whose embedded PostgreSQL is initialised and migrated
    to head, and stopped, as after a first `agmem` command.

    For tests of what a command does with the server (signals, restarts, sharing), not of its
    creation: initdb and the migrations cost each fresh home ~1-2 s of CPU in the `agmem` the
    test starts; a copy of one made once per run costs ~50 ms. `cp -a` keeps the data folder's
    owner (the server's own user when tests run as root) and its 0700 mode.
    """
    home = tmp_path / "home"
    subprocess.run(["cp", "-a", str(_embedded_home_template), str(home)], check=True)
    return home


def libpq_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# A table's heap is 0 bytes right after TRUNCATE and grows with the first row written (even one
# rolled back or deleted since), so a non-empty heap means "touched since the last reset". An
# identity sequence can move without a row (an INSERT that fails a check after taking its id).
TOUCHED = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY(%(tables)s)
  AND (pg_relation_size(c.oid) > 0 OR EXISTS (
    SELECT 1 FROM pg_depend d JOIN pg_class s ON s.oid = d.objid
    WHERE d.classid = 'pg_class'::regclass AND d.refobjid = c.oid AND d.deptype IN ('a', 'i')
      AND CASE WHEN s.relkind = 'S' THEN pg_sequence_last_value(s.oid) IS NOT NULL END))
"""


def reset_tables(connection: psycopg.Connection[Any]) -> None:
    """Bring every table back to empty with fresh identities, as one TRUNCATE of all would.

    Only the tables a test touched are truncated (CASCADE adds the ones referencing them): a
    TRUNCATE costs ~10 ms per table with its indexes whether or not it holds a row, and most
    tests write to two or three of the ten.
    """
    names = sorted(Base.metadata.tables)
    touched = [row[0] for row in connection.execute(TOUCHED, {"tables": names})]
    if touched:
        listed = ", ".join(f'"{name}"' for name in touched)
        connection.execute(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")


# Not `agmem…`: `agmem migrate` refuses while connections of that name are open (other agmem
# processes, app/db/migrate.py), and this one stays open for the whole run.
RESET_APPLICATION_NAME = "pytest-table-reset"


class TableReset:
    """`reset_tables` on one connection kept for the run, never handed to a test.

    A new connection's first statements read the catalog cold (suite27 measured ~5.6 ms for a
    first query where a warm connection took 0.3), and the check above and the TRUNCATE read
    more of it than most tests do: paid by every test that uses `db`, 999 of 3,666 a run
    (docs/benchmarks.md, "Test suite"). The test still gets a connection of its own, so nothing
    a test changes on it (row factories, settings, prepared statements, an open transaction)
    reaches another.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._connection: psycopg.Connection[Any] | None = None

    def reset(self) -> None:
        try:
            reset_tables(self._connected())
        except psycopg.OperationalError:
            # Its backend can be gone between tests (a test that terminates the database's
            # backends); a new one does the same work, and a second failure is the test's.
            self.close()
            reset_tables(self._connected())

    def _connected(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            # Nothing kept server-side from one test to the next but the session itself.
            self._connection = psycopg.connect(
                self._url,
                autocommit=True,
                prepare_threshold=None,
                application_name=RESET_APPLICATION_NAME,
            )
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


@pytest.fixture(scope="session")
def table_reset(database_url: str) -> Iterator[TableReset]:
    reset = TableReset(libpq_url(database_url))
    yield reset
    reset.close()


@pytest.fixture
def db(database_url: str, table_reset: TableReset) -> Iterator[psycopg.Connection[Any]]:
    """A clean database for this test (every table emptied), and a connection to inspect it."""
    table_reset.reset()
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        yield connection


TEST_HOSTS = ["testserver", "test", "t", "agmem"]


def make_settings(**overrides: Any) -> Settings:
    """Settings for tests: nothing from the developer's environment or .env leaks in."""
    base: dict[str, Any] = {
        "database_url": None,
        "api_token": None,
        "gemini_api_key": None,
        "gemini_base_url": None,
        "_env_file": None,
        # The names in-process clients send as Host (TestClient's, httpx's base URLs).
        "allowed_hosts": TEST_HOSTS,
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
