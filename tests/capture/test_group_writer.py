"""Group commit: concurrent hot-path statements share transactions, each answered after COMMIT."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import pq
from sqlalchemy import text

from app.capture import db as capture_db
from app.capture import pipeline
from app.capture.db import GroupWriter, RawResult, make_capture_pool
from app.db.raw_pool import RawPool, libpq_url
from app.main import create_app
from tests.capture.builders import count, make_session, observe, send_result
from tests.conftest import make_settings
from tests.pools import replaced_while_waiting, terminate_backends, unreachable_pool

INSERT = text(
    "INSERT INTO sessions (id, project_path) VALUES (:id, '/p') "
    "ON CONFLICT (id) DO NOTHING RETURNING id, pg_current_xact_id()::text AS xact"
)
FAILING = text("SELECT 1 / CAST(:zero AS int) AS x")


async def _burst(database_url: str, statements: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
    pool = make_capture_pool(database_url, pool_size=1)
    await pool.open(wait=True)
    async with _writer(pool, writers=1, max_batch=64) as writer:
        return await _all(writer, statements)


@asynccontextmanager
async def _writer(pool: RawPool, *, writers: int, max_batch: int) -> AsyncIterator[GroupWriter]:
    """A writer on `pool`; both closed after."""
    writer = GroupWriter(pool, writers=writers, max_batch=max_batch)
    try:
        yield writer
    finally:
        await writer.close()
        await pool.close()


async def _all(writer: GroupWriter, statements: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
    """Every statement sent at once; each one's result or error."""
    return await asyncio.gather(
        *(writer.execute(query, params) for query, params in statements),
        return_exceptions=True,
    )


def test_concurrent_statements_all_commit_in_fewer_transactions(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    results = asyncio.run(_burst(database_url, [(INSERT, {"id": f"s{n}"}) for n in range(40)]))
    assert [result.one().id for result in results] == [f"s{n}" for n in range(40)]
    assert count(db, "sessions") == 40
    # One transaction id per batch: 40 statements queued at once share a few transactions.
    assert len({result.one().xact for result in results}) <= 3


def test_a_failing_statement_fails_alone(database_url: str, db: psycopg.Connection[Any]) -> None:
    statements: list[tuple[Any, dict[str, Any]]] = [(INSERT, {"id": f"s{n}"}) for n in range(10)]
    statements.insert(5, (FAILING, {"zero": 0}))
    results = asyncio.run(_burst(database_url, statements))
    assert isinstance(results[5], psycopg.errors.DivisionByZero)
    good = [result for index, result in enumerate(results) if index != 5]
    assert all(isinstance(result, RawResult) for result in good)
    assert count(db, "sessions") == 10


def test_repeated_ids_in_one_batch_insert_once(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    results = asyncio.run(_burst(database_url, [(INSERT, {"id": "same"}) for _ in range(16)]))
    inserted = [result for result in results if result.first() is not None]
    assert len(inserted) == 1
    assert count(db, "sessions") == 1


def test_an_unreachable_database_fails_every_waiting_statement(tmp_path: Any) -> None:
    async def run() -> Any:
        pool = make_capture_pool("postgresql://nobody@127.0.0.1:1/none", pool_size=1)
        pool.timeout = 1.0
        await pool.open(wait=False)
        async with _writer(pool, writers=1, max_batch=8) as writer:
            return await _all(writer, [(INSERT, {"id": str(n)}) for n in range(3)])

    results = asyncio.run(run())
    assert all(isinstance(result, psycopg.OperationalError) for result in results)


def test_observe_answers_503_promptly_when_the_database_is_down(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # API.md: 503 with Retry-After when the database is unreachable; the writer's pool used to
    # hold the request for its 30 s default wait first. The pool's wait is shortened here (the
    # test waited its 3 s out); its bound, not its length, is the point.
    assert capture_db.CONNECT_WAIT_SECONDS <= 5
    monkeypatch.setattr(capture_db, "CONNECT_WAIT_SECONDS", 0.3)
    settings = make_settings(home=tmp_path / "home")
    app = create_app(settings, database_url="postgresql://nobody@127.0.0.1:1/none")
    with TestClient(app, raise_server_exceptions=False) as client:
        started = time.monotonic()
        answer = client.post(
            "/api/observe", json={"sessionId": "s", "functionName": "read_file", "functionArgs": {}}
        )
        waited = time.monotonic() - started
    assert answer.status_code == 503
    assert answer.json()["error"] == "DatabaseUnavailable"
    assert answer.headers["retry-after"]
    assert waited < 10


@pytest.mark.parametrize("writers", [1, 3])
def test_observe_burst_through_the_api_stores_every_row(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any, writers: int
) -> None:
    async def run() -> list[int]:
        settings = make_settings(home=tmp_path, capture_writers=writers)
        app = create_app(settings, database_url=database_url)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                await client.post("/api/session/start", json={"projectPath": "/p", "id": "s"})
                calls = [
                    client.post(
                        "/api/observe",
                        json={
                            "sessionId": "s",
                            "functionName": "bash",
                            "functionArgs": {},
                            "id": f"o{n}",
                        },
                    )
                    for n in range(48)
                ]
                results = [
                    client.post(
                        "/api/observe/result",
                        json={
                            "sessionId": "s",
                            "functionName": "bash",
                            "observationId": f"o{n}",
                            "result": f"out {n}",
                        },
                    )
                    for n in range(48)
                ]
                observed = await asyncio.gather(*calls)
                answered = await asyncio.gather(*results)
                return [r.status_code for r in observed + answered]

    statuses = asyncio.run(run())
    assert statuses == [201] * 48 + [200] * 48
    assert count(db, "observations") == 48
    captured = db.execute("SELECT count(*) FROM observations WHERE status = 'captured'").fetchone()
    assert captured is not None
    assert captured[0] == 48


@pytest.mark.parametrize("wait_for_flush", [True, False])
def test_capture_connections_follow_the_synchronous_commit_setting(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any, wait_for_flush: bool
) -> None:
    # Where the connection's value comes from tells the two apart even on a server whose own
    # default is already off (the suite's throwaway server runs without fsync).
    setting = text("SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'")

    async def run() -> tuple[str, str]:
        settings = make_settings(home=tmp_path, capture_synchronous_commit=wait_for_flush)
        app = create_app(settings, database_url=database_url)
        async with app.router.lifespan_context(app):
            writer: GroupWriter = app.state.capture_writer
            row = (await writer.execute(setting, {})).one()
            return row.setting, row.source

    server_default = db.execute("SHOW synchronous_commit").fetchone()
    assert server_default is not None
    value, source = asyncio.run(run())
    if wait_for_flush:
        assert (value, source != "client") == (server_default[0], True)
    else:
        assert (value, source) == ("off", "client")


# The advisory lock a statement takes (until its batch's transaction ends): the proof, seen from
# another connection, that Postgres has executed it.
LOCKING = text("SELECT pg_advisory_xact_lock(CAST(:key AS bigint)) AS locked")
LOCK_GRANTED = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = %s "
    "AND objsubid = 1 AND granted"
)
LOCK_WAITED = LOCK_GRANTED.replace("AND granted", "AND NOT granted")


def test_a_statement_reaches_postgres_before_the_writer_runs(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Eager send: the request puts its statement into the open pipeline itself, so Postgres
    executes it while the event loop is still busy with other requests."""

    async def run() -> bool:
        pool = make_capture_pool(database_url, pool_size=1)
        await pool.open(wait=True)
        writer = GroupWriter(pool, writers=1, max_batch=64)
        try:
            await writer.execute(LOCKING, {"key": 0})  # prepares it on the writer's connection
            await asyncio.sleep(0.1)  # the writer is back with an open pipeline
            task = asyncio.create_task(writer.execute(LOCKING, {"key": 1}))
            await asyncio.sleep(0)  # the request runs up to its wait: its statement is sent
            # The loop is held (the writer cannot run) until Postgres is seen executing it: a
            # wait on the event, not a sleep whose margin a loaded machine could eat (0.5 s,
            # within which the server had to take it 0.3 s before the end). Unfixed, the
            # statement waits for the writer, and this gives up.
            deadline = time.monotonic() + 30
            while not (executed := db.execute(LOCK_GRANTED, [1]).fetchone() is not None):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            await task
            return executed
        finally:
            await writer.close()
            await pool.close()

    assert asyncio.run(run()), "the statement waited for the writer to run"


def test_a_second_lane_collects_while_the_first_commits_and_syncs_after_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Statements arriving while a batch commits go to the second writer's open pipeline and run
    at once, but that lane syncs only once the first batch's commit is answered: one more
    transaction for all of them, not one per statement."""
    # The first batch's statement waits on a lock the test holds: its commit is answered only
    # once every statement after it has been seen executing (by the shared lock each takes), so
    # no sleep decides which batch a statement lands in.
    slow = LOCKING
    stamp = text(
        "INSERT INTO sessions (id, project_path) VALUES (:id, '/p')"
        " RETURNING pg_current_xact_id()::text AS xact, clock_timestamp() AS at,"
        " pg_advisory_xact_lock_shared(CAST(:key AS bigint)) AS marked"
    )

    async def until(query: str, params: list[Any], what: str) -> None:
        deadline = time.monotonic() + 30  # a hang guard: each comes within milliseconds
        while db.execute(query, params).fetchone() is None:
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.01)

    async def run() -> tuple[list[Any], datetime]:
        pool = make_capture_pool(database_url, pool_size=2)
        await pool.open(wait=True)
        async with pool.connection() as first, pool.connection() as second:
            for connection in (first, second):  # either writer may take either statement
                await pipeline.prepare(
                    connection, [pipeline.statement(q.text) for q in (slow, stamp)]
                )
        writer = GroupWriter(pool, writers=2, max_batch=64)
        db.execute("SELECT pg_advisory_lock(7)")
        try:
            committing = asyncio.create_task(writer.execute(slow, {"key": 7}))
            await until(LOCK_WAITED, [7], "the first batch never waited on the lock")
            stamps = []
            for n in range(5):  # one by one, as requests arrive
                params = {"id": f"s{n}", "key": 100 + n}
                stamps.append(asyncio.create_task(writer.execute(stamp, params)))
                await asyncio.sleep(0.02)
            for n in range(5):
                # Not seen: it waited for the first commit, or was committed alone at once.
                await until(LOCK_GRANTED, [100 + n], f"s{n} not seen running in an open batch")
            db.execute("SELECT pg_advisory_unlock(7)")
            await committing
            answered_at = datetime.now(UTC)
            return [(await task).one() for task in stamps], answered_at
        finally:
            db.execute("SELECT pg_advisory_unlock_all()")
            await writer.close()
            await pool.close()

    rows, first_answered = asyncio.run(run())
    assert len({row.xact for row in rows}) == 1
    assert all(row.at < first_answered for row in rows)  # executed before, committed after
    assert count(db, "sessions") == 5


def test_a_captured_result_wakes_the_worker_once_its_batch_commits(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The writer's connections turn the per-row trigger off and send the worker's NOTIFY once
    # per batch that can capture an observation; a pending call alone wakes nobody.
    db.execute("LISTEN agmem_work")
    session_id = make_session(client)
    observe(client, session_id, id="a")
    assert [n.payload for n in db.notifies(timeout=0.3)] == []
    assert send_result(client, session_id, "a", "x").status_code == 200
    assert [n.payload for n in db.notifies(timeout=30.0, stop_after=1)] == ["observation"]
    # Other connections keep the trigger: a row captured there notifies by itself.
    db.execute("UPDATE observations SET status = 'pending' WHERE id = 'a'")
    db.execute("UPDATE observations SET status = 'captured' WHERE id = 'a'")
    assert [n.payload for n in db.notifies(timeout=30.0, stop_after=1)] == ["observation"]


def test_after_replace_pool_the_next_statement_does_not_use_a_dead_connection(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # A restarted server: the lane's connection died with the old one while it waited for work.
    async def run() -> tuple[Any, Any]:
        old = make_capture_pool(database_url, pool_size=1)
        await old.open(wait=True)
        writer = GroupWriter(old, writers=1, max_batch=8)
        fresh = make_capture_pool(database_url, pool_size=1)
        try:
            first = await writer.execute(INSERT, {"id": "before"})
            terminate_backends(db, "agmem-capture")
            await fresh.open(wait=True)
            await writer.replace_pool(fresh).close()
            return first, await writer.execute(INSERT, {"id": "after"})
        finally:
            await writer.close()
            await writer.pool.close()

    first, after = asyncio.run(run())
    assert (first.one().id, after.one().id) == ("before", "after")
    assert count(db, "sessions") == 2


def test_a_statement_waiting_on_a_replaced_pool_runs_on_the_new_one(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    async def run() -> Any:
        down = await unreachable_pool(lambda url: make_capture_pool(url, pool_size=1))
        writer = GroupWriter(down, writers=1, max_batch=8)
        fresh = make_capture_pool(database_url, pool_size=1)
        try:
            statement = writer.execute(INSERT, {"id": "queued"})
            return await replaced_while_waiting(statement, down, writer.replace_pool, fresh)
        finally:
            await writer.close()
            await writer.pool.close()

    assert asyncio.run(run()).one().id == "queued"
    assert count(db, "sessions") == 1


@pytest.mark.parametrize("writers", [1, 2])
def test_statements_after_the_writers_backends_were_terminated_all_commit(
    database_url: str, db: psycopg.Connection[Any], writers: int
) -> None:
    # A backend gone while its lane waited for work (pg_terminate_backend; the OOM killer taking
    # a backend makes Postgres restart them all): nothing had been sent down it, so the queued
    # statements go down a fresh connection instead of failing, with no restart supervisor.
    async def run() -> list[Any]:
        pool = make_capture_pool(database_url, pool_size=writers)
        await pool.open(wait=True)
        async with _writer(pool, writers=writers, max_batch=8) as writer:
            await _all(writer, [(INSERT, {"id": f"b{n}"}) for n in range(4)])
            assert terminate_backends(db, "agmem-capture") == writers
            return await _all(writer, [(INSERT, {"id": f"a{n}"}) for n in range(20)])

    results = asyncio.run(run())
    assert [result.one().id for result in results] == [f"a{n}" for n in range(20)]
    assert count(db, "sessions") == 24


@pytest.mark.parametrize(
    ("when", "statements"),
    [
        ("before its first statement", 20),  # the send fails
        ("after its first statement", 20),  # a later send fails
        ("after its first statement", 1),  # the check before the Sync sees it
    ],
)
def test_a_backend_gone_before_the_batchs_sync_costs_no_statement(
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    when: str,
    statements: int,
) -> None:
    # The lane checked its connection (`usable`), then the backend went before the Sync: the
    # batch failed with 503s although Postgres commits a pipeline only at its Sync. Its
    # statements now go down a fresh connection, and each runs once: a second run after a
    # commit would return no row (ON CONFLICT DO NOTHING), and `.one()` would fail.
    real_send = pipeline.send
    terminated: list[int] = []

    def send(connection: Any, sent: pipeline.Sent) -> None:
        first = not terminated
        if first and when == "after its first statement":
            real_send(connection, sent)
        if first:
            terminated.append(connection.info.backend_pid)
            db.execute("SELECT pg_terminate_backend(%s, 5000)", [terminated[0]])
        if not first or when == "before its first statement":
            real_send(connection, sent)

    monkeypatch.setattr(pipeline, "send", send)
    ids = [f"s{n}" for n in range(statements)]
    results = asyncio.run(_burst(database_url, [(INSERT, {"id": id_}) for id_ in ids]))

    assert terminated
    assert [result.one().id for result in results] == ids
    assert count(db, "sessions") == statements


def test_a_statement_whose_connection_breaks_twice_before_its_sync_fails(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sent again once only: a statement that makes its backend die (a server crash, the OOM
    # killer) would otherwise go down connection after connection, each time taking it down.
    real_send = pipeline.send
    terminated: list[int] = []

    def send(connection: Any, sent: pipeline.Sent) -> None:
        real_send(connection, sent)
        terminated.append(connection.info.backend_pid)
        db.execute("SELECT pg_terminate_backend(%s, 5000)", [terminated[-1]])

    monkeypatch.setattr(pipeline, "send", send)
    burst = _burst(database_url, [(INSERT, {"id": "s"})])
    [result] = asyncio.run(asyncio.wait_for(burst, timeout=60))

    assert isinstance(result, psycopg.OperationalError), result
    assert "broke twice" in str(result)
    assert len(terminated) == 2
    assert count(db, "sessions") == 0


async def _closed_in_the_swallowed_race(
    database_url: str,
    statement: tuple[Any, dict[str, Any]],
    turns: int,
    release: Callable[[], None] = lambda: None,
) -> bool:
    """Whether `close` ends within 5 s a one-writer GroupWriter whose writer waits on the pool
    for a connection, handed over `turns` scheduler turns before the close (the window of
    Python 3.11's swallowed cancellation). `release` runs after, whatever the outcome, before
    the pool closes (it lets go of what Postgres was made to wait on)."""
    pool = make_capture_pool(database_url, pool_size=1)
    await pool.open(wait=True)
    held = await pool.getconn()
    writer = GroupWriter(pool, writers=1, max_batch=8)
    waiting = asyncio.ensure_future(writer.execute(*statement))
    while pool.get_stats().get("requests_waiting", 0) < 1:
        await asyncio.sleep(0)
    await pool.putconn(held)
    for _ in range(turns):
        await asyncio.sleep(0)
    try:
        await asyncio.wait_for(writer.close(), 5)
    except TimeoutError:
        return False
    finally:
        release()
        waiting.cancel()  # a close cut short by the timeout failed no queued statement
        await asyncio.gather(waiting, return_exceptions=True)
        await pool.close()
    return True


def test_close_ends_a_writer_whose_cancellation_was_swallowed_by_the_pools_wait(
    database_url: str,
) -> None:
    """Python 3.11's `asyncio.wait_for` (psycopg_pool's wait for a connection) returns the result
    instead of raising when the cancellation arrives as its inner wait completes: the writer task
    runs on with a connection as if never cancelled. `close` must still end it (the suite hung
    in the lifespan's end on this race: a second writer got its connection as the app stopped).
    The connection is handed over and the close issued after 0..11 scheduler turns; on 3.11 one
    of them lands in the window, whatever the machine's speed (no I/O is involved)."""
    select = (text("SELECT 1 AS x"), {})
    ended = [
        asyncio.run(_closed_in_the_swallowed_race(database_url, select, turns))
        for turns in range(12)
    ]
    assert ended == [True] * 12


def _psycopg_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("psycopg") and record.levelno >= logging.WARNING
    ]


def test_closed_writers_give_their_connections_back_idle_and_quietly(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every `agmem serve` shutdown after any capture: a writer closed while idle gave its
    connection back in pipeline mode, and one closed while preparing its statements (the second
    writer, woken by the same statement) with the PREPARE's answer unread: psycopg's rollback
    failed ("another command is already in progress") and the pool closed and discarded it,
    three WARNINGs. The close comes 0..15 scheduler turns after the statement's answer; each
    connection must come back out of pipeline mode, idle, and be kept, fit for the next writer."""

    select = pipeline.Sent(pipeline.statement("SELECT 1 AS x"), [])

    async def close_after(turns: int) -> list[tuple[pq.PipelineStatus, pq.TransactionStatus]]:
        pool = make_capture_pool(database_url, pool_size=2)
        await pool.open(wait=True)
        writer = GroupWriter(pool, writers=2, max_batch=8)
        try:
            await writer.execute(text("SELECT 1 AS x"), {})
            for _ in range(turns):
                await asyncio.sleep(0)
        finally:
            await writer.close()
        try:
            returned = [await pool.getconn(), await pool.getconn()]
            states = [
                (connection.pgconn.pipeline_status, connection.pgconn.transaction_status)
                for connection in returned
            ]
            # Each kept connection serves the writers' statements again: one whose PREPARE was
            # answered after the cancellation knows it (a second PREPARE would fail).
            for connection in returned:
                await pipeline.run(connection, [capture_db._NOTIFY_SENT, select])
                await pool.putconn(connection)
            assert pool.get_stats().get("returns_bad", 0) == 0
            return states
        finally:
            await pool.close()

    caplog.set_level(logging.WARNING)
    for turns in range(16):
        states = asyncio.run(close_after(turns))
        assert states == [(pq.PipelineStatus.OFF, pq.TransactionStatus.IDLE)] * 2, turns
    assert _psycopg_warnings(caplog) == []


def test_a_closed_writers_statements_sent_without_their_sync_never_commit(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """A lane whose statements were sent but not synced (held while the other lane commits)
    when the writer closes: its connection is closed, never synced or handed back as it is, so
    they roll back with it; their requests were told the writer stopped."""

    async def run() -> list[Any]:
        pool = make_capture_pool(database_url, pool_size=2)
        await pool.open(wait=True)
        writer = GroupWriter(pool, writers=2, max_batch=8)
        with psycopg.connect(libpq_url(database_url)) as holder:
            # Uncommitted: the writer's insert of the same id waits for it, in its commit.
            holder.execute("INSERT INTO sessions (id, project_path) VALUES ('held', '/p')")
            committing = asyncio.ensure_future(writer.execute(INSERT, {"id": "held"}))
            while not writer._committing:
                await asyncio.sleep(0.001)
            behind = asyncio.ensure_future(writer.execute(INSERT, {"id": "behind"}))
            while not any(lane.sent for lane in writer._lanes):
                await asyncio.sleep(0.001)
            await writer.close()
            holder.rollback()
        await pool.close()
        return await asyncio.gather(committing, behind, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(run(), 30))
    assert [type(result) for result in results] == [psycopg.OperationalError] * 2
    # The batch cut after its Sync may have committed (its backend still held the Sync once the
    # lock was released); the one never synced must not have.
    assert db.execute("SELECT id FROM sessions WHERE id = 'behind'").fetchall() == []


def test_close_ends_a_writer_that_swallowed_its_cancellation_while_postgres_would_hold_it(
    database_url: str,
) -> None:
    """The swallowed cancellation again (above), with Postgres unable to answer the writer's
    next round trip: its PREPARE of a statement on a table another transaction holds
    exclusively would wait for that lock. A writer being closed must not start it (rev-cancel25:
    `close` waited as long as the lock was held)."""
    on_locked_table = (text("SELECT count(*) AS n FROM sessions WHERE id = :id"), {"id": "x"})
    ended = []
    with psycopg.connect(libpq_url(database_url)) as locker:
        for turns in range(12):
            locker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            race = _closed_in_the_swallowed_race(
                database_url, on_locked_table, turns, release=locker.rollback
            )
            ended.append(asyncio.run(race))
            locker.rollback()
    assert ended == [True] * 12
