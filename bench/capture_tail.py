"""Where the paced capture latency tail comes from: the same open-loop run, with the embedded
server's commit flush as configured (the product's default), without it, and with checkpoints
pushed far apart.

    uv run python -m bench.capture_tail                     # all three variants, 500 and 250 req/s
    uv run python -m bench.capture_tail --variants default,no-flush --rates 500
    uv run python -m bench.capture_tail --rates 500,500,500 --preload 10   # a loaded server

A diagnostic, not a goal's figure: `no-flush` sets `synchronous_commit = off` server-wide, what
the opt-in AGMEM_CAPTURE_SYNCHRONOUS_COMMIT=false does for the capture connections only (the
default acknowledges an observation only once its commit is flushed). If the tail goes
away without the flush and stays with checkpoints far apart, it is the wait for the WAL flush.
Each line also gives the share of CPU time the hypervisor took away during the run ("steal").
With --preload S, each paced run follows S seconds of the closed loop at 16 connections, as the
paced run of `bench.capture` follows its closed-loop rounds: a server that has written a
gigabyte or two of WAL (checkpoints, autovacuum of `observations`), not a fresh one.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import psycopg

from bench.capture import cpu_ticks, drive, payload_pool
from bench.scratch import scratch_folder
from bench.serve import run_server

VARIANTS = {
    "default": [],
    "no-flush": ["ALTER SYSTEM SET synchronous_commit = off"],
    "no-autovacuum": ["ALTER SYSTEM SET autovacuum = off"],
    "rare-checkpoints": [
        "ALTER SYSTEM SET max_wal_size = '8GB'",
        "ALTER SYSTEM SET checkpoint_timeout = '30min'",
    ],
}


def measure_variant(variant: str, rates: list[float], seconds: float, preload: float) -> None:
    from app.db.embedded import start_embedded_postgres
    from app.db.raw_pool import libpq_url

    pool = payload_pool(400)
    with scratch_folder("agmem-bench-tail-") as folder:
        home = Path(folder)
        url = start_embedded_postgres(home / "pgdata")
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            for statement in VARIANTS[variant]:
                connection.execute(statement)
            connection.execute("SELECT pg_reload_conf()")
        env = {"DATABASE_URL": url, "AGMEM_HOME": str(home)}
        with run_server(kind="agmem", log_dir=home, env=env) as server:
            asyncio.run(drive(server.port, 16, 3, 1, pool))  # warm-up, closed loop
            for rate in rates:
                if preload:
                    asyncio.run(drive(server.port, 16, preload, 1, pool))
                total_before, stolen_before = cpu_ticks()
                run, elapsed = asyncio.run(drive(server.port, 16, seconds, 1, pool, rate))
                total_after, stolen_after = cpu_ticks()
                steal = (stolen_after - stolen_before) / max(1, total_after - total_before)
                ordered = sorted(run.latencies) or [0.0]

                def at(share: float, ordered: list[float] = ordered) -> float:
                    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000

                print(
                    f"{variant:<17} offered {rate:5.0f} req/s  served {run.requests / elapsed:5.0f}"
                    f"  p50 {at(0.5):7.2f}  p90 {at(0.9):7.2f}  p99 {at(0.99):7.2f}"
                    f"  max {ordered[-1] * 1000:7.1f} ms  errors {run.errors}  steal {steal:.0%}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rates", default="500,500,250", help="offered req/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--preload", type=float, default=0.0, help="closed-loop seconds before each paced run"
    )
    args = parser.parse_args()
    rates = [float(part) for part in args.rates.split(",")]
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        measure_variant(variant, rates, args.seconds, args.preload)


if __name__ == "__main__":
    main()
