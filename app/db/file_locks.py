"""POSIX record locks on files, counted in this process: the embedded server's lock
(`HomeLock` in app/db/embedded.py) takes two of them."""

from __future__ import annotations

import fcntl
import os
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class FileLock:
    """A POSIX record lock (lockf, as pgserver's fasteners takes its own) on one file, counted in
    this process. Such a lock belongs to the process, not to a descriptor, and closing any
    descriptor of the file drops it: so one descriptor per file (`file_lock`), closed only when
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


_FILE_LOCKS: dict[tuple[Path, bool], FileLock] = {}


def file_lock(path: Path, *, shared: bool) -> FileLock:
    """The one FileLock of `path` in this process."""
    return _FILE_LOCKS.setdefault((path, shared), FileLock(path, shared))
