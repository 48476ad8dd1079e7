"""Prepared statements sent in one libpq pipeline: the capture writer's round trip, without cursors.

psycopg's cursor layer (query conversion, parameter adaptation, result description, row making,
its generators and waits) cost ~0.13 ms of Python per statement in the capture profile, about as
much as everything else the writer does; the same pipeline driven through psycopg's `pq` wrapper
(libpq itself) costs ~0.035 ms. So the hot statements go through `pq` directly: prepared once per
connection, parameters sent as text (the types are inferred by the server at PREPARE), results
loaded by psycopg's C transformer into named tuples.

Statements between two Syncs run as one implicit transaction, committed at the Sync: a batch is
one transaction without BEGIN/COMMIT round trips, and nothing is answered before the Sync's
result, which the server sends only after COMMIT (with `synchronous_commit`, after the flush).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import weakref
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache
from typing import Any, NamedTuple

import psycopg
from psycopg import AsyncConnection, abc, pq
from psycopg.adapt import Transformer

Conn = AsyncConnection[Any]

# `:name` binds, not the `::type` casts around them.
_BIND = re.compile(r"(?<![:\w]):(\w+)")

# Names of the statements prepared on each connection (a connection replaced by the pool starts
# with none).
_PREPARED: weakref.WeakKeyDictionary[Conn, set[bytes]] = weakref.WeakKeyDictionary()
_NAMES = itertools.count(1)

# Connections sent statements since the last Sync whose answer was read. Their pipeline's implicit
# transaction may be open on the server, however libpq reports them: it says IDLE once every
# result asked for has been read, Sync or not (a flush request gets results before the Sync), so
# `hand_back` closes these rather than trust `transaction_status`.
_UNSYNCED: weakref.WeakSet[Conn] = weakref.WeakSet()


@dataclass(frozen=True, slots=True)
class Statement:
    """A `text()` statement as libpq takes it: `$n` placeholders, its bind names in order."""

    name: bytes
    query: bytes
    binds: tuple[str, ...]


@lru_cache(maxsize=64)
def statement(sql: str) -> Statement:
    """The prepared form of a statement with `:name` binds (cached: one name per SQL text)."""
    binds: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${binds.setdefault(match.group(1), len(binds) + 1)}"

    query = _BIND.sub(number, sql)
    return Statement(f"agmem_capture_{next(_NAMES)}".encode(), query.encode(), tuple(binds))


def dump(value: Any) -> bytes | None:
    """A parameter in Postgres text format; the prepared statement gives it its type."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value  # text already in UTF-8 (a payload's JSON), not a bytea
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int | float):
        return str(value).encode()
    if isinstance(value, datetime | date):
        return value.isoformat().encode()
    raise TypeError(f"cannot send a {type(value).__name__} as a capture statement parameter")


def dump_params(stmt: Statement, params: Mapping[str, Any] | None) -> list[bytes | None]:
    values = params or {}
    return [dump(values[name]) for name in stmt.binds]


class StatementFailed(Exception):
    """A statement of a pipeline failed; `error` is what its request should see."""

    def __init__(self, index: int, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


class Sent(NamedTuple):
    """A statement with its parameters in wire format (a tuple: made for every request)."""

    stmt: Statement
    params: list[bytes | None]
    notifies: bool = False  # its batch must wake the worker (see app/capture/db.py)


def prepared_names(connection: Conn) -> set[bytes]:
    """The names of the statements prepared on `connection` (a live set: `prepare` adds to it)."""
    return _PREPARED.setdefault(connection, set())


async def prepare(connection: Conn, stmts: Iterable[Statement]) -> None:
    """Prepare on `connection` those of `stmts` it has not prepared yet (outside a pipeline)."""
    prepared = prepared_names(connection)
    for stmt in {stmt for stmt in stmts if stmt.name not in prepared}:
        await _prepare(connection.pgconn, stmt, prepared)


def begin(connection: Conn) -> None:
    """Enter pipeline mode on an idle connection: statements sent now form one transaction."""
    pgconn = connection.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        raise psycopg.OperationalError("the capture connection is not idle")
    pgconn.enter_pipeline_mode()


def send(connection: Conn, sent: Sent) -> None:
    """Queue a prepared statement in the open pipeline and push what libpq can without waiting,
    so Postgres starts on it while the event loop serves other requests."""
    pgconn = connection.pgconn
    _UNSYNCED.add(connection)
    pgconn.send_query_prepared(sent.stmt.name, sent.params)
    pgconn.flush()


async def finish(connection: Conn, sent: Sequence[Sent]) -> list[list[Any]]:
    """Sync the open pipeline (COMMIT of its implicit transaction) and return the rows of the
    statements `sent` into it. Raises StatementFailed (the transaction rolled back) or, if the
    connection broke, psycopg.OperationalError."""
    pgconn = connection.pgconn
    try:
        pgconn.pipeline_sync()
        await _flush(pgconn)
        results = await _read_until_sync(pgconn)
        _UNSYNCED.discard(connection)  # committed or rolled back: nothing is left open
    finally:
        if pgconn.status == pq.ConnStatus.OK and pgconn.pipeline_status != pq.PipelineStatus.OFF:
            try:
                pgconn.exit_pipeline_mode()
            except psycopg.OperationalError:
                pass  # results still pending (cancelled mid-batch): `hand_back` closes it
    for index, result in enumerate(results):
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise StatementFailed(index, _error(result))
    if len(results) != len(sent):
        raise psycopg.OperationalError(f"{len(sent)} statements sent, {len(results)} answered")
    transformer = Transformer.from_context(connection)
    return [
        _rows(transformer, result, item.stmt) for result, item in zip(results, sent, strict=True)
    ]


async def run(connection: Conn, batch: Sequence[Sent]) -> list[list[Any]]:
    """Run `batch` in one pipeline and one transaction; the rows of each statement."""
    await prepare(connection, (sent.stmt for sent in batch))
    begin(connection)
    for sent in batch:
        send(connection, sent)
    return await finish(connection, batch)


# How long a PREPARE cut by a cancellation is given to answer before its connection is closed.
SETTLE_SECONDS = 1.0


async def _prepare(pgconn: pq.abc.PGconn, stmt: Statement, prepared: set[bytes]) -> None:
    pgconn.send_prepare(stmt.name, stmt.query)
    answers: list[pq.abc.PGresult] = []
    try:
        await _answer(pgconn, answers)
    except asyncio.CancelledError:
        # A writer closed as it set up a connection (the second writer, woken by the statement
        # the first one took, at every shutdown after a capture): the PREPARE's answer is read
        # before the connection goes back to its pool. Left unread, psycopg's rollback failed
        # ("another command is already in progress") and the pool closed the connection, three
        # WARNINGs. A server that does not answer within SETTLE_SECONDS gets it closed
        # (`hand_back`).
        with suppress(TimeoutError, psycopg.Error):
            async with asyncio.timeout(SETTLE_SECONDS):
                await _answer(pgconn, answers)
                if _succeeded(answers):
                    prepared.add(stmt.name)  # on the server now: preparing it again would fail
        raise
    if not _succeeded(answers):
        message = answers[-1].error_message.decode(errors="replace") if answers else "no answer"
        raise psycopg.OperationalError(f"could not prepare a capture statement: {message}")
    prepared.add(stmt.name)


async def _answer(pgconn: pq.abc.PGconn, answers: list[pq.abc.PGresult]) -> None:
    """Read the results of the command sent into `answers`, until the connection is idle."""
    await _flush(pgconn)
    while True:
        await _until_not_busy(pgconn)
        answer = pgconn.get_result()
        if answer is None:
            return
        answers.append(answer)


def _succeeded(answers: list[pq.abc.PGresult]) -> bool:
    return bool(answers) and answers[-1].status == pq.ExecStatus.COMMAND_OK


async def hand_back(connection: Conn) -> None:
    """Ready a writer's connection to go back to its pool, however its writer ended.

    Out of pipeline mode when nothing is in flight (a writer closed while it waited for
    statements): the pool kept it in pipeline mode, for its next user to trip over. Closed when
    something is in flight: statements sent without their Sync must never commit (their
    requests were told the writer stopped), and a batch cut after its Sync leaves answers
    unread that no reset can skip. The pool replaces a closed connection.

    "In flight" is any statement sent since the last Sync's answer (`_UNSYNCED`), not libpq's
    `transaction_status` alone, which reads IDLE for statements whose results were read before
    their Sync: handed back, the next user's Sync would have committed them."""
    pgconn = connection.pgconn
    if pgconn.status != pq.ConnStatus.OK:
        return  # broken: the pool replaces it
    if connection not in _UNSYNCED and pgconn.transaction_status == pq.TransactionStatus.IDLE:
        if pgconn.pipeline_status == pq.PipelineStatus.OFF:
            return
        with suppress(psycopg.OperationalError):  # it still has results to read: closed below
            pgconn.exit_pipeline_mode()
            return
    await connection.close()


async def _read_until_sync(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """One result per statement (its last), up to the pipeline's Sync."""
    results: list[pq.abc.PGresult] = []
    current: pq.abc.PGresult | None = None
    while True:
        await _until_not_busy(pgconn)
        result = pgconn.get_result()
        if result is None:  # the end of one statement's results
            if current is not None:
                results.append(current)
                current = None
            continue
        status = result.status
        if status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        if status == pq.ExecStatus.PIPELINE_ABORTED:
            continue  # skipped after an earlier statement failed; that failure is reported
        current = result


def _rows(transformer: abc.Transformer, result: pq.abc.PGresult, stmt: Statement) -> list[Any]:
    if result.status != pq.ExecStatus.TUPLES_OK or not result.ntuples:
        return []
    transformer.set_pgresult(result)
    make = _ROW_MAKERS.get(stmt.name)
    if make is None:  # a prepared statement's rows always have the same columns
        names = tuple(result.fname(n) or b"" for n in range(result.nfields))
        make = _ROW_MAKERS[stmt.name] = _row_type(names)._make
    return transformer.load_rows(0, result.ntuples, make)


# Each statement's row maker, by statement name.
_ROW_MAKERS: dict[bytes, Any] = {}


@lru_cache(maxsize=64)
def _row_type(names: tuple[bytes, ...]) -> Any:
    return namedtuple("Row", [name.decode() for name in names])


def _error(result: pq.abc.PGresult) -> psycopg.Error:
    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = result.error_message.decode(errors="replace").strip()
    try:
        cls = psycopg.errors.lookup(sqlstate)
    except KeyError:
        cls = psycopg.DatabaseError
    return cls(message)


async def _flush(pgconn: pq.abc.PGconn) -> None:
    """Send everything libpq has buffered, reading answers meanwhile so neither side blocks."""
    while pgconn.flush():
        readable = await _ready(pgconn.socket, write=True)
        if readable:
            pgconn.consume_input()


async def _until_not_busy(pgconn: pq.abc.PGconn) -> None:
    while pgconn.is_busy():
        await _ready(pgconn.socket, write=False)
        pgconn.consume_input()


async def _ready(fd: int, *, write: bool) -> bool:
    """Wait until `fd` is readable (write=False) or either readable or writable; True if
    readable."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()

    def wake(readable: bool) -> None:
        if not future.done():
            future.set_result(readable)

    loop.add_reader(fd, wake, True)
    if write:
        loop.add_writer(fd, wake, False)
    try:
        return await future
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
