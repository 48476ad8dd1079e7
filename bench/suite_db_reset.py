"""The `db` fixture's reset between tests, as tests/conftest.py did it and as it does it now.

`uv run python -m bench.suite_db_reset [--rounds 5] [--tests 200]`, under the CPU lock.

Each simulated test writes what a typical test writes (a session and two observations, through
another connection, as the app's pools do) and then reads one count through the fixture's
connection, or not (tests that use the fixture only through `client`). Timed: the fixture's
set-up and the test's read, wall and this process's CPU (PostgreSQL's work is in the wall only).

- before: a new connection per test, whose first statements (the check of which tables were
  touched, the TRUNCATE) read the catalog cold;
- after: the check and the TRUNCATE on one connection kept for the run (tests/conftest.py's
  `TableReset`), then a new connection for the test.

Rounds alternate the two sides; each line is one round's median per test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.db import bench_database, libpq
from tests.conftest import TableReset, reset_tables

WRITES = [
    "INSERT INTO sessions (id, project_path) VALUES ('s', '/p')",
    "INSERT INTO observations (id, session_id, project_path, function_name, observation_type)"
    " VALUES ('o1', 's', '/p', 'Read', 'read'), ('o2', 's', '/p', 'Read', 'read')",
]


def before(url: str, _reset: TableReset, reads: bool) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        reset_tables(connection)
        if reads:
            connection.execute("SELECT count(*) FROM observations").fetchone()


def after(url: str, reset: TableReset, reads: bool) -> None:
    reset.reset()
    with psycopg.connect(url, autocommit=True) as connection:
        if reads:
            connection.execute("SELECT count(*) FROM observations").fetchone()


SIDES: dict[str, Callable[[str, TableReset, bool], None]] = {"before": before, "after": after}


def one_round(
    url: str, app: psycopg.Connection[Any], reset: TableReset, side: str, tests: int, reads: bool
) -> tuple[float, float]:
    """Median wall and CPU, in ms, of one side's set-up (and read) over `tests` tests."""
    walls, cpus = [], []
    for _ in range(tests):
        for statement in WRITES:
            app.execute(statement)
        wall, cpu = time.perf_counter(), time.process_time()
        SIDES[side](url, reset, reads)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tests", type=int, default=200)
    options = parser.parse_args()
    with bench_database("agmem_bench_reset") as database_url:
        url = libpq(database_url)
        reset = TableReset(url)
        with psycopg.connect(url, autocommit=True) as app:
            for reads in (True, False):
                label = "test reads db" if reads else "test never reads db"
                medians: dict[str, list[float]] = {"before": [], "after": []}
                for round_ in range(options.rounds):
                    for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                        wall, cpu = one_round(url, app, reset, side, options.tests, reads)
                        medians[side].append(wall)
                        print(f"{label:20} {side:7} wall {wall:6.2f} ms  cpu {cpu:5.2f} ms")
                old, new = (statistics.median(medians[s]) for s in ("before", "after"))
                print(
                    f"{label:20} median wall before {old:.2f} ms, after {new:.2f} ms, "
                    f"after/before {new / old:.2f}",
                    flush=True,
                )
        reset.close()


if __name__ == "__main__":
    main()
