"""Worker throughput (observations/s): the extractive fallback, and the fake Gemini answering
after a fixed 300 ms, at several concurrencies, to show that concurrency hides latency.

    uv run python -m bench.worker [--observations N] [--latency-ms 300]

Each run inserts N captured observations into a fresh, migrated database (embedded PostgreSQL
unless TEST_DATABASE_URL is set), then times one worker draining them: claim, compress, write
the index row and embed it (local wordllama).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import psycopg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config import Settings, load_settings
from app.db import migrate
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from app.worker.loop import Worker
from tests.fakes.gemini import FakeResponse, Responder, fake_gemini, text_answer
from tests.postgres import choose_kind, create_database, drop_database, start_server

RESULT = "\n".join(
    f"line {n}: def handler_{n}(request): return respond(request, {n})" for n in range(60)
)


def _settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": None,
        "gemini_api_key": None,
        "gemini_base_url": None,
        "gemini_requests_per_minute": 100_000,
        "gemini_max_concurrent": 64,
        "_env_file": None,
    }
    base.update(overrides)
    return load_settings(**base)


def _seed(url: str, count: int) -> None:
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute("TRUNCATE sessions, observations, memory_chunks, llm_usage CASCADE")
        db.execute("INSERT INTO sessions (id, project_path) VALUES ('bench', '/bench')")
        with db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO observations (id, session_id, project_path, function_name, "
                "function_args, result, observation_type, status, result_at) "
                "VALUES (%s, 'bench', '/bench', 'read_file', %s, %s, 'file_read', 'captured', "
                "now())",
                [
                    (f"o{n}", json.dumps({"path": f"src/m{n}.py"}), json.dumps(f"{n}\n{RESULT}"))
                    for n in range(count)
                ],
            )


def make_worker(settings: Settings, url: str, concurrency: int) -> tuple[AsyncEngine, Worker]:
    """A worker with the local embedder, on an engine of its own (the caller disposes of it)."""
    engine = make_async_engine(url, pool_size=concurrency + 4)
    worker = Worker(
        settings=settings,
        sessionmaker=make_sessionmaker(engine),
        database_url=url,
        concurrency=concurrency,
        embedder=local_embedder(),
    )
    return engine, worker


def answer_after(text: str, latency_ms: int, output_tokens: int) -> Responder:
    """The fake Gemini's answer, `latency_ms` after each request."""
    answer = text_answer(text, output_tokens=output_tokens)
    return lambda _request: FakeResponse(body=answer, delay_s=latency_ms / 1000)


async def _drain(settings: Settings, url: str, concurrency: int) -> float:
    engine, worker = make_worker(settings, url, concurrency)
    try:
        started = time.perf_counter()
        await worker.drain()
        return time.perf_counter() - started
    finally:
        await engine.dispose()


def _run(settings: Settings, url: str, count: int, concurrency: int) -> float:
    _seed(url, count)
    seconds = asyncio.run(_drain(settings, url, concurrency))
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observations", type=int, default=200)
    parser.add_argument("--gemini-observations", type=int, default=96)
    parser.add_argument("--latency-ms", type=int, default=300)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    configure_logging("warning")
    local_embedder()  # loaded once, outside the timings

    with start_server(choose_kind()) as server:
        url = create_database(server, prefix="agmem_bench")
        try:
            migrate.upgrade(url)
            print(f"worker throughput, {args.observations} observations (extractive fallback)")
            for concurrency in args.concurrency:
                rate = _run(_settings(), url, args.observations, concurrency)
                print(f"  fallback        concurrency {concurrency:>2}: {rate:8.1f} obs/s")
            print(
                f"worker throughput, {args.gemini_observations} observations "
                f"(fake Gemini, {args.latency_ms} ms per call)"
            )
            rates: dict[int, float] = {}
            with fake_gemini() as fake:
                fake.on(
                    ":generateContent",
                    answer_after("Learned: handler returns respond()", args.latency_ms, 12),
                )
                gemini = _settings(gemini_api_key="bench", gemini_base_url=fake.url)
                for concurrency in args.concurrency:
                    rates[concurrency] = _run(gemini, url, args.gemini_observations, concurrency)
                    print(
                        f"  gemini (fake)   concurrency {concurrency:>2}: "
                        f"{rates[concurrency]:8.1f} obs/s"
                    )
            bound = 1000 / args.latency_ms
            low, high = min(rates), max(rates)
            print(f"  one call at a time is bounded by {bound:.2f} obs/s at this latency")
            print(f"  concurrency {high} vs {low}: {rates[high] / rates[low]:.1f}x the throughput")
        finally:
            drop_database(server, url)


if __name__ == "__main__":
    main()
