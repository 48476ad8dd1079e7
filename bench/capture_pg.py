"""Postgres's CPU per capture request, without HTTP: the benchmark's pairs replayed in process.

    uv run python -m bench.capture_pg                  # 3 rounds of 16 clients x 80 pairs
    uv run python -m bench.capture_pg --rounds 5 --pairs 120
    uv run python -m bench.capture_pg --perf pg.data   # also `perf record` Postgres's processes

Sends the `bench.capture` payload pool's observe/result pairs through the capture services and
the real group-commit writer, from 16 concurrent clients, to a fresh embedded PostgreSQL, and
prints per round the CPU of that server's processes per request (from /proc), this process's
CPU per request (services and writer, no HTTP), the observations table's update and HOT update
counts (Postgres's statistics, which lag by up to a second) and the WAL written so far. The
Postgres figure moves far less with the machine's load than the HTTP benchmark's rates: run it
on two commits alternately to compare a change to the SQL, the schema or the writer. With
--perf, `perf record -e cpu-clock --call-graph dwarf` samples the server's processes during the
last round (perf must be installed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.capture import cpu_seconds, payload_pool, postgres_pids
from bench.scratch import scratch_folder

CLIENTS = 16


@contextlib.contextmanager
def perf_record(output: str | None, pids: list[int]) -> Iterator[None]:
    if output is None:
        yield
        return
    command = ["perf", "record", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384"]
    process = subprocess.Popen(
        [*command, "-o", output, "-p", ",".join(map(str, pids))], stderr=subprocess.DEVNULL
    )
    time.sleep(1.0)  # perf attaches before the round starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait()


async def open_writer(url: str) -> tuple[Any, Any, list[str]]:
    """The capture pool and GroupWriter as the app sets them up, and CLIENTS new sessions."""
    from app.capture.db import GroupWriter, make_capture_pool
    from app.config import Settings
    from app.db.raw_pool import libpq_url

    settings = Settings(database_url=url)
    raw = make_capture_pool(url, pool_size=settings.capture_writers)
    await raw.open(wait=True)
    writer = GroupWriter(
        raw, writers=settings.capture_writers, max_batch=settings.capture_batch_max
    )
    sessions = [uuid.uuid4().hex for _ in range(CLIENTS)]
    with psycopg.connect(libpq_url(url), autocommit=True) as admin:
        for session in sessions:
            admin.execute(
                "INSERT INTO sessions (id, project_path) VALUES (%s, '/bench/project')", (session,)
            )
    return raw, writer, sessions


async def replay(url: str, pgdata: Path, rounds: int, pairs: int, perf: str | None) -> None:
    from app.capture import service
    from app.capture.schemas import ObserveIn, ObserveResultIn
    from app.config import Settings
    from app.db.raw_pool import libpq_url

    settings = Settings(database_url=url)
    pool = payload_pool(400)
    raw, writer, sessions = await open_writer(url)

    def bodies(number: int, count: int, seed: int) -> list[tuple[ObserveIn, ObserveResultIn]]:
        rng = random.Random(seed * 1000 + number)
        session = sessions[number].encode()
        out = []
        for _ in range(count):
            args, result = pool[rng.randrange(len(pool))]
            call = uuid.uuid4().hex.encode()
            head = b'{"sessionId":"%s","functionName":"write_file",' % session
            out.append(
                (
                    ObserveIn.model_validate_json(
                        head + b'"id":"%s","functionArgs":%s}' % (call, args)
                    ),
                    ObserveResultIn.model_validate_json(
                        head + b'"observationId":"%s","result":%s}' % (call, result)
                    ),
                )
            )
        return out

    async def client(work: list[tuple[ObserveIn, ObserveResultIn]]) -> None:
        for observe, result in work:
            await service.record_observation(writer, data=observe, settings=settings)
            _, created = await service.record_result(writer, data=result, settings=settings)
            if created:
                raise RuntimeError("a result did not match its call")

    try:
        await asyncio.gather(*(client(bodies(n, 10, 0)) for n in range(CLIENTS)))  # warm-up
        requests = CLIENTS * pairs * 2
        for number in range(1, rounds + 1):
            work = [bodies(n, pairs, number) for n in range(CLIENTS)]
            pids = postgres_pids(pgdata)
            with perf_record(perf if number == rounds else None, pids):
                server, own = cpu_seconds(pids), time.process_time()
                await asyncio.gather(*(client(w) for w in work))
                server, own = cpu_seconds(pids) - server, time.process_time() - own
            with psycopg.connect(libpq_url(url), autocommit=True) as admin:
                hot = admin.execute(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relname = 'observations'"
                ).fetchone()
                wal = admin.execute("SELECT wal_bytes::float8 FROM pg_stat_wal").fetchone()
            print(
                f"round {number}: postgres {server / requests * 1000:.3f} ms CPU a request, "
                f"this process {own / requests * 1000:.3f} ms; observations updated "
                f"{hot[0] if hot else '?'}, HOT {hot[1] if hot else '?'}; "
                f"WAL {wal[0] / 1e6 if wal else 0:.1f} MB so far",
                flush=True,
            )
    finally:
        await writer.close()
        await raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=80, help="observe/result pairs per client")
    parser.add_argument("--perf", help="perf.data file to record Postgres's last round into")
    args = parser.parse_args()

    from app.db import migrate
    from app.db.embedded import start_embedded_postgres
    from app.logs import configure_logging

    configure_logging("warning")
    with scratch_folder("agmem-bench-capture-pg-") as d:
        pgdata = Path(d) / "pgdata"
        url = start_embedded_postgres(pgdata, cleanup_mode="stop")
        migrate.upgrade(url)
        asyncio.run(replay(url, pgdata, args.rounds, args.pairs, args.perf))


if __name__ == "__main__":
    main()
