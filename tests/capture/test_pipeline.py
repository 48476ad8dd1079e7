"""The writer's libpq pipeline: statement conversion, parameter types, rows, errors."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import pq
from sqlalchemy import text

from app.capture import pipeline
from app.capture.db import GroupWriter, make_capture_pool

ROUND_TRIP = text(
    "SELECT CAST(:n AS bigint) AS n, CAST(:small AS int) AS small, CAST(:flag AS boolean) AS flag,"
    " CAST(:s AS text) AS s, CAST(:when AS timestamptz) AS when_, CAST(:none AS text) AS none,"
    " CAST(:n AS bigint) + 1 AS again"
)


def test_statement_numbers_each_bind_once_and_keeps_casts() -> None:
    stmt = pipeline.statement("SELECT :a::int, CAST(:b AS jsonb), :a, '{}'::jsonb")
    assert stmt.query == b"SELECT $1::int, CAST($2 AS jsonb), $1, '{}'::jsonb"
    assert stmt.binds == ("a", "b")
    assert pipeline.statement("SELECT :a::int, CAST(:b AS jsonb), :a, '{}'::jsonb") is stmt


def test_dump_refuses_what_it_cannot_send() -> None:
    with pytest.raises(TypeError, match="list"):
        pipeline.dump([1, 2])


async def _run(database_url: str, calls: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
    pool = make_capture_pool(database_url, pool_size=1)
    await pool.open(wait=True)
    writer = GroupWriter(pool, writers=1, max_batch=64)
    try:
        return await asyncio.gather(
            *(writer.execute(query, params) for query, params in calls), return_exceptions=True
        )
    finally:
        await writer.close()
        await pool.close()


def test_parameters_and_rows_keep_their_types(database_url: str) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    text_value = "é🙂\n'\""
    params = {"n": 2**40, "small": 40_000, "flag": True, "s": text_value}
    params |= {"when": when, "none": None}
    # Twice: the first call prepares the statement, the second reuses it (one batch of both)
    # and sends the text as its UTF-8 bytes, as the capture writer sends a payload's JSON.
    as_bytes = params | {"s": text_value.encode()}
    first, second = asyncio.run(_run(database_url, [(ROUND_TRIP, params), (ROUND_TRIP, as_bytes)]))
    for result in (first, second):
        row = result.one()
        assert (row.n, row.small, row.flag, row.s, row.when_, row.none, row.again) == (
            2**40,
            40_000,
            True,
            text_value,
            when,
            None,
            2**40 + 1,
        )


def test_a_wrong_parameter_fails_only_its_request(database_url: str) -> None:
    good = {"n": 1, "small": 1, "flag": False, "s": "x", "when": None, "none": None}
    bad = good | {"small": 2**40}  # out of range for int
    results = asyncio.run(_run(database_url, [(ROUND_TRIP, good), (ROUND_TRIP, bad)] * 3))
    for index, result in enumerate(results):
        if index % 2:
            assert isinstance(result, psycopg.errors.NumericValueOutOfRange)
        else:
            assert result.one().small == 1


def test_a_statement_with_no_rows_answers_none(database_url: str) -> None:
    (result,) = asyncio.run(_run(database_url, [(text("SELECT 1 AS x WHERE :n = 2"), {"n": 1})]))
    assert result.first() is None


def test_a_connection_read_without_its_sync_is_closed_not_handed_back(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """libpq calls a pipelined connection idle once every result asked for has been read, Sync
    or not: statements sent and read before their Sync (a flush request) leave their implicit
    transaction open on the server while `transaction_status` says IDLE. Handed back, the next
    user's first Sync (here a PREPARE's) committed that INSERT along with its own work. It must
    be closed instead; the pool replaces it."""
    insert = pipeline.Sent(
        pipeline.statement("INSERT INTO sessions (id, project_path) VALUES ('unsynced', '/p')"), []
    )
    select = pipeline.Sent(pipeline.statement("SELECT 2 AS y"), [])

    async def run() -> tuple[pq.TransactionStatus, bool, list[Any]]:
        pool = make_capture_pool(database_url, pool_size=1)
        await pool.open(wait=True)
        try:
            async with pool.connection() as connection:
                await pipeline.prepare(connection, [insert.stmt])
                pipeline.begin(connection)
                pipeline.send(connection, insert)
                connection.pgconn.send_flush_request()  # its result comes without a Sync
                answers: list[pq.abc.PGresult] = []
                await pipeline._answer(connection.pgconn, answers)
                assert [answer.status for answer in answers] == [pq.ExecStatus.COMMAND_OK]
                seen_as = connection.pgconn.transaction_status
                await pipeline.hand_back(connection)
                closed = connection.closed
            async with pool.connection() as connection:  # the next user
                (rows,) = await pipeline.run(connection, [select])
            return seen_as, closed, rows
        finally:
            await pool.close()

    seen_as, closed, rows = asyncio.run(run())
    assert seen_as == pq.TransactionStatus.IDLE  # what the old check relied on
    assert db.execute("SELECT count(*) FROM sessions WHERE id = 'unsynced'").fetchone() == (0,)
    assert closed
    assert [row.y for row in rows] == [2]
