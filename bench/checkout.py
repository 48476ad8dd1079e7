"""What the engine's checkout check costs a request: none, `usable` (two non-blocking recvs) and
SQLAlchemy's `pool_pre_ping` (a round trip), alternated in rounds within one process.

Run: `uv run python -m bench.checkout [--requests 2000] [--rounds 5]`.
Each round sends `--requests` of `GET /health` and `GET /api/sessions?limit=5` (routes that take
an engine connection) through the whole app in process over ASGI, once per variant in turn, and
prints per variant the median over rounds of the mean wall time and of the process's CPU time
per request (the client's, the app's and the driver's, not Postgres's); then the check alone, a
call of `usable` on an idle pooled connection.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event

from app.config import load_settings
from app.db import engine as engine_module
from app.db.alive import usable
from app.main import create_app
from bench.db import bench_database

VARIANTS = ("none", "usable", "pre_ping")
PATHS = ("/health", "/api/sessions?limit=5")


def set_variant(engine: Any, variant: str) -> None:
    sync_engine = engine.sync_engine
    listening = event.contains(sync_engine, "checkout", engine_module._check_backend)
    if variant == "usable" and not listening:
        event.listen(sync_engine, "checkout", engine_module._check_backend)
    if variant != "usable" and listening:
        event.remove(sync_engine, "checkout", engine_module._check_backend)
    sync_engine.pool._pre_ping = variant == "pre_ping"


async def run(url: str, requests: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        v: {f"{p} {m}": [] for p in PATHS for m in ("wall", "cpu")} for v in VARIANTS
    }
    with tempfile.TemporaryDirectory() as home:
        settings = load_settings(
            _env_file=None, home=Path(home), database_url=url, api_token=None, gemini_api_key=None
        )
        app = create_app(settings, database_url=url)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
        ):
            engine = app.state.agmem.engine
            for path in PATHS:  # warm up: connections, caches
                for _ in range(200):
                    assert (await client.get(path)).status_code == 200
            for _ in range(rounds):
                for variant in VARIANTS:
                    set_variant(engine, variant)
                    for path in PATHS:
                        wall, cpu = time.perf_counter(), time.process_time()
                        for _ in range(requests):
                            assert (await client.get(path)).status_code == 200
                        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                        results[variant][f"{path} wall"].append(wall / requests * 1e6)
                        results[variant][f"{path} cpu"].append(cpu / requests * 1e6)
            set_variant(engine, "usable")
            async with engine.connect() as connection:
                raw = await connection.get_raw_connection()
                driver = raw.driver_connection
                check = min(timeit.repeat(lambda: usable(driver), number=20_000, repeat=5))
    print(f"usable() alone on an idle connection: {check / 20_000 * 1e6:.2f} µs a call")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with bench_database() as url:
        results = asyncio.run(run(url, args.requests, args.rounds))
    for variant, figures in results.items():
        shown = ", ".join(
            f"{name} {statistics.median(values):.1f}" for name, values in figures.items()
        )
        print(f"{variant:>9} (µs a request, median of {args.rounds} rounds): {shown}")


if __name__ == "__main__":
    main()
