"""Searches with the Gemini embedding provider: CPU and wall time a search while Gemini answers,
and while it fails (503), with the latency of a /health asked during a search.

    uv run python -m bench.gemini_search [--searches 60] [--latency-ms 0]

The fake Gemini (tests/fakes/gemini.py) runs in a child process, so this process's CPU time is
the API's own: the app is called in-process through httpx's ASGI transport, on a fresh migrated
database (embedded PostgreSQL unless TEST_DATABASE_URL is set) holding 200 keyword-searchable
chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

from app.config import load_settings
from app.db import migrate
from app.index.terms import search_terms
from app.index.writer import content_hash
from app.logs import configure_logging
from app.main import create_app
from tests.postgres import choose_kind, create_database, drop_database, start_server

FAKE = """
import sys, time
from http.server import ThreadingHTTPServer
from tests.fakes.gemini import FakeGemini, FakeResponse, _handler
status, delay = int(sys.argv[2]), float(sys.argv[3])
def answer(request):
    if status != 200:
        return FakeResponse(status, {"error": {"code": status, "message": "busy"}})
    vectors = [{"values": [0.5] * 768}] * len(request.body["requests"])
    return FakeResponse(200, {"embeddings": vectors}, delay_s=delay)
fake = FakeGemini()
fake.on(":batchEmbedContents", answer)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _handler(fake)).serve_forever(0.05)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _seed(url: str) -> None:
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    words = "deploy worker queue retry backoff token session cache index vector".split()
    rows = []
    for n in range(200):
        text = f"note {n}: " + " ".join(words[(n + k) % len(words)] for k in range(40))
        rows.append(("/bench", "memory", f"notes/{n}.md", text, search_terms(text)))
    with psycopg.connect(libpq, autocommit=True) as db, db.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO memory_chunks (project_path, source, file_path, start_line, end_line, "
            "content, search_terms, hash) VALUES (%s, %s, %s, 1, 5, %s, %s, %s)",
            [(*row, content_hash(row[3])) for row in rows],
        )


async def _searches(url: str, port: int, count: int) -> dict[str, Any]:
    settings = load_settings(
        database_url=None,
        api_token=None,
        gemini_api_key="bench",
        gemini_base_url=f"http://127.0.0.1:{port}",
        embedding_provider="gemini",
        _env_file=None,
    )
    app = create_app(settings, database_url=url)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=120) as client,
    ):

        async def search(n: int) -> httpx.Response:
            body = {"query": f"deploy worker queue {n}", "projectPath": "/bench"}
            return await client.post("/api/search", json=body)

        for n in range(3):
            await search(-n)  # the embedder and the connections, outside the timings
        walls, answered, degraded = [], 0, 0
        cpu = time.process_time()
        for n in range(count):
            started = time.perf_counter()
            answer = await search(n)
            walls.append((time.perf_counter() - started) * 1000)
            answered += answer.status_code == 200
            degraded += answer.json().get("degraded") is not None
        cpu_ms = (time.process_time() - cpu) / count * 1000
        # /health asked 50 ms into a search: a search holding the event loop delays it (and the
        # 50 ms sleep) until the search lets go, so the wait is counted from the sleep's start.
        pending = asyncio.create_task(search(count))
        started = time.perf_counter()
        await asyncio.sleep(0.05)
        health = await client.get("/health")
        health_ms = (time.perf_counter() - started) * 1000 - 50
        assert health.status_code == 200
        await pending
    walls.sort()
    return {
        "p50": statistics.median(walls),
        "p95": walls[int(len(walls) * 0.95)],
        "cpu": cpu_ms,
        "answered": answered,
        "degraded": degraded,
        "health": health_ms,
    }


def _phase(url: str, count: int, status: int, latency_ms: int) -> dict[str, Any]:
    port = _free_port()
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE, str(port), str(status), str(latency_ms / 1000)]
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return asyncio.run(_searches(url, port, count))
    finally:
        fake.terminate()
        fake.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=60)
    parser.add_argument("--latency-ms", type=int, default=0)
    args = parser.parse_args()
    configure_logging("error")
    with start_server(choose_kind()) as server:
        url = create_database(server, prefix="agmem_bench")
        try:
            migrate.upgrade(url)
            _seed(url)
            for label, status, count in (
                ("Gemini answering", 200, args.searches),
                ("Gemini answering 503", 503, max(3, args.searches // 20)),
            ):
                got = _phase(url, count, status, args.latency_ms)
                print(
                    f"{label:<21} {count} searches: wall p50 {got['p50']:.1f} / p95 "
                    f"{got['p95']:.1f} ms, CPU {got['cpu']:.1f} ms a search, 200 "
                    f"{got['answered']}/{count}, keyword-only {got['degraded']}/{count}; "
                    f"/health during a search {got['health']:.1f} ms"
                )
        finally:
            drop_database(server, url)


if __name__ == "__main__":
    main()
