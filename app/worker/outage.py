"""The database's loss under the worker: what counts as one, how it is logged, and the bounded
wait for the database to answer again before a write is given up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import structlog
from sqlalchemy import exc as sa_exc

from app.errors import first_line, sqlstate
from app.redaction import RedactionWorkerDied

log = structlog.get_logger(__name__)

T = TypeVar("T")

# The database is down or unreachable: expected while it restarts, logged in one line.
UNREACHABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, psycopg.OperationalError, OSError)

# SQLSTATEs of a server going away or not taking connections yet (admin_shutdown,
# crash_shutdown, cannot_connect_now), beside class 08 (connection exceptions). A client-side
# failure to connect or a connection cut has no SQLSTATE at all.
_SERVER_GOING = frozenset({"57P01", "57P02", "57P03"})

# How long, and how far apart, a write the database's loss cut short (a job's result, a failed
# attempt's record) is tried again before the row is left to its lease. A time, not a count of
# tries: each try can wait out the connect timeout (5 s) on a host that does not answer, and
# 30 of them held the lane for minutes.
WAIT_SECONDS = 30.0
RETRY_INTERVAL_SECONDS = 1.0

# A bare OSError of these kinds is a database connection's failure; any other (a job's own
# PermissionError or TimeoutError, a pipe to a child process) is the job's, and was taken for
# the database's loss: logged without its traceback, its attempt's record retried for 30 s.
_CONNECTION_LOST = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError)


def database_lost(error: Exception) -> bool:
    """Whether `error` says the database went away (not that it refused a statement): no fault
    of the row the job was working on."""
    if isinstance(error, OSError):
        return isinstance(error, _CONNECTION_LOST) or isinstance(error.__cause__, psycopg.Error)
    if not isinstance(error, UNREACHABLE):
        return False
    state = sqlstate(error)
    return not state or state.startswith("08") or state in _SERVER_GOING


def log_failure(event: str, error: Exception, **fields: Any) -> None:
    """An unreachable database is one warning line; anything else keeps its traceback.

    A deadlock or serialization failure (SQLSTATE class 40: the upkeep's give-up losing to a
    capture batch) is psycopg's OperationalError too, but the database is up: it was logged as
    `worker.database_unavailable`, which sent an operator looking for an outage."""
    if sqlstate(error).startswith("40"):
        log.warning("worker.transaction_conflict", during=event, error=first_line(error), **fields)
    elif isinstance(error, UNREACHABLE):
        log.warning("worker.database_unavailable", during=event, error=first_line(error), **fields)
    elif isinstance(error, RedactionWorkerDied):
        # Its detail says it all; the traceback would be asyncio's pipes.
        log.error(event, error=error.detail, **fields)
    else:
        log.exception(event, **fields)


class DatabaseAway(Exception):
    """The database did not answer again within WAIT_SECONDS, or the worker stopped first: the
    write was not made, and the row it was for is left to its lease."""

    def __init__(self, error: Exception) -> None:
        super().__init__(first_line(error))
        self.error = error


async def retry_while_away(
    write: Callable[[], Awaitable[T]], *, stop: asyncio.Event, during: str | None, **fields: Any
) -> T:
    """Run `write`; while it fails on the database's loss, run it again every
    RETRY_INTERVAL_SECONDS for WAIT_SECONDS (plus the try under way), or until `stop` is set,
    then raise DatabaseAway. Any other error is raised as it is. The loss is logged once, as
    `during` (None: the caller has logged it)."""
    clock = asyncio.get_running_loop()
    deadline = clock.time() + WAIT_SECONDS
    logged = False
    while True:
        try:
            return await write()
        except Exception as error:
            if not database_lost(error):
                raise
            if not logged and during is not None:
                log_failure(during, error, **fields)
                logged = True
            left = deadline - clock.time()
            if left <= 0 or stop.is_set():
                raise DatabaseAway(error) from error
        # A stop ends the wait: it slept on through the stop's whole grace period.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=min(RETRY_INTERVAL_SECONDS, left))
