"""Postgres's CPU per hot capture statement, in its two forms: with the session touch and without.

    uv run python -m bench.capture_statements            # 8 alternated blocks of 800 pairs
    uv run python -m bench.capture_statements --blocks 12 --pairs 1000

Runs the observe insert and the result's match by id, prepared, on one connection of a fresh
embedded PostgreSQL (a transaction a pair, `synchronous_commit` off so that the disk does not
add its noise: the commit is the same for both forms), with the `bench.capture` payloads, and
reads the backend's CPU time from /proc/<pid>/schedstat (nanoseconds) around each block. The two
forms run in alternate blocks, so a change of the machine's speed during the run (it moved by
a quarter between runs minutes apart on the shared machine) hits both alike; compare medians.
"""

from __future__ import annotations

import argparse
import random
import statistics
import uuid
from pathlib import Path
from typing import Any, cast

import psycopg

from bench.capture import payload_pool
from bench.scratch import scratch_folder

SESSIONS = 16


def prepared_params(params: list[bytes | None]) -> list[bytes]:
    """libpq sends a None as NULL; psycopg's stub for exec_prepared leaves None out (its
    send_query_prepared's allows it), so the type is only narrowed for the checker."""
    return cast(list[bytes], params)


def backend_cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8, help="blocks per form, alternated")
    parser.add_argument("--pairs", type=int, default=800, help="observe/result pairs a block")
    args = parser.parse_args()

    from app.capture import pipeline, queries
    from app.db import migrate
    from app.db.embedded import start_embedded_postgres
    from app.db.raw_pool import libpq_url

    forms = {
        "touching": (queries.INSERT_OBSERVATION.touching, queries.MATCH_BY_ID.touching),
        "plain": (queries.INSERT_OBSERVATION.plain, queries.MATCH_BY_ID.plain),
    }
    pool = payload_pool(400)
    with scratch_folder("agmem-bench-") as folder:
        url = start_embedded_postgres(Path(folder) / "pgdata")
        migrate.upgrade(url)
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute("SET synchronous_commit = off")
            row = connection.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            pid = int(row[0])
            sessions = [uuid.uuid4().hex for _ in range(SESSIONS)]
            for session in sessions:
                connection.execute(
                    "INSERT INTO sessions (id, project_path) VALUES (%s, '/bench')", (session,)
                )
            for observe, result in forms.values():
                for query in (observe, result):
                    stmt = pipeline.statement(query.text)
                    connection.pgconn.prepare(stmt.name, stmt.query)

            def block(name: str, pairs: int, seed: int) -> float:
                """µs of backend CPU per statement."""
                observe = pipeline.statement(forms[name][0].text)
                result = pipeline.statement(forms[name][1].text)
                rng = random.Random(seed)
                started = backend_cpu_ns(pid)
                for number in range(pairs):
                    arguments, output = pool[rng.randrange(len(pool))]
                    call: dict[str, Any] = {
                        "id": uuid.uuid4().hex,
                        "session_id": sessions[number % SESSIONS],
                        "function_name": "write_file",
                        "function_args": arguments,
                        "observation_type": "write",
                        "entities": "{}",
                        "original_tokens": len(arguments) // 4,
                        "args_bytes": len(arguments),
                        "truncated": False,
                        "observed_at": None,
                    }
                    answer: dict[str, Any] = {
                        "observation_id": call["id"],
                        "session_id": call["session_id"],
                        "result": output,
                        "result_bytes": len(output),
                        "result_tokens": len(output) // 4,
                        "truncated": False,
                        "entities": "{}",
                        "result_at": None,
                    }
                    connection.execute("BEGIN")
                    connection.pgconn.exec_prepared(
                        observe.name, prepared_params(pipeline.dump_params(observe, call))
                    )
                    connection.pgconn.exec_prepared(
                        result.name, prepared_params(pipeline.dump_params(result, answer))
                    )
                    connection.execute("COMMIT")
                return (backend_cpu_ns(pid) - started) / pairs / 2 / 1000

            for name in forms:  # warm-up: caches, plans, the first relation extensions
                block(name, 200, 0)
            figures: dict[str, list[float]] = {name: [] for name in forms}
            for number in range(args.blocks):
                order = list(forms) if number % 2 == 0 else list(reversed(forms))
                for name in order:
                    figures[name].append(block(name, args.pairs, number + 1))
    for name, values in figures.items():
        print(
            f"{name:<9} Postgres CPU a statement: median {statistics.median(values):6.1f} µs "
            f"(blocks {min(values):.1f}-{max(values):.1f})"
        )


if __name__ == "__main__":
    main()
