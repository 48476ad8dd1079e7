"""Where the slowest 1% of closed-loop capture requests spend their time: client, server, Postgres.

    uv run python -m bench.capture_p99                    # 16 conns, 10 s, capture then no-op
    uv run python -m bench.capture_p99 --rounds 2 --seconds 8
    uv run python -m bench.capture_p99 --variant AGMEM_CAPTURE_WRITERS=1 --variant default

A diagnostic beside `bench.capture` (its client, payloads and closed loop at 16 connections), not
the goal's figure. The load generator shares the two cores with the server and Postgres, so the
client's own latency is not the server's. `time.perf_counter` is CLOCK_MONOTONIC, one clock for
every process of the machine, so the client's and the server's timestamps of one request compare
directly. The server runs as `agmem serve` does, with an ASGI layer in front of the app that
timestamps each request (when uvicorn calls the app, and when the last byte of the answer is
handed to the transport) and reads the observation's id from the head of its body, which the
client's record of the same request carries too. Per request:

- `in`: the client's send to the app being called: the kernel, the server's event loop getting
  round to the socket (other requests' work ahead of it), uvicorn's HTTP parsing;
- `app`: the app's handling, of which `writer` is the wait in the group-commit writer
  (`GroupWriter.execute`: queueing, Postgres executing the statement, the batch's commit and its
  WAL flush, the loop getting round to the answer) and the rest is the app's Python;
- `out`: the answer handed to the transport to the client reading it: the kernel and the client's
  event loop getting round to it (the client's share).

Also recorded: the server's garbage collections (each collection's generation and pause, from
`gc.callbacks`), both event loops' lag (a 1 ms sleep's overshoot, a probe task in each), the
writer's batches (Sync to its answer), the server's and Postgres's CPU a request and the
backends' WAL fsync time (`pg_stat_io`). The no-op peer (`bench/noop_app.py`) is then driven by
the same client for the same time: its p99 is what the machine gives an answer that does nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import uvloop

from bench.capture import Connection, cpu_seconds, payload_pool, postgres_pids
from bench.capture_lanes import context_switches, parse_variant
from bench.scratch import scratch_folder
from bench.serve import AGMEM_SERVE, ROOT, run_server

# `agmem serve` with the timing layer: records kept in memory, written as JSON to
# $AGMEM_BENCH_P99 at exit (uvicorn's graceful shutdown runs atexit).
INSTRUMENTED_SERVE = (
    """
import asyncio, atexit, contextvars, gc, json, os, time
from array import array
import app.main
from app.capture import db

# Kept in arrays of numbers, which the garbage collector does not track: a list of tuples would
# add objects the full collections must walk, more with every request measured.
clock = time.perf_counter
paths, ids_high, ids_low = array("b"), array("Q"), array("Q")
starts, ends, writer_waits = array("d"), array("d"), array("d")
gcs, lags, batches, heap = array("d"), array("d"), array("d"), {}
waits = contextvars.ContextVar("waits")
gc_started = [0.0, 0.0]

def on_gc(phase, info):
    if phase == "start":
        gc_started[0], gc_started[1] = clock(), time.thread_time()
    else:
        gcs.extend((gc_started[0], clock() - gc_started[0], info["generation"]))
        gcs.append(time.thread_time() - gc_started[1])

gc.callbacks.append(on_gc)

async def probe():
    while True:
        due = clock() + 0.001
        await asyncio.sleep(0.001)
        lags.extend((due, clock() - due))

execute, write = db.GroupWriter.execute, db.GroupWriter._write

async def timed_execute(self, query, params=None):
    started = clock()
    try:
        return await execute(self, query, params)
    finally:
        spent = waits.get(None)
        if spent is not None:
            spent[0] += clock() - started

async def timed_write(self, lane):
    synced = clock()
    await write(self, lane)
    batches.extend((synced, clock() - synced, len(lane.sent)))

db.GroupWriter.execute = timed_execute
db.GroupWriter._write = timed_write

def wrap(inner):
    probing = []

    async def timed(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await inner(scope, receive, send)
        if not probing:
            probing.append(asyncio.get_running_loop().create_task(probe()))
            heap.update(tracked=len(gc.get_objects()), frozen=gc.get_freeze_count())
        started = clock()
        result = scope["path"].endswith("/result")
        marker = b'"observationId":"' if result else b'"id":"'
        found = [0]
        spent = [0.0]
        waits.set(spent)
        answered = [0.0]

        async def receiving():
            message = await receive()
            if not found[0]:
                body = message.get("body", b"")
                at = body.find(marker, 0, 200)
                if at >= 0:
                    found[0] = int(body[at + len(marker) : at + len(marker) + 32], 16)
            return message

        async def sending(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered[0] = clock()

        await inner(scope, receiving, sending)
        paths.append(result)
        ids_high.append(found[0] >> 64)
        ids_low.append(found[0] & 0xFFFFFFFFFFFFFFFF)
        starts.append(started)
        ends.append(answered[0])
        writer_waits.append(spent[0])

    return timed

create_app = app.main.create_app

def instrumented_create_app(*args, **kwargs):
    return wrap(create_app(*args, **kwargs))

app.main.create_app = instrumented_create_app

def report():
    heap.update(tracked_at_exit=len(gc.get_objects()))
    requests = [
        [bool(path), f"{high:016x}{low:016x}", start, end, writer]
        for path, high, low, start, end, writer in zip(
            paths, ids_high, ids_low, starts, ends, writer_waits
        )
    ]
    def rows(values, width):
        return [list(values[n : n + width]) for n in range(0, len(values), width)]
    with open(os.environ["AGMEM_BENCH_P99"], "w") as handle:
        json.dump(
            {
                "requests": requests,
                "gc": rows(gcs, 4),
                "lags": rows(lags, 2),
                "batches": rows(batches, 3),
                "heap": heap,
            },
            handle,
        )

atexit.register(report)
"""
    + AGMEM_SERVE
)

IO = (
    "SELECT coalesce(sum(fsyncs), 0), coalesce(sum(fsync_time), 0) FROM pg_stat_io "
    "WHERE object = 'wal' AND backend_type = 'client backend'"
)


def wal_fsyncs(url: str) -> tuple[float, float]:
    from app.db.raw_pool import libpq_url

    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        row = connection.execute(IO).fetchone()
    return (float(row[0]), float(row[1])) if row else (0.0, 0.0)


def at(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"
    return (
        f"p50 {at(ordered, 0.5) * 1000:6.2f}  p99 {at(ordered, 0.99) * 1000:6.2f}  "
        f"max {ordered[-1] * 1000:6.1f} ms"
    )


async def drive(
    port: int, connections: int, seconds: float, warmup: float, pool: list[tuple[bytes, bytes]]
) -> tuple[list[tuple[str, str, float, float]], list[tuple[float, float]], float]:
    """`bench.capture.drive`'s closed loop, keeping each request's id and timestamps, with a
    probe of this client's own event-loop lag."""
    sessions = []
    setup = await Connection.open(port)
    for _ in range(connections):
        body = json.dumps({"projectPath": "/bench/project", "id": uuid.uuid4().hex}).encode()
        status, answer = await setup.post("/api/session/start", body)
        sessions.append(json.loads(answer)["id"] if status in (200, 201) else "noop")
    setup.close()
    records: list[tuple[str, str, float, float]] = []
    lags: list[tuple[float, float]] = []
    measuring = False
    stop_at = time.perf_counter() + warmup + seconds

    async def probe() -> None:
        while time.perf_counter() < stop_at:
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            if measuring:
                lags.append((due, time.perf_counter() - due))

    async def client(number: int) -> None:
        connection = await Connection.open(port)
        rng = random.Random(number)
        session = sessions[number].encode()
        try:
            while time.perf_counter() < stop_at:
                args, result = pool[rng.randrange(len(pool))]
                call_id = uuid.uuid4().hex
                observe = b'{"sessionId":"%s","id":"%s","functionName":"write_file",' % (
                    session,
                    call_id.encode(),
                )
                answer = b'{"sessionId":"%s","observationId":"%s","functionName":"write_file",' % (
                    session,
                    call_id.encode(),
                )
                for path, body in (
                    ("/api/observe", observe + b'"functionArgs":' + args + b"}"),
                    ("/api/observe/result", answer + b'"result":' + result + b"}"),
                ):
                    started = time.perf_counter()
                    status, _ = await connection.post(path, body)
                    if measuring:
                        records.append((path, call_id, started, time.perf_counter()))
        finally:
            connection.close()

    tasks = [asyncio.create_task(client(number)) for number in range(connections)]
    tasks.append(asyncio.create_task(probe()))
    await asyncio.sleep(warmup)
    measuring = True
    measured_from = time.perf_counter()
    await asyncio.gather(*tasks)
    return records, lags, time.perf_counter() - measured_from


def overlapping(events: list[tuple[float, float]], start: float, end: float) -> float:
    """The time of `events` ((start, duration)) inside [start, end]."""
    total = 0.0
    for began, took in events:
        if began < end and began + took > start:
            total += min(end, began + took) - max(start, began)
    return total


def breakdown(
    records: list[tuple[str, str, float, float]],
    server: dict[str, Any],
    client_lags: list[tuple[float, float]],
) -> list[str]:
    by_key: dict[tuple[bool, str], tuple[float, float, float]] = {}
    for result, call_id, started, answered, writer in server["requests"]:
        by_key[(result, call_id)] = (started, answered, writer)
    joined = []
    for path, call_id, started, ended in records:
        found = by_key.get((path.endswith("/result"), call_id))
        if found is None:
            continue
        s_start, s_end, writer = found
        joined.append(
            {
                "total": ended - started,
                "in": s_start - started,
                "app": s_end - s_start,
                "writer": writer,
                "python": s_end - s_start - writer,
                "out": ended - s_end,
                "start": started,
                "end": ended,
            }
        )
    if not joined:
        return ["    no request matched between client and server"]
    joined.sort(key=lambda row: row["total"])
    tail = joined[int(len(joined) * 0.99) :]
    # Only what happened while the client measured (startup and shutdown collect too).
    first, last = min(r["start"] for r in joined), max(r["end"] for r in joined)
    inside = [event for event in server["gc"] if first <= event[0] <= last]
    gen2 = [(began, took) for began, took, generation, _ in inside if generation == 2]
    every_gc = [(began, took) for began, took, _, _ in inside]
    gc_cpu = [cpu for _, _, _, cpu in inside]
    lines = [f"    {len(joined)} of {len(records)} requests matched with the server's records"]
    parts = ("in", "python", "writer", "out")

    def means(rows: list[dict[str, float]]) -> str:
        shares = [f"{part} {statistics.mean(r[part] for r in rows) * 1000:.2f}" for part in parts]
        return ", ".join(shares) + f"; total {statistics.mean(r['total'] for r in rows) * 1000:.2f}"

    lines.append(f"    all requests, means ms: {means(joined)}")
    slowest = tail[0]["total"] * 1000
    lines.append(f"    slowest 1% ({len(tail)}, from {slowest:.2f} ms), means ms: {means(tail)}")
    for part in parts:
        lines.append(f"    {part:<7} {spread([r[part] for r in joined])}")
    gc_in_tail = [overlapping(every_gc, r["start"], r["end"]) for r in tail]
    lines.append(
        f"    server GC: {len(every_gc)} collections ({len(gen2)} full), pause "
        f"{spread([took for _, took in every_gc])}, full {spread([took for _, took in gen2])}; "
        f"mean GC pause inside a slowest-1% request {statistics.mean(gc_in_tail) * 1000:.2f} ms, "
        f"{sum(1 for g in gc_in_tail if g > 0.001)} of them with > 1 ms; CPU of a "
        f"collection {spread(gc_cpu)}, {sum(gc_cpu) * 1000:.0f} ms in all"
    )
    lines.append(
        f"    server heap at the first request: {server['heap'].get('tracked')} objects tracked, "
        f"{server['heap'].get('frozen')} frozen; at exit {server['heap'].get('tracked_at_exit')}"
        " tracked"
    )
    server_lags = [lag for due, lag in server["lags"] if first <= due <= last]
    lines.append(f"    server loop lag: {spread(server_lags)}")
    lines.append(f"    client loop lag: {spread([lag for _, lag in client_lags])}")
    lines.append(
        f"    writer: Sync to its answer {spread([took for _, took, _ in server['batches']])}, "
        f"{statistics.mean(size for _, _, size in server['batches']):.1f} statements a batch"
    )
    return lines


def measure(
    kind: str,
    home: Path,
    url: str,
    env: dict[str, str],
    seconds: float,
    connections: int,
    pool: list[tuple[bytes, bytes]],
    number: int,
    client_loop: str,
    tree: Path = ROOT,
) -> None:
    stats = home / f"p99-{number}-{kind}-{time.monotonic_ns()}.json"
    code = INSTRUMENTED_SERVE if kind == "agmem" else AGMEM_SERVE
    server_env = {"DATABASE_URL": url, "AGMEM_HOME": str(home), "AGMEM_BENCH_P99": str(stats)}
    with run_server(kind=kind, log_dir=home, env=server_env | env, code=code, tree=tree) as server:
        pgdata = home / "pgdata" if kind == "agmem" else None
        server_cpu, db_cpu = cpu_seconds([server.process.pid]), cpu_seconds(postgres_pids(pgdata))
        switches = context_switches(server.process.pid)
        fsyncs = wal_fsyncs(url)
        own = os.times()
        # asyncio's own loop is `bench.capture`'s; uvloop's is cheaper for the client.
        run = uvloop.run if client_loop == "uvloop" else asyncio.run
        records, client_lags, elapsed = run(drive(server.port, connections, seconds, 1.0, pool))
        own_after = os.times()
        switches_after = context_switches(server.process.pid)
        fsyncs_after = wal_fsyncs(url)
        server_cpu = cpu_seconds([server.process.pid]) - server_cpu
        db_cpu = cpu_seconds(postgres_pids(pgdata)) - db_cpu
    sent = max(1, round(len(records) * (elapsed + 1.0) / elapsed))
    latencies = [end - start for _, _, start, end in records]
    client_cpu = (own_after.user + own_after.system) - (own.user + own.system)
    count = fsyncs_after[0] - fsyncs[0]
    print(
        f"{kind:<6} {'' if tree == ROOT else f'({tree}) '}{connections} conns, client on "
        f"{client_loop}: "
        f"{len(records) / elapsed:6.0f} req/s  latency "
        f"{spread(latencies)}\n    CPU a request: server {server_cpu / sent * 1000:.3f}, "
        f"postgres {db_cpu / sent * 1000:.3f}, client {client_cpu / sent * 1000:.3f} ms; server "
        f"preempted {(switches_after[1] - switches[1]) / sent:.2f} times a request"
        + (
            f"; WAL fsyncs {count / sent:.2f} a request, "
            f"{(fsyncs_after[1] - fsyncs[1]) / max(1, count):.2f} ms each"
            if kind == "agmem"
            else ""
        ),
        flush=True,
    )
    if kind == "agmem":
        if not stats.exists():
            print("    (the server wrote no records)")
            return
        server = json.loads(stats.read_text())
        print("\n".join(breakdown(records, server, client_lags)), flush=True)
    else:
        print(f"    client loop lag: {spread([lag for _, lag in client_lags])}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", help="repeatable; default: 'default'")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--no-noop", action="store_true", help="skip the no-op peer")
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (with its .venv): its server measured after this tree's, each round",
    )
    parser.add_argument(
        "--client-loop",
        action="append",
        choices=["asyncio", "uvloop"],
        help="the client's event loop, repeatable (each measured in turn); default asyncio",
    )
    args = parser.parse_args()
    variants = args.variant or ["default"]
    loops = args.client_loop or ["asyncio"]

    from app.db.embedded import start_embedded_postgres
    from app.db.raw_pool import libpq_url

    pool = payload_pool(400)
    with scratch_folder("agmem-bench-p99-") as folder:
        home = Path(folder)
        url = start_embedded_postgres(home / "pgdata")
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute("ALTER SYSTEM SET track_wal_io_timing = on")
            connection.execute("SELECT pg_reload_conf()")
        for number in range(1, args.rounds + 1):
            for variant in variants:
                env, settings = parse_variant(variant)
                with psycopg.connect(libpq_url(url), autocommit=True) as connection:
                    connection.execute("ALTER SYSTEM RESET ALL")
                    connection.execute("ALTER SYSTEM SET track_wal_io_timing = on")
                    for statement in settings:
                        connection.execute(statement)
                    connection.execute("SELECT pg_reload_conf()")
                print(f"round {number}, {variant}", flush=True)
                for loop in loops:
                    trees = [ROOT] if args.against is None else [ROOT, args.against]
                    for tree in trees if number % 2 else trees[::-1]:  # the first alternates
                        measure(
                            "agmem", home, url, env, args.seconds, args.connections, pool,
                            number, loop, tree,
                        )  # fmt: skip
            for loop in [] if args.no_noop else loops:
                measure("noop", home, url, {}, args.seconds, args.connections, pool, number, loop)


if __name__ == "__main__":
    main()
