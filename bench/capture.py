"""Capture throughput and latency: `agmem serve` on embedded Postgres vs a no-op FastAPI endpoint.

    uv run python -m bench.capture            # full: 16 and 64 connections, 15 s each
    uv run python -m bench.capture --quick    # 5 s each, for a busy machine
    uv run python -m bench.capture --quick --rounds 3   # alternate no-op and capture 3 times
    uv run python -m bench.capture --paced-rate 600     # the paced run offers 600 req/s

Each connection owns a session and loops over pairs: POST /api/observe (a tool call with 1-20 KB
of arguments), then POST /api/observe/result (1-20 KB of output) for that call. Payloads are cut
from the real agent files in the shared test data. The client is a minimal keep-alive HTTP/1.1
client on asyncio, so that the load generator costs as little CPU as possible on a 2-core box.
Both servers are measured one at a time (with --rounds, alternately), with the same uvicorn settings
as `agmem serve`.

The closed loop (each connection sends its next request as soon as the last is answered) gives
the throughput and the issue's p99. After it, a separate open-loop ("paced") measurement sends
at a fixed offered rate, the same for both servers (default: half the no-op's closed-loop
throughput at 16 connections in this run; `--paced-rate R` to choose it, 0 to skip): each of 16
connections sends on its own fixed schedule, and a request's latency counts from the moment the
schedule said to send it, so a request held back behind a slow answer is counted as late.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scratch import scratch_folder
from bench.serve import ROOT, ServerProcess, run_server

TESTDATA_CANDIDATES = (ROOT.parent.parent / "shared" / "testdata", Path("/work/shared/testdata"))
GOAL_RATIO = 0.5
GOAL_P99_MS = 10.0
PACED_CONNECTIONS = 16
PACED_SHARE = 0.5  # the default offered rate: this share of the no-op's closed-loop throughput


def corpus() -> str:
    for folder in TESTDATA_CANDIDATES:
        if folder.exists():
            files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".json")
            return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)
    return ("def handler(event):\n    return process(event)  # sample line of code\n") * 2000


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def payload_pool(count: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """(arguments JSON, result JSON) fragments of 1-20 KB each, cut from real agent text."""
    text = corpus()
    rng = random.Random(seed)
    pool = []
    for index in range(count):
        size = rng.randint(1_000, 20_000)
        start = rng.randint(0, max(0, len(text) - size))
        args = {"file_path": f"src/module_{index}.py", "content": text[start : start + size]}
        size = rng.randint(1_000, 20_000)
        start = rng.randint(0, max(0, len(text) - size))
        pool.append((dumps(args), dumps(text[start : start + size])))
    return pool


class Connection:
    """One keep-alive HTTP/1.1 connection: POST a JSON body, read status and body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    requests: int = 0


async def drive(
    port: int,
    connections: int,
    seconds: float,
    warmup: float,
    pool: list[tuple[bytes, bytes]],
    rate: float | None = None,
) -> tuple[Run, float]:
    """Send observe + result pairs from `connections` clients; measure after a warm-up.

    Closed loop by default. With `rate` (requests per second, all connections together), open
    loop: connection n sends its k-th request at start + (n / connections + k) * connections /
    rate, and the latency counts from that moment (not from when the previous answer freed
    the connection), so that a slow answer is not hidden by the requests it delayed.
    """
    sessions = []
    setup = await Connection.open(port)
    for _ in range(connections):
        body = json.dumps({"projectPath": "/bench/project", "id": uuid.uuid4().hex}).encode()
        status, answer = await setup.post("/api/session/start", body)
        sessions.append(json.loads(answer)["id"] if status in (200, 201) else "noop")
    setup.close()

    run = Run()
    measuring = False
    stop_at = time.perf_counter() + warmup + seconds

    interval = connections / rate if rate else 0.0
    schedule_start = time.perf_counter()

    async def client(number: int) -> None:
        connection = await Connection.open(port)
        rng = random.Random(number)
        session = sessions[number].encode()
        due = schedule_start + interval * number / connections
        try:
            while time.perf_counter() < stop_at:
                args, result = pool[rng.randrange(len(pool))]
                call_id = uuid.uuid4().hex.encode()
                observe = (
                    b'{"sessionId":"'
                    + session
                    + b'","id":"'
                    + call_id
                    + b'","functionName":"write_file","functionArgs":'
                    + args
                    + b"}"
                )
                answer = (
                    b'{"sessionId":"'
                    + session
                    + b'","observationId":"'
                    + call_id
                    + b'","functionName":"write_file","result":'
                    + result
                    + b"}"
                )
                for path, body in (("/api/observe", observe), ("/api/observe/result", answer)):
                    started = time.perf_counter()
                    if rate:
                        if due > started:
                            await asyncio.sleep(due - started)
                        started = due
                        due += interval
                    status, _ = await connection.post(path, body)
                    if measuring:
                        run.latencies.append(time.perf_counter() - started)
                        run.requests += 1
                        if status >= 300:
                            run.errors += 1
        finally:
            connection.close()

    tasks = [asyncio.create_task(client(number)) for number in range(connections)]
    await asyncio.sleep(warmup)
    measuring = True
    measured_from = time.perf_counter()
    await asyncio.gather(*tasks)
    return run, time.perf_counter() - measured_from


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes so far, from /proc (Linux)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def postgres_pids(pgdata: Path | None) -> list[int]:
    """The postmaster of `pgdata` and its children (the backends serving the benchmark)."""
    if pgdata is None or not (pgdata / "postmaster.pid").exists():
        return []
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                pids.append(int(entry.name))
    return pids


@dataclass
class Figures:
    label: str
    connections: int
    throughput: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms: float  # per request, the server process
    db_cpu_ms: float  # per request, the Postgres processes
    steal: float = 0.0  # share of the machine's CPU time the hypervisor took during the run

    def line(self) -> str:
        cpu = f"  CPU/req: server {self.server_cpu_ms:.2f} ms"
        if self.db_cpu_ms:
            cpu += f", postgres {self.db_cpu_ms:.2f} ms"
        return (
            f"{self.label:<13} {self.connections:>3} conns  {self.throughput:8.0f} req/s  "
            f"p50 {self.p50_ms:6.2f} ms  p99 {self.p99_ms:7.2f} ms  errors {self.errors}{cpu}"
            f"  steal {self.steal:.0%}"
        )


def cpu_ticks() -> tuple[int, int]:
    """(all CPU ticks, stolen ticks) of the machine so far, from /proc/stat (Linux).

    On a virtual machine the hypervisor can take CPU time away ("steal"); on this one it reached
    40% in some runs, and latency tails grew with it, so every figure is printed with it.
    """
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[7]


def measure(
    server: ServerProcess,
    label: str,
    levels: list[int],
    seconds: float,
    warmup: float,
    pool: list[tuple[bytes, bytes]],
    pgdata: Path | None = None,
    rate: float | None = None,
) -> list[Figures]:
    results = []
    for connections in levels:
        server_before = cpu_seconds([server.process.pid])
        db_before = cpu_seconds(postgres_pids(pgdata))
        ticks_before, stolen_before = cpu_ticks()
        run, elapsed = asyncio.run(drive(server.port, connections, seconds, warmup, pool, rate))
        ticks_after, stolen_after = cpu_ticks()
        # CPU is counted over warm-up and measurement alike, so divide by every request sent.
        sent = max(1, round(run.requests * (elapsed + warmup) / elapsed))
        server_cpu = cpu_seconds([server.process.pid]) - server_before
        db_cpu = cpu_seconds(postgres_pids(pgdata)) - db_before if pgdata else 0.0
        ordered = sorted(run.latencies) or [0.0]
        result = Figures(
            label,
            connections,
            run.requests / elapsed,
            statistics.median(ordered) * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
            run.errors,
            server_cpu / sent * 1000,
            db_cpu / sent * 1000,
            (stolen_after - stolen_before) / max(1, ticks_after - ticks_before),
        )
        print(result.line(), flush=True)
        results.append(result)
    return results


def database_facts(url: str) -> dict[str, Any]:
    import psycopg
    from sqlalchemy.engine import make_url

    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as connection:
        fsync = connection.execute("SHOW fsync").fetchone()
        synchronous = connection.execute("SHOW synchronous_commit").fetchone()
        rows = connection.execute("SELECT count(*) FROM observations").fetchone()
    return {
        "fsync": fsync[0] if fsync else "?",
        "synchronous_commit": synchronous[0] if synchronous else "?",
        "observations": rows[0] if rows else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s per level instead of 15 s")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--levels", default="16,64", help="connection counts, comma-separated")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate the two servers level by level this many times; ratios are medians",
    )
    parser.add_argument(
        "--paced-rate",
        type=float,
        default=None,
        help=(
            "offered rate (req/s) of the open-loop measurement at 16 connections, run after the "
            # argparse formats help with %: the percent sign is written twice.
            f"closed loop on both servers; default {PACED_SHARE:.0%}% of the no-op's closed-loop "
            "throughput at 16 connections (or at the first level); 0 skips it"
        ),
    )
    args = parser.parse_args()
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    warmup = 1.0 if args.quick else 3.0
    levels = [int(part) for part in args.levels.split(",")]
    pool = payload_pool(400)
    sizes = [len(a) + len(r) for a, r in pool]
    print(
        f"payloads: {len(pool)} pairs, args+result {min(sizes)}-{max(sizes)} bytes, "
        f"{seconds:.0f} s per level after {warmup:.0f} s warm-up",
        flush=True,
    )

    from app.db.embedded import start_embedded_postgres

    with scratch_folder("agmem-bench-") as folder:
        home = Path(folder)
        url = start_embedded_postgres(home / "pgdata")
        env = {"DATABASE_URL": url, "AGMEM_HOME": str(home)}
        paced: tuple[float, Figures, Figures] | None = None
        if args.rounds == 1:
            with run_server(kind="noop", log_dir=home) as server:
                noop = measure(server, "no-op", levels, seconds, warmup, pool)
                rate = paced_rate(args.paced_rate, [noop])
                if rate:
                    (noop_paced,) = measure(
                        server, "paced no-op", [PACED_CONNECTIONS], seconds, warmup, pool,
                        rate=rate,
                    )  # fmt: skip
            with run_server(kind="agmem", log_dir=home, env=env) as server:
                capture = measure(server, "capture", levels, seconds, warmup, pool, home / "pgdata")
                if rate:
                    (capture_paced,) = measure(
                        server, "paced capture", [PACED_CONNECTIONS], seconds, warmup, pool,
                        home / "pgdata", rate,
                    )  # fmt: skip
                    paced = (rate, noop_paced, capture_paced)
            pairs = [list(zip(noop, capture, strict=True))]
        else:
            pairs, paced = alternate(
                home, env, levels, seconds, warmup, pool, args.rounds, args.paced_rate
            )
        facts = database_facts(url)

    print(
        f"database: embedded PostgreSQL, fsync={facts['fsync']}, "
        f"synchronous_commit={facts['synchronous_commit']}, {facts['observations']} rows written"
    )
    for level in range(len(levels)):
        level_pairs = [round_pairs[level] for round_pairs in pairs]
        ratios = [
            ours.throughput / peer.throughput if peer.throughput else 0.0
            for peer, ours in level_pairs
        ]
        ratio = statistics.median(ratios)
        ours = level_pairs[0][1]
        p99 = statistics.median(ours.p99_ms for _, ours in level_pairs)
        verdict = []
        verdict.append("ratio ok" if ratio >= GOAL_RATIO else f"ratio below {GOAL_RATIO:.0%}")
        if ours.connections == 16:
            verdict.append("p99 ok" if p99 < GOAL_P99_MS else f"p99 over {GOAL_P99_MS} ms")
        rounds = f" (median of {len(ratios)} rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
        print(
            f"ratio at {ours.connections} conns: capture/no-op throughput = {ratio:.2f} "
            f"({', '.join(verdict)}){rounds if len(ratios) > 1 else ''}"
        )
    if paced is not None:
        rate, peer, ours = paced
        print(
            f"paced (open loop, a separate measurement; the goal's p99 is the closed loop's) at "
            f"{rate:.0f} req/s offered over {PACED_CONNECTIONS} conns: capture p50 "
            f"{ours.p50_ms:.2f} / p99 {ours.p99_ms:.2f} ms ({ours.throughput:.0f} req/s served), "
            f"no-op p50 {peer.p50_ms:.2f} / p99 {peer.p99_ms:.2f} ms "
            f"({peer.throughput:.0f} req/s served)"
        )


def paced_rate(requested: float | None, noop_runs: list[list[Figures]]) -> float:
    """The paced run's offered rate: as requested, else a share of the no-op's closed-loop
    throughput at 16 connections (the median over rounds; the first level if 16 was not run)."""
    if requested is not None:
        rate = max(0.0, requested)
        print(f"paced rate: {rate:.0f} req/s (--paced-rate)", flush=True)
        return rate
    at = [next((f for f in run if f.connections == PACED_CONNECTIONS), run[0]) for run in noop_runs]
    measured = statistics.median(f.throughput for f in at)
    rate = measured * PACED_SHARE
    print(
        f"paced rate: {rate:.0f} req/s = {PACED_SHARE:.0%} of the no-op's closed-loop "
        f"{measured:.0f} req/s at {at[0].connections} conns",
        flush=True,
    )
    return rate


def alternate(
    home: Path,
    env: dict[str, str],
    levels: list[int],
    seconds: float,
    warmup: float,
    pool: list[tuple[bytes, bytes]],
    rounds: int,
    requested_rate: float | None,
) -> tuple[list[list[tuple[Figures, Figures]]], tuple[float, Figures, Figures] | None]:
    """Both servers up (an idle one costs nothing); each round measures the no-op and then
    capture at each level, so a change in the other agents' load hits both sides of a ratio
    alike instead of one whole server's run. The paced run follows the rounds."""
    result = []
    paced = None
    with (
        run_server(kind="noop", log_dir=home) as noop_server,
        run_server(kind="agmem", log_dir=home, env=env) as capture_server,
    ):
        for number in range(1, rounds + 1):
            print(f"round {number}", flush=True)
            pairs = []
            for level in levels:
                (peer,) = measure(noop_server, "no-op", [level], seconds, warmup, pool)
                (ours,) = measure(
                    capture_server, "capture", [level], seconds, warmup, pool, home / "pgdata"
                )
                pairs.append((peer, ours))
            result.append(pairs)
        rate = paced_rate(requested_rate, [[peer for peer, _ in pairs] for pairs in result])
        if rate:
            (peer,) = measure(
                noop_server, "paced no-op", [PACED_CONNECTIONS], seconds, warmup, pool, rate=rate
            )
            (ours,) = measure(
                capture_server, "paced capture", [PACED_CONNECTIONS], seconds, warmup, pool,
                home / "pgdata", rate,
            )  # fmt: skip
            paced = (rate, peer, ours)
    return result, paced


if __name__ == "__main__":
    main()
