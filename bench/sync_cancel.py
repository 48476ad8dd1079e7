"""The statement every sync runs to close superseded Batch API jobs, with nothing to close or
cancel (a watch's every sync): `uv run python -m bench.sync_cancel [--rounds N] [--runs N]`.

Before (df3f0b2): the UPDATE alone. After (batch18): the UPDATE in a CTE, with the project's
cancels still to do read through their partial index in the same statement. Both run on one
autocommit psycopg connection, as the sync's lock connection runs them (prepared after 5 runs),
in alternated blocks, over a table holding `--jobs` finished jobs of the project and ten times
as many of other projects (some with a settled cancel). Prints the median time an execution
(round trip included) of each.
Uses DATABASE_URL when set (its rows are removed afterwards), else a throwaway embedded
PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psycopg

from app.db.raw_pool import libpq_url
from app.sync import queries
from bench.sync import database

PROJECT = "/bench/sync-cancel/project"
MODEL = "local:wordllama-l2_supercat:256"

# df3f0b2's statement, as the sync ran it before batch18.
BEFORE = (
    "UPDATE embedding_batches SET status = 'failed', updated_at = now(), "
    "last_error = 'superseded: the embedding model is now ' || %(model)s "
    "WHERE project_path = %(project)s AND model <> %(model)s AND status = 'submitted' "
    "RETURNING provider_job"
)


async def before(connection: psycopg.AsyncConnection[Any]) -> None:
    cursor = await connection.execute(BEFORE, {"project": PROJECT, "model": MODEL})
    await cursor.fetchall()


async def after(connection: psycopg.AsyncConnection[Any]) -> None:
    await queries.close_superseded_batches(connection, project=PROJECT, model=MODEL)


async def seed(connection: psycopg.AsyncConnection[Any], jobs: int) -> None:
    await connection.execute(
        "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status) "
        "SELECT %s, 'gemini:gemini-embedding-001:768', 'batches/' || i, '[]', 'done' "
        "FROM generate_series(1, %s) AS i",
        (PROJECT, jobs),
    )
    await connection.execute(
        "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status, "
        "last_error, cancel_status, cancel_requested_at, cancel_settled_at) "
        "SELECT '/bench/sync-cancel/other' || (i %% 7), 'gemini:gemini-embedding-001:768', "
        "'batches/o' || i, '[]', 'failed', 'superseded', "
        "CASE WHEN i %% 3 = 0 THEN 'cancelled' END, now(), now() "
        "FROM generate_series(1, %s) AS i",
        (jobs * 10,),
    )
    await connection.execute("ANALYZE embedding_batches")


async def main(args: argparse.Namespace) -> None:
    with database() as url:
        async with await psycopg.AsyncConnection.connect(
            libpq_url(url), autocommit=True
        ) as connection:
            try:
                await seed(connection, args.jobs)
                for run in (before, after):  # prepared, caches warm
                    for _ in range(20):
                        await run(connection)
                timings: dict[str, list[float]] = {"before": [], "after": []}
                for block in range(args.runs):
                    order = (before, after) if block % 2 == 0 else (after, before)
                    for run in order:
                        started = time.perf_counter()
                        for _ in range(args.rounds):
                            await run(connection)
                        elapsed = time.perf_counter() - started
                        timings[run.__name__].append(elapsed / args.rounds * 1e6)
                for name, values in timings.items():
                    values.sort()
                    print(
                        f"{name:<7} {statistics.median(values):7.1f} µs an execution "
                        f"(median of {len(values)} blocks of {args.rounds}; "
                        f"{values[0]:.1f}-{values[-1]:.1f})"
                    )
            finally:
                await connection.execute(
                    "DELETE FROM embedding_batches WHERE project_path LIKE '/bench/sync-cancel/%%'",
                    (),
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500, help="executions a block")
    parser.add_argument("--runs", type=int, default=10, help="blocks of each, alternated")
    parser.add_argument("--jobs", type=int, default=50, help="finished jobs of the project")
    asyncio.run(main(parser.parse_args()))
