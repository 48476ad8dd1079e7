"""`agmem sync --prune-missing`: drop the indexed files of a project whose folder is gone.

A sync of such a project is refused (ProjectFolderMissing), so its file rows stayed for good.
Never automatic: an unmounted drive or a folder moved for a minute must not empty the index.
Only the sync's rows go (files and their chunks); sessions, observations and memories stay.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from app.projects import canonical_project
from app.sync import queries
from app.sync.connections import SyncConnections


class ProjectFolderPresent(Exception):
    """The folder is there (or cannot be told absent): its rows are not the prune's."""


def _require_gone(folder: str) -> None:
    try:
        # Through links, as the sync reads it: a project reached by a link whose folder moved
        # is one the sync calls missing, and `lstat` saw the link and refused to prune it.
        os.stat(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        if error.errno == errno.ELOOP:
            return  # a link that loops leads nowhere: the sync calls it missing too
        # Cannot look (a parent that may not be searched): not known to be gone.
        raise ProjectFolderPresent(
            f"cannot tell whether {folder} is gone ({error.strerror}): nothing dropped"
        ) from None
    raise ProjectFolderPresent(
        f"project folder {folder} exists: --prune-missing drops only a project whose folder "
        "is gone (sync it instead)"
    )


async def prune_missing(url: str, project_path: str, announce: Callable[[int, int], None]) -> int:
    """Delete the indexed files of the project at `project_path` (absolute), whose folder must
    be gone; `announce(files, chunks)` is told what will go before it goes. How many files."""
    _require_gone(project_path)
    project = canonical_project(project_path)
    pool = SyncConnections(url)
    connection = await pool.acquire()
    unlocked = False
    try:
        # Under the sync lock: a sync of the project running now finishes first.
        await queries.lock_project(connection, project)
        try:
            _require_gone(project_path)  # back while the lock was waited for
            files, chunks = await queries.project_files(connection, project)
            announce(files, chunks)
            return await queries.delete_project_files(connection, project) if files else 0
        finally:
            await queries.unlock_project(connection, project)
            unlocked = True
    finally:
        await pool.release(connection, clean=unlocked)
