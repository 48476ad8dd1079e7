"""The capture hot path's database access: raw psycopg, group commit, no reset on return.

`observe` and `observe/result` each write with one self-contained statement (a CTE that checks
the session, touches it and inserts or updates), atomic by itself. `GroupWriter` runs the
statements of concurrent requests in one pipelined transaction per batch; an answer is still
sent only after the statement's transaction has committed.

The pool is psycopg's own rather than a SQLAlchemy engine: for these two statements SQLAlchemy
adds its connection checkout, statement compilation and result wrapping, which in the profile
cost more CPU per request than psycopg's whole round trip. The statements stay the `text()`
objects of `queries` (shared with the ORM-session callers, e.g. the Gemini proxy): the writer
prepares them with `$n` parameters and sends them through libpq (`app/capture/pipeline.py`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import structlog
from fastapi import FastAPI, Request
from psycopg import pq
from psycopg_pool import PoolClosed
from sqlalchemy import TextClause

from app.capture import pipeline, queries
from app.db.alive import usable
from app.db.raw_pool import Conn, RawPool, make_raw_pool
from app.state import AppState

log = structlog.get_logger(__name__)


class RawResult:
    """The part of SQLAlchemy's `Result` the capture services use: `first()` and `one()`."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Any]) -> None:
        self.rows = rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]


# A queued statement with its parameters in wire format, and the future its request awaits.
_Pending = tuple[pipeline.Sent, "asyncio.Future[RawResult]"]

# The worker's wake-up. The observations trigger (migration 0001) sends it for every row that
# becomes `captured`, through a PL/pgSQL call per row: 3-4% of Postgres's CPU per capture request.
# The writer's connections turn that trigger off (NOTIFY_BY_BATCH) and send it themselves, once
# per batch that holds a statement able to capture an observation. Postgres delivers it at the
# batch's commit, as it delivered the trigger's.
NOTIFY_BY_BATCH = "-c agmem.notify_by_batch=on"
_NOTIFY = pipeline.statement("SELECT pg_notify('agmem_work', 'observation')")  # as the trigger
_NOTIFY_SENT = pipeline.Sent(_NOTIFY, [])
_CAPTURING = frozenset(
    query.text
    for statement in (
        queries.MATCH_BY_ID,
        queries.MATCH_BY_ID_MERGED,
        queries.MATCH_BY_ID_WITHOUT_RESULT,
        queries.MATCH_NEWEST_PENDING,
        queries.INSERT_CAPTURED,
    )
    for query in (statement.plain, statement.touching)
)


class _Lane:
    """A writer's connection while its pipeline is open: statements sent to it go to Postgres at
    once and commit together at the next Sync."""

    __slots__ = ("broken", "connection", "notify", "prepared", "sent")

    def __init__(self, connection: Conn) -> None:
        self.connection = connection
        self.prepared = pipeline.prepared_names(connection)
        self.sent: list[_Pending] = []
        self.notify = False  # a statement sent may capture an observation: wake the worker
        # Its backend was found gone before the batch's Sync: what was sent went back to the
        # queue (GroupWriter._send_again).
        self.broken = False


class GroupWriter:
    """Runs the hot statements of concurrent requests in shared transactions: group commit.

    Each writer task holds one connection with an open pipeline (`app/capture/pipeline.py`). A
    request's statement is sent into it at once, from the request itself, so Postgres executes it
    while the event loop goes on parsing the next requests; the writer, woken by the first
    statement, gets its turn once the requests that were ready to run have run, then sends the
    Sync (the COMMIT of the pipeline's implicit transaction) and resolves each request's future
    only after the Sync's answer, so an answer still means its write is durable. Statements that
    arrive while no pipeline is open wait in a queue for the next one. Without the eager send, a
    burst of N requests was parsed first and written after (the writer only ran once every
    ready request had), so the server and Postgres took turns instead of working together.

    With two writers (the default) one lane commits while the other collects: a lane holds its
    Sync while another lane's commit is unanswered (unless it is full), and syncs as soon as that
    answer comes. So the next batch's statements run while the previous batch waits for its WAL
    flush, yet commits still go one at a time, each carrying everything that arrived during the
    previous one. With one writer, statements arriving during a commit waited for it and only
    then ran; with writers that each synced at once, batches got smaller and Postgres did more
    commits (its CPU per request rose ~25%; docs/benchmarks.md, capture8).

    One transaction per batch is one WAL flush and one `agmem_work` NOTIFY (Postgres folds a
    transaction's equal notifications) instead of one per request: every committing transaction
    that notifies takes Postgres's global notify lock until its commit record is flushed, which
    serialised per-request commits and collapsed throughput at 64 connections.

    Each statement stays self-contained and sees the batch's earlier statements, so the result is
    that of running them one after another (the requests of a batch were all in flight at once,
    so any order among them is one they could have had). A statement that fails rolls its batch
    back; the batch is then run again one statement per transaction, so only the failing request
    sees its error.

    A lane keeps its connection from batch to batch, so its backend can die between two (it is
    terminated, Postgres restarts its backends after one crashed, the server restarts). Before
    the first statement of a batch goes down it, the lane reads what arrived while it was idle
    (`usable`, no round trip): a backend that is gone has closed the socket by then, and the
    writer takes a fresh connection for the queued statements instead of failing them. A backend
    that goes after that check but before the batch's Sync (a send fails, or the same check just
    before the Sync says so) has committed nothing: Postgres commits a pipeline's implicit
    transaction at its Sync only, and rolls it back when the backend ends without one. Those
    statements go back to the head of the queue, for a fresh connection. Once the Sync is
    handed to libpq the batch is never sent again: its transaction may have committed even when
    no answer came back (a backend killed with SIGKILL loses the answers it had not flushed), so
    a batch whose connection breaks then fails, and its requests get the 503.
    """

    def __init__(self, pool: RawPool, *, writers: int, max_batch: int) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self._pending: deque[_Pending] = deque()
        # The requests whose statement went back to the queue once (`_send_again`).
        self._sent_again: weakref.WeakSet[asyncio.Future[RawResult]] = weakref.WeakSet()
        self._lanes: list[_Lane] = []
        self._committing = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._tasks = [
            asyncio.create_task(self._run(), name=f"agmem-capture-writer-{n}")
            for n in range(writers)
        ]

    async def execute(
        self, query: TextClause, params: Mapping[str, Any] | None = None
    ) -> RawResult:
        """Run one statement in the next batch; returns after the batch has committed."""
        stmt = pipeline.statement(query.text)
        sent = pipeline.Sent(stmt, pipeline.dump_params(stmt, params), query.text in _CAPTURING)
        future: asyncio.Future[RawResult] = asyncio.get_running_loop().create_future()
        self._pending.append((sent, future))
        for lane in self._lanes:
            self._fill(lane)
            if not self._pending:
                break
        self._wake.set()
        return await future

    def replace_pool(self, pool: RawPool) -> RawPool:
        """Take connections from `pool` from now on; returns the previous pool, to be closed.

        For a restarted server, whose pool may be waiting out its reconnect back-off. A lane still
        holding a connection to the old server finds it gone before it sends its next batch, and
        takes one from `pool`."""
        stale, self.pool = self.pool, pool
        return stale

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        queued = list(self._pending)
        self._pending.clear()
        _fail(queued, psycopg.OperationalError("the capture writer stopped"))

    def _fill(self, lane: _Lane) -> None:
        """Send queued statements into an open pipeline, up to the batch cap."""
        if lane.broken:
            return
        if not lane.sent and self._pending and not usable(lane.connection):
            lane.broken = True  # the writer takes a fresh connection; the queue waits for it
            self._wake.set()
            return
        while self._pending and len(lane.sent) < self.max_batch:
            item = self._pending[0]
            if item[0].stmt.name not in lane.prepared:
                return  # the writer prepares it before its next pipeline
            try:
                pipeline.send(lane.connection, item[0])
            except psycopg.Error:
                # Its backend went since `usable` said yes: before the Sync, so what went down
                # it cannot commit, and goes down a fresh connection (`_collect`).
                lane.broken = lane.connection.pgconn.status != pq.ConnStatus.OK
                self._wake.set()
                return
            lane.sent.append(self._pending.popleft())
            lane.notify = lane.notify or item[0].notifies

    async def _work(self) -> None:
        while not self._pending:
            await self._sleep()

    def _end_if_closing(self) -> None:
        """Called before each of the writer's waits (a wake-up, a PREPARE, a Sync): a writer
        being closed ends there instead.

        `close` cancels the writer tasks, but Python 3.11's `asyncio.wait_for` (psycopg_pool's
        wait for a connection) returns its result instead of raising when the cancellation
        comes as the connection arrives: the task then runs on as if never cancelled. It waited
        for a wake-up for ever, or for a Postgres that did not answer (rev-cancel25: a PREPARE
        behind a table lock), and `close` (the app's shutdown) with it."""
        if self._closing:
            raise asyncio.CancelledError

    async def _sleep(self) -> None:
        """Wait for the next wake-up."""
        self._end_if_closing()
        self._wake.clear()
        await self._wake.wait()

    async def _run(self) -> None:
        while True:
            await self._work()
            batch: list[_Pending] = []
            pool = self.pool
            try:
                async with pool.connection() as connection:
                    try:
                        while True:
                            lane = _Lane(connection)
                            batch = lane.sent
                            if not await self._collect(lane):
                                break  # its backend went before any Sync: a fresh connection
                            self._committing += 1
                            try:
                                await self._write(lane)
                            finally:
                                self._committing -= 1
                                self._wake.set()
                    finally:
                        await pipeline.hand_back(connection)
            except Exception as error:  # no connection, or it broke: every request sees it
                if isinstance(error, PoolClosed) and pool is not self.pool:
                    continue  # it waited on the pool replace_pool retired: nothing was sent
                _fail(batch, error)
                if not isinstance(error, psycopg.OperationalError) or not batch:
                    # Nothing could be sent: fail what waits too, rather than retry forever.
                    queued = list(self._pending)
                    self._pending.clear()
                    _fail(queued, error)
            finally:  # cancelled at shutdown: no request may wait for an answer forever
                _fail(batch, psycopg.OperationalError("the capture writer stopped"))

    async def _collect(self, lane: _Lane) -> bool:
        """Open a pipeline, send what is queued, and wait until it holds at least one statement
        (or a queued statement needs preparing first). False when the connection was found
        broken before the batch's Sync: what it was sent is queued again and it is given up."""
        self._end_if_closing()
        try:
            await pipeline.prepare(
                lane.connection, [_NOTIFY, *(sent.stmt for sent, _future in self._pending)]
            )
        except psycopg.OperationalError:
            if not lane.connection.broken:
                raise
            return False  # a PREPARE changes nothing a fresh connection would miss
        pipeline.begin(lane.connection)
        self._lanes.append(lane)
        try:
            self._fill(lane)
            while not self._ready(lane):
                await self._sleep()
                self._fill(lane)
            # The lane may have waited for the other's commit since its first statement went:
            # a backend gone meanwhile is seen now, before the Sync, not after it (a 503).
            if lane.sent and not lane.broken and not usable(lane.connection):
                lane.broken = True
        finally:
            self._lanes.remove(lane)
        if lane.broken and lane.sent:
            self._send_again(lane.sent)
            lane.sent.clear()
        return not lane.broken

    def _send_again(self, batch: list[_Pending]) -> None:
        """Put the statements of a batch whose backend went before its Sync back at the head of
        the queue, in order: Postgres commits a pipeline's implicit transaction only at its Sync
        and rolls it back when the backend ends without one, so none of them committed.

        Once per statement: a statement whose second connection breaks too fails with the
        error, so one that makes its backend die (a server crash, the OOM killer) is not sent
        down connection after connection, taking the server down each time."""
        again = [item for item in batch if item[1] not in self._sent_again]
        _fail(
            [item for item in batch if item[1] in self._sent_again],
            psycopg.OperationalError("the connection broke twice before this statement's commit"),
        )
        self._sent_again.update(future for _sent, future in again)
        self._pending.extendleft(reversed(again))

    def _ready(self, lane: _Lane) -> bool:
        """Whether the lane should be synced now: it holds statements and no other lane is
        committing (or it is full); or something queued needs preparing first; or it broke."""
        if lane.broken:
            return True
        if not lane.sent:
            return bool(self._pending)
        return not self._committing or len(lane.sent) >= self.max_batch

    async def _write(self, lane: _Lane) -> None:
        # Unsynced, the batch commits nothing: the connection is closed (`pipeline.hand_back`)
        # and its requests fail with the writer's stop.
        self._end_if_closing()
        connection, batch = lane.connection, lane.sent
        sent = [item for item, _future in batch]
        if lane.notify:
            sent.append(_NOTIFY_SENT)
            pipeline.send(connection, _NOTIFY_SENT)
        try:
            results = await pipeline.finish(connection, sent)
        except pipeline.StatementFailed as failed:
            if len(batch) == 1:
                _fail(batch, failed.error)
                return
            log.info("capture.batch_retried_alone", statements=len(batch))
            for item, future in batch:
                statements = [item, _NOTIFY_SENT] if item.notifies else [item]
                try:
                    rows, *_notified = await pipeline.run(connection, statements)
                except pipeline.StatementFailed as alone:
                    if not future.done():
                        future.set_exception(alone.error)
                else:
                    if not future.done():
                        future.set_result(RawResult(rows))
        else:
            for (_sent, future), rows in zip(batch, results[: len(batch)], strict=True):
                if not future.done():
                    future.set_result(RawResult(rows))


def _fail(batch: list[_Pending], error: Exception) -> None:
    """Fail the requests of `batch` that have no answer yet."""
    for _sent, future in batch:
        if not future.done():
            future.set_exception(error)


CONNECT_WAIT_SECONDS = 3.0


# AGMEM_CAPTURE_SYNCHRONOUS_COMMIT=false: a batch is answered once Postgres has committed it,
# without waiting for its WAL flush. The flush was the paced latency tail on a quiet machine
# (occasional slow fsyncs of the virtual disk: p99 8-72 ms at 250-500 req/s, 5-7 ms without the
# wait; docs/benchmarks.md). An agmem crash or SIGKILL still loses nothing acknowledged; a
# Postgres or OS crash can lose the last ~0.6 s (three wal_writer_delay rounds).
NO_FLUSH_WAIT = "-c synchronous_commit=off"


def make_capture_pool(url: str, *, pool_size: int, synchronous_commit: bool = True) -> RawPool:
    # A fixed size (one connection per writer task): never a new Postgres backend (fork, auth,
    # connect) in the middle of a burst.
    options = NOTIFY_BY_BATCH if synchronous_commit else f"{NOTIFY_BY_BATCH} {NO_FLUSH_WAIT}"
    return make_raw_pool(
        url,
        application_name="agmem-capture",
        min_size=pool_size,
        max_size=pool_size,
        options=options,
        # With the database down a request waits this long for the writer's connection before
        # its 503 (psycopg_pool's default, 30 s, held an interceptor's tool call that long).
        timeout=CONNECT_WAIT_SECONDS,
    )


@asynccontextmanager
async def capture_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan (the router's lifespan nests in it)."""
    state: AppState = app.state.agmem
    settings = state.settings
    pool = make_capture_pool(
        state.database_url,
        pool_size=settings.capture_writers,
        synchronous_commit=settings.capture_synchronous_commit,
    )
    # Not waiting for the connections: the app must start (and answer 503) with the database down.
    await pool.open(wait=False)
    writer = GroupWriter(
        pool, writers=settings.capture_writers, max_batch=settings.capture_batch_max
    )
    app.state.capture_writer = writer

    async def replace_pool() -> None:
        fresh = make_capture_pool(
            state.database_url,
            pool_size=settings.capture_writers,
            synchronous_commit=settings.capture_synchronous_commit,
        )
        await fresh.open(wait=False)
        await writer.replace_pool(fresh).close()

    state.after_restart.append(replace_pool)
    try:
        yield
    finally:
        state.after_restart.remove(replace_pool)
        await writer.close()
        await writer.pool.close()


def capture_writer(request: Request) -> GroupWriter:
    """The running app's group-commit writer (set up by `capture_lifespan`)."""
    writer: GroupWriter = request.app.state.capture_writer
    return writer
