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

    uv run python -m bench.redact --large [--sessions 200] [--row-kb 64] [--per-session 8]
        [--memories 0] [--memory-kb 2048]

Big rows instead (the shape a review saw /health stall on): sessions with a 64 KB prompt, each
with observations of a 64 KB result, a share of them holding a secret. The worker's pass is timed
in this process (three times, the secrets planted again before each), with the event loop's lag
beside it (a 5 ms sleep's overshoot: how long a turn of the loop waited behind the pass). Then a
real `agmem serve` (with its worker) is started on the database: its start-up pass runs while
/health is asked every 20 ms, and the answers' latencies during the pass and after it are
printed. With --memories, kv memories of --memory-kb of JSON (small dicts, stored compressed)
besides. Runs against the `app` it imports: with another tree's on PYTHONPATH, that tree's code
(its serve too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psycopg

import app
from app.db.engine import make_async_engine, make_sessionmaker
from app.redaction import RedactReport, redact_stored
from app.textscan import compile_all
from app.worker.rescan import rescan_if_pending
from bench.db import bench_database, libpq
from bench.search import PROJECT, load_postgres, synthetic_chunks
from bench.serve import free_port

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


def load_large(url: str, sessions: int, per_session: int, row_bytes: int, share: float) -> int:
    """Sessions with a `row_bytes` prompt, each with `per_session` observations of a
    `row_bytes` result (text cut from bench.search's chunks), `share` of them with a secret."""
    rng = random.Random(7)
    corpus = " ".join(row[2] for row in synthetic_chunks(20_000, 7))

    def text(n: int) -> tuple[str, bool]:
        start = rng.randrange(len(corpus) - row_bytes)
        body = corpus[start : start + row_bytes]
        if rng.random() >= share:
            return body, False
        secret = SECRET.format(n=n)
        middle = row_bytes // 2
        return body[:middle] + secret + body[middle + len(secret) :], True

    planted = 0
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        with conn.cursor().copy(
            "COPY sessions (id, project_path, status, user_prompt) FROM STDIN"
        ) as copy:
            for s in range(sessions):
                prompt, secret = text(s)
                planted += secret
                copy.write_row((f"s{s:05}", PROJECT, "completed", prompt))
        with conn.cursor().copy(
            "COPY observations (id, session_id, project_path, function_name, function_args, "
            "result, observation_type) FROM STDIN"
        ) as copy:
            for s in range(sessions):
                for o in range(per_session):
                    result, secret = text(s * per_session + o)
                    planted += secret
                    args = json.dumps({"path": f"src/file{o}.py"})
                    row = (f"o{s:05}-{o}", f"s{s:05}", PROJECT, "read_file", args)
                    copy.write_row((*row, json.dumps(result), "file_read"))
        conn.execute("VACUUM ANALYZE sessions")
        conn.execute("VACUUM ANALYZE observations")
        conn.execute("UPDATE redaction_state SET rules = 'before-upgrade', generation = NULL")
    return planted


def load_memories(url: str, count: int, value_bytes: int) -> int:
    """`count` kv memories whose value is `value_bytes` of JSON text: small dicts, which the
    column stores compressed (the shape a review saw stall the loop), one a secret. Returns
    their stored size in bytes, each."""
    items = value_bytes // 40  # ~40 bytes of text a dict
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        for n in range(count):
            value: list[object] = [{"n": i, "note": "ok", "done": i % 2 == 0} for i in range(items)]
            value.insert(items // 2, {"note": SECRET.format(n=n)})
            conn.execute(
                "INSERT INTO memories (scope, project_path, key, value, created_by) "
                "VALUES ('project', %s, %s, %s, 'bench')",
                (PROJECT, f"big{n:03}", json.dumps(value)),
            )
        conn.execute("VACUUM ANALYZE memories")
        row = conn.execute("SELECT avg(pg_column_size(value))::int FROM memories").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def replant_large(url: str) -> None:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        columns = (("sessions", "user_prompt"), ("observations", "result"), ("memories", "value"))
        for table, column in columns:
            conn.execute(
                f"UPDATE {table} SET {column} = replace({column}::text, "
                f"'password: [REDACTED]', 'password: hunter2-'){'::jsonb' * (table != 'sessions')} "
                f"WHERE {column}::text LIKE '%password: [REDACTED]%'"
            )
        conn.execute("UPDATE redaction_state SET rules = 'before-upgrade', generation = NULL")


def _quantiles(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "no samples"
    p50, p99 = values[len(values) // 2], values[len(values) * 99 // 100]
    return (
        f"p50 {p50 * 1e3:.1f}, p99 {p99 * 1e3:.1f}, max {values[-1] * 1e3:.1f} ms "
        f"({len(values)} samples)"
    )


def serve_side(url: str, port: int) -> None:
    """A real `agmem serve` (API and worker) starting on pending rows: /health during its pass."""
    root = Path(app.__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="agmem-bench-redact-") as home:
        env = {
            **os.environ,
            "AGMEM_HOME": home,
            "DATABASE_URL": url,
            "AGMEM_LOG_LEVEL": "warning",
            "PYTHONPATH": str(root),
        }
        env.pop("GEMINI_API_KEY", None)
        argv = [sys.executable, "-c", "from app.cli import main; main()", "serve"]
        argv += ["--host", "127.0.0.1", "--port", str(port)]
        log = Path(home) / "serve.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=out)
        during: list[float] = []
        after: list[float] = []
        done, stop = threading.Event(), threading.Event()
        pass_started = pass_ended = 0.0
        try:
            with psycopg.connect(libpq(url), autocommit=True) as conn:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and process.poll() is None:
                    if _health(port) is not None:
                        break
                    time.sleep(0.05)
                poller = threading.Thread(
                    target=_poll_health, args=(port, during, after, done, stop), daemon=True
                )
                poller.start()
                while time.monotonic() < deadline and process.poll() is None:
                    state = conn.execute(
                        "SELECT rules <> 'before-upgrade', claimed_by IS NOT NULL "
                        "FROM redaction_state"
                    ).fetchone()
                    assert state is not None
                    if state[1] and not pass_started:
                        pass_started = time.monotonic()
                    if state[0]:
                        pass_ended = time.monotonic()
                        break
                    time.sleep(0.02)
                done.set()
                time.sleep(3)
                stop.set()
                poller.join()
        finally:
            process.terminate()
            process.wait(timeout=30)
        if not pass_ended:
            raise RuntimeError(f"the pass did not end:\n{log.read_text()[-3000:]}")
        seen = f"{pass_ended - pass_started:.2f} s" if pass_started else "(already claimed)"
        print(f"serve's pass seen running for {seen}")
        print(f"/health during the pass: {_quantiles(during)}")
        print(f"/health for 3 s after it: {_quantiles(after)}")


def _health(port: int) -> float | None:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            response.read()
    except OSError:
        return None
    return time.perf_counter() - started


def _poll_health(
    port: int, during: list[float], after: list[float], done: threading.Event, stop: threading.Event
) -> None:
    while not stop.is_set():
        took = _health(port)
        if took is not None:
            (after if done.is_set() else during).append(took)
        time.sleep(0.02)


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
        if not polls:
            return
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
    parser.add_argument("--large", action="store_true", help="big rows, and a real serve")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--per-session", type=int, default=8)
    parser.add_argument("--row-kb", type=int, default=64)
    parser.add_argument("--memories", type=int, default=0, help="kv memories of --memory-kb JSON")
    parser.add_argument("--memory-kb", type=int, default=2048)
    parser.add_argument("--port", type=int, default=0, help="serve's (default: a free one)")
    parser.add_argument("--passes", type=int, default=3, help="the worker's, before serve's")
    args = parser.parse_args()
    if args.large:
        large(args)
        return
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


def large(args: argparse.Namespace) -> None:
    with bench_database("agmem_bench_redact") as url:
        started = time.perf_counter()
        row_bytes = args.row_kb * 1024
        planted = load_large(url, args.sessions, args.per_session, row_bytes, args.secret_share)
        rows = args.sessions * (1 + args.per_session)
        # As `agmem serve` does before it answers: the scanners' first use compiles them (~70 ms).
        compile_all()
        print(
            f"loaded {args.sessions} sessions with {args.per_session} observations each, "
            f"{rows} rows of {args.row_kb} KB, {planted} with a secret, "
            f"in {time.perf_counter() - started:.1f} s"
        )
        if args.memories:
            stored = load_memories(url, args.memories, args.memory_kb * 1024)
            print(
                f"and {args.memories} kv memories of {args.memory_kb} KB of JSON "
                f"({stored // 1024} KB stored each), each with a secret"
            )
        for _ in range(args.passes):
            asyncio.run(worker_side(url, 0))
            replant_large(url)
        serve_side(url, args.port or free_port())


if __name__ == "__main__":
    main()
