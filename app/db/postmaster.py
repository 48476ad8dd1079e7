"""The embedded server's processes as the system shows them (/proc on Linux): whether a pid
runs, whether it is the postmaster of a data folder, and the lock files and handle-list entries
that dead ones left behind (app/db/embedded.py reads them at each start and exit, the
supervisor app/db/supervisor.py when the server may have died)."""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

log = logging.getLogger("app.db.embedded")  # the embedded server's lines, as they were named


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
    started = start_time(pid)
    return started is not None and started > when + START_TIME_SLACK_SECONDS


def started_before(pid: int, when: float) -> bool:
    """Whether process `pid` started before `when` (a time.time()); False where /proc cannot
    say."""
    started = start_time(pid)
    return started is not None and started < when - START_TIME_SLACK_SECONDS


def start_time(pid: int) -> float | None:
    """When process `pid` started (a time.time(), to a second), None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        boot = Path("/proc/stat").read_bytes()
        # "pid (name) state ppid ...": the start time (in clock ticks after boot) is field 22.
        ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
        booted = int(boot.split(b"btime ", 1)[1].split(maxsplit=1)[0])
    except (OSError, IndexError, ValueError):
        return None
    return booted + ticks / os.sysconf("SC_CLK_TCK")


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
