"""`agmem redact` at scale: re-applying the redaction rules to N stored index rows and M
observations, a share of them holding a secret that the rules catch.

    uv run python -m bench.redact [--chunks 100000] [--observations 20000] [--secret-share 0.01]

The chunks, sessions and memories are bench.search's (`load_postgres`, with random vectors: HNSW
and GIN indexes built as a restore would); the observations carry a tool call's arguments and a
2 KB result. Runs a dry run, the redaction, and a second redaction (which finds nothing), each
timed (wall, this process's CPU), and reports the rows changed. Then the worker's side
(app/worker/rescan.py): the secrets planted again and `redaction_state` set back to another rules
version, the worker's pass (claim, pass, record), and the check a worker makes at start and every
upkeep interval when nothing is pending, timed over 2,000 calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import numpy as np
import psycopg

from app.db.engine import make_async_engine, make_sessionmaker
from app.redaction import RedactReport, redact_stored
from app.worker.rescan import rescan_if_pending
from bench.db import bench_database, libpq
from bench.search import PROJECT, load_postgres, synthetic_chunks

SECRET = "\npassword: hunter2-{n}\n"


class _RandomVectors:
    """What `load_postgres` needs of an embedder: the vectors are random, not embedded."""

    identity = "bench:random:256"
    dims = 256


def load(url: str, chunks: int, observations: int, share: float, seed: int) -> int:
    rng = random.Random(seed)
    rows = synthetic_chunks(chunks, seed)
    planted = 0
    for n, (project, path, content) in enumerate(rows):
        if rng.random() < share:
            rows[n] = (project, path, content + SECRET.format(n=n))
            planted += 1
    vectors = np.random.default_rng(seed).standard_normal((chunks, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    load_postgres(url, rows, vectors, _RandomVectors())  # type: ignore[arg-type]
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        with conn.cursor().copy(
            "COPY observations (id, session_id, project_path, function_name, function_args, "
            "result, observation_type) FROM STDIN"
        ) as copy:
            for n in range(observations):
                command = f"mysql -u app -phunter2-{n} shop" if rng.random() < share else "ls"
                result = " ".join(row[2] for row in rng.sample(rows, 4))[:2000]
                args = json.dumps({"command": command})
                copy.write_row(
                    (
                        f"o{n}",
                        "s0",
                        PROJECT,
                        "run_shell_command",
                        args,
                        json.dumps(result),
                        "command",
                    )
                )
                planted += command != "ls"
        conn.execute("VACUUM ANALYZE observations")
    return planted


async def timed(url: str, dry_run: bool) -> tuple[float, float, RedactReport]:
    engine = make_async_engine(url, pool_size=1)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        report = await redact_stored(make_sessionmaker(engine), dry_run=dry_run)
        return time.perf_counter() - wall, time.process_time() - cpu, report
    finally:
        await engine.dispose()


async def worker_side(url: str, polls: int) -> None:
    engine = make_async_engine(url, pool_size=1)
    try:
        sessionmaker = make_sessionmaker(engine)
        lags: list[float] = []
        ticking = asyncio.create_task(_tick(lags))
        wall, cpu = time.perf_counter(), time.process_time()
        report = await rescan_if_pending(sessionmaker, "bench")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        ticking.cancel()
        assert report is not None
        print(f"worker   {wall:6.2f} s wall, {cpu:6.2f} s CPU here: {report.summary_line()}")
        lags.sort()
        print(
            f"event loop during the pass (a 5 ms sleep's overshoot, {len(lags)} ticks): "
            f"p50 {lags[len(lags) // 2] * 1e3:.1f}, p99 {lags[len(lags) * 99 // 100] * 1e3:.1f}, "
            f"max {lags[-1] * 1e3:.1f} ms (what a request to serve waits behind the pass)"
        )
        times = []
        for _ in range(polls):
            started = time.perf_counter()
            assert await rescan_if_pending(sessionmaker, "bench") is None
            times.append(time.perf_counter() - started)
        times.sort()
        print(
            f"idle check (nothing pending), {polls} calls: "
            f"median {times[polls // 2] * 1e6:.0f} µs, "
            f"p95 {times[polls * 95 // 100] * 1e6:.0f} µs wall (client and Postgres)"
        )
    finally:
        await engine.dispose()


async def _tick(lags: list[float]) -> None:
    while True:
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        lags.append(time.perf_counter() - started - 0.005)


def replant(url: str) -> None:
    """The planted secrets back, as rows stored before the rules: the observations' commands."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute(
            "UPDATE observations SET function_args = jsonb_build_object('command', "
            "'mysql -u app -phunter2-' || id || ' shop') "
            "WHERE function_args->>'command' LIKE 'mysql%'"
        )
        conn.execute("UPDATE redaction_state SET rules = 'before-upgrade'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--observations", type=int, default=20_000)
    parser.add_argument("--secret-share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with bench_database("agmem_bench_redact") as url:
        started = time.perf_counter()
        planted = load(url, args.chunks, args.observations, args.secret_share, args.seed)
        print(
            f"loaded {args.chunks} chunks, {args.observations} observations, {planted} "
            f"with a secret, in {time.perf_counter() - started:.1f} s"
        )
        for name, dry in (("dry run", True), ("redact", False), ("again", False)):
            wall, cpu, report = asyncio.run(timed(url, dry))
            rows = sum(report.scanned.values())
            print(
                f"{name:8} {wall:6.2f} s wall, {cpu:6.2f} s CPU here "
                f"({cpu / rows * 1e6:.0f} µs a row): {report.summary_line()}"
            )
        replant(url)
        asyncio.run(worker_side(url, 2000))


if __name__ == "__main__":
    main()
