"""Where a capture request's time goes: the writer's batches, the WAL, the server's CPU and waits.

    uv run python -m bench.capture_lanes                                  # the defaults, 16 conns
    uv run python -m bench.capture_lanes --levels 16,64 --rounds 3 \\
        --variant AGMEM_CAPTURE_WRITERS=1 --variant default               # alternated, A/B
    uv run python -m bench.capture_lanes --rate 1000                      # open loop (paced)
    uv run python -m bench.capture_lanes --variant pg:wal_init_zero=on    # a Postgres setting

A diagnostic beside `bench.capture`, not the goal's figure: one embedded PostgreSQL, `agmem
serve` started afresh for each variant (a `NAME=VALUE` list of server environment settings,
`pg:name=value` for `ALTER SYSTEM` before the server starts, or `default`), the variants
measured alternately round by round with `bench.capture`'s client and payloads. The server
runs with its group-commit writer instrumented (timestamps around each batch, nothing else
changed) and reports at exit. All variants share the one Postgres: it creates new WAL segments
only until checkpoints recycle old ones, so a setting about new segments (`wal_init_zero`)
compares only on a fresh server (the first variant of the first round; see
docs/benchmarks.md, capture8, for that comparison). Per run it prints:

- throughput, latency percentiles, CPU per request of the server, Postgres and this client, and
  the server's context switches per request (nonvoluntary ones are preemptions: the server was
  runnable and another process got its core);
- WAL per request, and from `pg_stat_io` (with `track_wal_io_timing` on) the WAL writes and
  fsyncs of the backends, with their times, new WAL segments created ("init") and checkpoints;
- the writer's batches: statements per batch, how long a lane collected before its Sync, how
  long the Sync took to be answered (the rest of the batch's execution, the commit and its
  flush), and each statement's wait in `execute`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from pathlib import Path
from typing import Any

import psycopg

from bench.capture import cpu_seconds, cpu_ticks, drive, payload_pool, postgres_pids
from bench.scratch import scratch_folder
from bench.serve import AGMEM_SERVE, run_server

# `agmem serve` with the group-commit writer timed: batch sizes and times are kept in memory and
# written as JSON to $AGMEM_BENCH_LANES at exit (uvicorn's graceful shutdown runs atexit).
INSTRUMENTED_SERVE = (
    """
import atexit, json, os, time
from app.capture import db

stats = {"batches": [], "waits": []}
collect, write, execute = db.GroupWriter._collect, db.GroupWriter._write, db.GroupWriter.execute
opened = {}

async def timed_collect(self, lane):
    started = time.perf_counter()
    await collect(self, lane)
    opened[id(lane)] = (started, time.perf_counter())

async def timed_write(self, lane):
    synced = time.perf_counter()
    await write(self, lane)
    started, _ready = opened.pop(id(lane))
    stats["batches"].append((len(lane.sent), synced - started, time.perf_counter() - synced))

async def timed_execute(self, query, params=None):
    started = time.perf_counter()
    try:
        return await execute(self, query, params)
    finally:
        stats["waits"].append(time.perf_counter() - started)

db.GroupWriter._collect = timed_collect
db.GroupWriter._write = timed_write
db.GroupWriter.execute = timed_execute

def report():
    with open(os.environ["AGMEM_BENCH_LANES"], "w") as handle:
        json.dump(stats, handle)

atexit.register(report)
"""
    + AGMEM_SERVE
)

WAL = "SELECT wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal"
IO = (
    "SELECT backend_type, context, writes, write_time, fsyncs, fsync_time FROM pg_stat_io "
    "WHERE object = 'wal' AND backend_type = 'client backend'"
)
CHECKPOINTS = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"


def snapshot(url: str) -> dict[str, Any]:
    from app.db.raw_pool import libpq_url

    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        wal = connection.execute(WAL).fetchone()
        io = {row[1]: row[2:] for row in connection.execute(IO).fetchall()}
        checkpoints = connection.execute(CHECKPOINTS).fetchone()
    return {"wal": wal, "io": io, "checkpoints": checkpoints[0] if checkpoints else 0}


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches of a process so far (Linux)."""
    counts: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name.endswith("ctxt_switches"):
            counts[name] = int(value)
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def quantiles(values: list[float], scale: float = 1.0) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"

    def at(share: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * scale

    top = ordered[-1] * scale
    return f"p50 {at(0.5):.2f} / p90 {at(0.9):.2f} / p99 {at(0.99):.2f} / max {top:.2f}"


def measure(
    server: Any, url: str, pgdata: Path, connections: int, seconds: float, rate: float | None
) -> str:
    pool = payload_pool(400)
    before = snapshot(url)
    server_cpu, db_cpu = cpu_seconds([server.process.pid]), cpu_seconds(postgres_pids(pgdata))
    own, switches = os.times(), context_switches(server.process.pid)
    ticks, stolen = cpu_ticks()
    run, elapsed = asyncio.run(drive(server.port, connections, seconds, 1.0, pool, rate))
    ticks_after, stolen_after = cpu_ticks()
    ticks, stolen = ticks_after - ticks, stolen_after - stolen
    own_after, switches_after = os.times(), context_switches(server.process.pid)
    server_cpu = cpu_seconds([server.process.pid]) - server_cpu
    db_cpu = cpu_seconds(postgres_pids(pgdata)) - db_cpu
    after = snapshot(url)
    sent = max(1, round(run.requests * (elapsed + 1.0) / elapsed))  # CPU covers the warm-up too
    client_cpu = (own_after.user + own_after.system) - (own.user + own.system)
    steal = stolen / max(1, ticks)
    lines = [
        f"{connections:>3} conns {run.requests / elapsed:7.0f} req/s  latency ms "
        f"{quantiles(run.latencies, 1000)}  errors {run.errors}  steal {steal:.0%}",
        f"    CPU a request: server {server_cpu / sent * 1000:.3f} ms, postgres "
        f"{db_cpu / sent * 1000:.3f} ms, client {client_cpu / sent * 1000:.3f} ms; server "
        f"context switches a request: voluntary {(switches_after[0] - switches[0]) / sent:.2f}, "
        f"nonvoluntary {(switches_after[1] - switches[1]) / sent:.2f}",
    ]
    wal = [a - b for a, b in zip(after["wal"], before["wal"], strict=True)]
    checkpoints = after["checkpoints"] - before["checkpoints"]
    lines.append(
        f"    WAL a request: {wal[2] / sent / 1024:.1f} KB, {wal[0] / sent:.1f} records, "
        f"{wal[1] / sent:.3f} full pages; checkpoints {checkpoints}"
    )
    for context in ("normal", "init"):
        now, then = after["io"].get(context), before["io"].get(context)
        if now is None:
            continue
        delta = [(a or 0) - (b or 0) for a, b in zip(now, then or (0, 0, 0, 0), strict=True)]
        label = "WAL writes" if context == "normal" else "new WAL segments"
        lines.append(
            f"    backends' {label}: {delta[0]} writes {delta[1]:.0f} ms, {delta[2]} fsyncs "
            f"{delta[3]:.0f} ms ({delta[3] / max(1, delta[2]):.2f} ms each)"
        )
    return "\n".join(lines)


def batch_report(path: Path) -> str:
    if not path.exists():
        return "    (the server wrote no writer statistics)"
    stats = json.loads(path.read_text())
    batches = stats["batches"]
    if not batches:
        return "    no batches"
    sizes = [float(size) for size, _collect, _write in batches]
    return "\n".join(
        [
            f"    writer: {len(batches)} batches, {statistics.mean(sizes):.1f} statements on "
            f"average ({quantiles(sizes)})",
            f"    lane open until its Sync, ms: {quantiles([b[1] for b in batches], 1000)}",
            f"    Sync to its answer, ms: {quantiles([b[2] for b in batches], 1000)}",
            f"    a statement's wait in execute, ms: {quantiles(stats['waits'], 1000)}",
        ]
    )


def parse_variant(text: str) -> tuple[dict[str, str], list[str]]:
    """(server environment, ALTER SYSTEM settings) of a variant."""
    env: dict[str, str] = {}
    settings: list[str] = []
    if text == "default":
        return env, settings
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.startswith("pg:"):
            settings.append(f"ALTER SYSTEM SET {name[3:]} = '{value}'")
        else:
            env[name] = value
    return env, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", help="repeatable; default: 'default'")
    parser.add_argument("--levels", default="16", help="connection counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=0, help="open loop at this req/s")
    args = parser.parse_args()
    variants = args.variant or ["default"]
    levels = [int(level) for level in args.levels.split(",")]

    from app.db.embedded import start_embedded_postgres
    from app.db.raw_pool import libpq_url

    with scratch_folder("agmem-bench-") as folder:
        home = Path(folder)
        pgdata = home / "pgdata"
        url = start_embedded_postgres(pgdata)
        for number in range(1, args.rounds + 1):
            for variant in variants:
                env, settings = parse_variant(variant)
                with psycopg.connect(libpq_url(url), autocommit=True) as connection:
                    connection.execute("ALTER SYSTEM RESET ALL")
                    connection.execute("ALTER SYSTEM SET track_wal_io_timing = on")
                    for statement in settings:
                        connection.execute(statement)
                    connection.execute("SELECT pg_reload_conf()")
                stats = home / f"lanes-{number}-{len(os.listdir(home))}.json"
                server_env = {"DATABASE_URL": url, "AGMEM_HOME": str(home)} | env
                server_env["AGMEM_BENCH_LANES"] = str(stats)
                print(f"round {number}, {variant}", flush=True)
                with run_server(
                    kind="agmem", log_dir=home, env=server_env, code=INSTRUMENTED_SERVE
                ) as server:
                    for connections in levels:
                        rate = args.rate or None
                        print(measure(server, url, pgdata, connections, args.seconds, rate))
                print(batch_report(stats), flush=True)


if __name__ == "__main__":
    main()
