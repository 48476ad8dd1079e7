"""Live work during the first upkeep after an upgrade, which ends every stale `active` session.

Seeds `--stale` sessions idle for 7 hours (each with `--calls` compressed calls, so that each
summary goes to Gemini), starts one worker (4 lanes, the default Gemini rate: 60 calls a minute,
4 at once) against the fake Gemini answering after `--latency-ms`, and, while its first upkeep's
idle ends are being summarised, runs a live session: a call every `--every` seconds (large
enough for Gemini), then its end. Prints how long the live calls waited for their compression,
how long the live session waited for its summary, and how many stale summaries were written.

    uv run python -m bench.idle_burst [--stale 2000] [--live 20] [--timeout 120]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from app.config import Settings, load_settings
from app.db import migrate
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from bench.worker import answer_after, make_worker
from tests.fakes.gemini import fake_gemini
from tests.postgres import choose_kind, create_database, drop_database, start_server

RESULT = "\n".join(f"line {n}: def handler_{n}(request): return respond()" for n in range(40))


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _seed(db: psycopg.Connection[Any], stale: int, calls: int) -> None:
    db.execute("TRUNCATE sessions, observations, memory_chunks, llm_usage CASCADE")
    old = "now() - interval '7 hours'"
    db.execute(
        "INSERT INTO sessions (id, project_path, status, user_prompt, created_at, "
        f"last_activity_at) SELECT 'old' || n, '/bench', 'active', 'fix bug ' || n, {old}, {old} "
        "FROM generate_series(1, %s) n",
        (stale,),
    )
    db.execute(
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "result, observation_type, status, compressed_data, generated_by, result_at, created_at) "
        "SELECT 'old' || n || '-' || k, 'old' || n, '/bench', 'read_file', "
        "jsonb_build_object('path', 'src/m' || k || '.py'), to_jsonb('ok'::text), 'file_read', "
        "'compressed', 'Learned: module ' || k || ' handles requests', 'gemini:x', "
        f"{old}, {old} FROM generate_series(1, %s) n, generate_series(1, %s) k",
        (stale, calls),
    )


def _live(db: psycopg.Connection[Any], count: int, every: float) -> None:
    """A live session's calls, as capture writes them (captured with their result), then its end."""
    db.execute("INSERT INTO sessions (id, project_path) VALUES ('live', '/bench')")
    for n in range(count):
        db.execute(
            "INSERT INTO observations (id, session_id, project_path, function_name, "
            "function_args, result, observation_type, status, result_at, next_attempt_at) "
            "VALUES (%s, 'live', '/bench', 'read_file', %s, %s, 'file_read', 'captured', now(), "
            "now())",
            (f"live{n}", json.dumps({"path": f"src/live{n}.py"}), json.dumps(f"{n}\n{RESULT}")),
        )
        time.sleep(every)
    db.execute(
        "UPDATE sessions SET status = 'ending', ended_at = now(), last_activity_at = now(), "
        "next_attempt_at = now() WHERE id = 'live'"
    )


async def _run(settings: Settings, url: str, args: argparse.Namespace) -> dict[str, Any]:
    engine, worker = make_worker(settings, url, concurrency=4)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    started = time.monotonic()
    try:
        with psycopg.connect(_libpq(url), autocommit=True) as db:
            await asyncio.sleep(args.warmup)  # the first upkeep has ended the stale sessions
            await asyncio.to_thread(_live, db, args.live, args.every)
            while time.monotonic() - started < args.timeout:
                if db.execute("SELECT status FROM sessions WHERE id = 'live'").fetchone() == (
                    "summarized",
                ):
                    break
                await asyncio.sleep(0.1)
            live = db.execute(
                "SELECT extract(epoch FROM compressed_at - created_at) FROM observations "
                "WHERE session_id = 'live' AND compressed_at IS NOT NULL"
            ).fetchall()
            summary = db.execute(
                "SELECT extract(epoch FROM summarized_at - ended_at), status, (SELECT count(*) "
                "FROM sessions WHERE status = 'ending' AND id <> 'live') FROM sessions "
                "WHERE id = 'live'"
            ).fetchone()
            stale = db.execute(
                "SELECT count(*) FILTER (WHERE status = 'summarized'), "
                "count(*) FILTER (WHERE status = 'ending') FROM sessions WHERE id <> 'live'"
            ).fetchone()
    finally:
        stop.set()
        await running
        await engine.dispose()
    assert summary is not None
    assert stale is not None
    waits = sorted(float(r[0]) for r in live)
    return {
        "live_compressed": f"{len(waits)}/{args.live}",
        "live_wait_median_s": round(statistics.median(waits), 2) if waits else None,
        "live_wait_max_s": round(waits[-1], 2) if waits else None,
        "live_summary_wait_s": None if summary[0] is None else round(float(summary[0]), 2),
        "stale_summarized": stale[0],
        "stale_queued": stale[1],
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stale", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=8, help="compressed calls per stale session")
    parser.add_argument("--live", type=int, default=20, help="calls of the live session")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between live calls")
    parser.add_argument("--latency-ms", type=int, default=300)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    configure_logging("warning")
    local_embedder()

    with start_server(choose_kind()) as server:
        url = create_database(server, prefix="agmem_bench")
        try:
            migrate.upgrade(url)
            with fake_gemini() as fake:
                fake.on(
                    ":generateContent",
                    answer_after("The session fixed a bug.", args.latency_ms, 30),
                )
                settings = load_settings(
                    database_url=None,
                    gemini_api_key="bench",
                    gemini_base_url=fake.url,
                    _env_file=None,
                )
                with psycopg.connect(_libpq(url), autocommit=True) as db:
                    _seed(db, args.stale, args.calls)
                outcome = asyncio.run(_run(settings, url, args))
                outcome["gemini_calls"] = len(fake.calls(":generateContent"))
            print(json.dumps(outcome))
        finally:
            drop_database(server, url)


if __name__ == "__main__":
    main()
