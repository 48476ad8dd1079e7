"""A benchmark's temporary folder, removed however the run ends, the servers in it stopped first.

The benchmarks left their folders in /tmp (dozens a session, GBs): the ones that deleted their
folder did so with its embedded server still running, which went on writing into it (a `pg_wal`
left behind) until Postgres's lock-file check ended it up to a minute later, and a folder of
`mkdtemp` (`bench.mcp_stdio`'s homes) was never removed. SIGTERM ended a run without any cleanup.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from app.db.embedded import stop_embedded_postgres
from app.db.postmaster import alive, postmaster_of, postmaster_pid

# How long a server killed with SIGQUIT gets to be gone (it exits in milliseconds).
QUIT_WAIT_SECONDS = 10.0


def stop_servers_in(folder: Path) -> None:
    """Stop every embedded server whose data folder is in `folder`: this process's by leaving
    its handle list (`stop_embedded_postgres`), one a child process left (killed, or still
    running) by Postgres's immediate shutdown: the data is thrown away next."""
    try:  # listed first: a server started with cleanup_mode "delete" deletes its folder
        folders = [pid_file.parent for pid_file in folder.rglob("postmaster.pid")]
    except OSError:
        folders = []
    for pgdata in folders:
        with contextlib.suppress(Exception):  # a server half started; the kill below remains
            stop_embedded_postgres(pgdata)
        pid = postmaster_pid(pgdata)
        if pid is None or not alive(pid) or not postmaster_of(pid, pgdata):
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGQUIT)
        give_up = time.monotonic() + QUIT_WAIT_SECONDS
        while alive(pid) and time.monotonic() < give_up:
            time.sleep(0.02)


def remove(folder: Path) -> None:
    """Stop the servers in `folder`, then delete it; say so when something was left."""
    try:
        stop_servers_in(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        sys.stderr.write(f"bench: could not remove {folder} entirely\n")


def _terminated(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signal.SIGTERM)


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new folder in the temp folder, removed (`remove`) when the block ends: normally, by an
    error, by Ctrl-C, or by SIGTERM, which is made to unwind as an exit (while its handler is
    the default one, in the main thread). Ctrl-C and SIGTERM wait during the removal: a second
    Ctrl-C there left the folder half deleted."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    # Also at exit, should the block's end not run before it (a generator that holds this one,
    # left unfinished until the interpreter's teardown): registered before the servers in the
    # folder start, it runs after their own exit handlers, which stop them.
    at_exit = functools.partial(remove, folder)
    atexit.register(at_exit)
    main = threading.current_thread() is threading.main_thread()
    catch = main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if catch:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        yield folder
    finally:
        ending = {signal.SIGINT, signal.SIGTERM}
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ending)
        try:
            remove(folder)
            atexit.unregister(at_exit)
        finally:
            # Unblocked first, while the handler is still ours: a SIGTERM that came during the
            # removal unwinds as an exit (outer blocks and exit handlers run), not a kill.
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            finally:
                if catch:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
