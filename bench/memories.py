"""Read-by-key latency of key/value memories with 10,000 memories per project.

Run: `uv run python -m bench.memories [--projects 3] [--per-project 10000] [--reads 3000]`.
It starts PostgreSQL (the test suite's choice: TEST_DATABASE_URL, Docker or an embedded
server), fills several projects with memories of every scope (values taken from the real memory
files in /work/shared/testdata/memory-md), then times exact-key reads the way a request makes
them: one transaction each, with the expiry purge, the scope resolution and the access count.
The bound is p99 < 5 ms; the ratio p99 / 5 ms is printed (below 1 passes).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from pathlib import Path

from sqlalchemy import text

from app.db import migrate
from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.memories import service
from tests.postgres import choose_kind, create_database, start_server

BOUND_MS = 5.0
MEMORY_MD = Path("/work/shared/testdata/memory-md")
NAMESPACES = ("project", "current", "discovered", "shared", "ai.claude", "ai.gemini")


def _values() -> list[str]:
    texts: list[str] = []
    for path in sorted(MEMORY_MD.glob("*.md")) if MEMORY_MD.is_dir() else []:
        texts += [p.strip() for p in path.read_text().split("\n\n") if len(p.strip()) > 40]
    return texts or [f"Decision {n}: auth/jwt.ts validates tokens, case {n}" for n in range(300)]


def project_path(n: int) -> str:
    return f"/home/dev/bench-project-{n}"


def key_of(n: int) -> str:
    return f"{NAMESPACES[n % len(NAMESPACES)]}.item_{n:05d}"


async def seed(url: str, projects: int, per_project: int, others: int = 0) -> None:
    """Project memories (most), plus session, shared and global ones, as one bulk insert each."""
    engine = make_async_engine(url, pool_size=2)
    values = _values()
    async with engine.begin() as connection:
        for p in range(projects):
            rows = [
                {
                    "scope": "session" if n % 10 == 9 else "project",
                    "project": project_path(p),
                    "session": f"s-{p}-{n % 7}" if n % 10 == 9 else "",
                    "key": key_of(n),
                    "value": values[(n + p) % len(values)],
                }
                for n in range(per_project)
            ]
            await connection.execute(
                text(
                    "INSERT INTO memories (scope, project_path, session_id, key, value, tags) "
                    "VALUES (:scope, :project, :session, :key, to_jsonb(CAST(:value AS text)), "
                    "ARRAY['bench'])"
                ),
                rows,
            )
        await connection.execute(
            text(
                "INSERT INTO memories (scope, project_path, session_id, key, value) "
                "SELECT 'global', '', '', 'ai.global.note_' || n, to_jsonb(n) "
                "FROM generate_series(1, 1000) AS n"
            )
        )
        # Many small projects too: the read must not slow down with the number of projects.
        await connection.execute(
            text(
                "INSERT INTO memories (scope, project_path, session_id, key, value) "
                "SELECT 'project', '/home/dev/other-' || p, '', "
                "'project.item_' || lpad(n::text, 5, '0'), to_jsonb(n) "
                "FROM generate_series(1, :others) AS p, generate_series(1, 5) AS n"
            ),
            {"others": others},
        )
        await connection.execute(text("ANALYZE memories"))
    await engine.dispose()


async def plan(url: str, project: str) -> str:
    """The plan of the exact-key read (run, then rolled back), to see which index serves it."""
    engine = make_async_engine(url, pool_size=1)
    visibility = service.Visibility(project_path=project)
    compiled = service.read_statement(visibility.shape).compile(engine.sync_engine)
    params = {**compiled.params, "read_key": key_of(1234), **visibility.params()}
    async with engine.connect() as connection:
        rows = await connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {compiled}", params)
        lines = [row[0] for row in rows]
        await connection.rollback()
    await engine.dispose()
    return "\n".join(lines)


async def time_reads(
    url: str, projects: int, per_project: int, reads: int
) -> tuple[list[float], list[float]]:
    """Exact-key reads, each in its own transaction, interleaved with an empty transaction
    (`SELECT 1`) that shows what the machine alone costs per round trip in the same run."""
    engine = make_async_engine(url, pool_size=2)
    maker = make_sessionmaker(engine)
    rng = random.Random(7)
    timings: list[float] = []
    baseline: list[float] = []
    for i in range(reads):
        n = rng.randrange(per_project)
        p = rng.randrange(projects)
        session_id = f"s-{p}-{n % 7}" if n % 10 == 9 else None
        visibility = service.Visibility(project_path=project_path(p), session_id=session_id)
        started = time.perf_counter()
        async with transaction(maker) as session:
            row = await service.read_memory(session, key=key_of(n), visibility=visibility)
        elapsed = (time.perf_counter() - started) * 1000
        assert row.key == key_of(n)
        started = time.perf_counter()
        async with transaction(maker) as session:
            await session.execute(text("SELECT 1"))
        empty = (time.perf_counter() - started) * 1000
        if i >= 100:  # the first reads warm the pool and the plan cache
            timings.append(elapsed)
            baseline.append(empty)
    await engine.dispose()
    return timings, baseline


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=3)
    parser.add_argument("--per-project", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=3_000)
    parser.add_argument("--other-projects", type=int, default=1_000)
    args = parser.parse_args()

    with start_server(choose_kind()) as server:
        url = create_database(server, prefix="agmem_bench")
        migrate.upgrade(url)
        started = time.perf_counter()
        asyncio.run(seed(url, args.projects, args.per_project, args.other_projects))
        total = args.projects * args.per_project + 1000 + 5 * args.other_projects
        print(
            f"seeded {total} memories ({args.per_project} in each of {args.projects} projects, "
            f"5 in each of {args.other_projects} more, 1000 global) "
            f"in {time.perf_counter() - started:.1f} s"
        )
        print(asyncio.run(plan(url, project_path(0))))
        timings, baseline = asyncio.run(
            time_reads(url, args.projects, args.per_project, args.reads)
        )
    p50, p95, p99 = (percentile(timings, q) for q in (50, 95, 99))
    print(
        f"read-by-key over {len(timings)} reads: mean {statistics.fmean(timings):.2f} ms, "
        f"p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms, max {max(timings):.2f} ms"
    )
    print(
        "baseline (empty transaction with SELECT 1, interleaved): "
        f"p50 {percentile(baseline, 50):.2f} ms, p99 {percentile(baseline, 99):.2f} ms"
    )
    print(
        f"p99 / bound ({BOUND_MS:.0f} ms) = {p99 / BOUND_MS:.2f} "
        f"({'within' if p99 < BOUND_MS else 'OVER'} the bound)"
    )


if __name__ == "__main__":
    main()
