"""Where a served app's first request on each hot route spends its time, against its second.

Run: `uv run python -m bench.first_request_phases [--runs 3]`.
Each run builds the app as `agmem serve` does (`create_app(warm_routes=True)`) in a new process,
on a bench database (bench/db.py) with one memory file synced (`bench.startup.prepare`), runs its
lifespan, answers `/health` (what `agmem serve`'s caller waits for), then sends each hot route
two requests through the ASGI app (no HTTP), as bench/first_requests.py does over HTTP. Each
request's wall time is split into phases, measured by wrapping the libraries' calls:

- `connect`: psycopg connections opened (the pools' first ones), with their first `SET`s;
- `types`: psycopg `TypeInfo.fetch` (the `vector` type's registration on a connection);
- `sql`: the statements' round trips (psycopg cursor `execute`/`executemany`, outside connect);
- `compile`: SQLAlchemy compiling a statement (a first use; later ones come from its cache);
- `embedder`: loading the embedding model (`LocalEmbedder`, `_load_embedder`; a load in another
  thread during the request counts too);
- `imports`: modules imported during the request (their count in parentheses);
- `rest`: the remainder (FastAPI, pydantic, the app's Python, the event loop).

Phases nest (a connect's `SET` is in `connect`, not in `sql`; an import during a compile counts
in both), so they may add up to more than the wall time. It prints per route the median of each
phase over `--runs` processes, first request then second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bench.db import bench_database
from bench.startup import HERE, prepare

PROJECT = "/tmp/startup-bench-project"
ROUTES = ["session/start", "observe", "observe/result", "search", "context"]
PHASES = ["wall", "connect", "types", "sql", "compile", "embedder", "imports", "rest"]


class Meter:
    """Time spent per phase since the last `take`, by wrapping the libraries' entry points."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.active: set[str] = set()
        self.imported = 0

    def timed_async(self, phase: str, call: Callable[..., Awaitable[Any]]) -> Any:
        @functools.wraps(call)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active & {phase, "connect"}:  # nested: counted by the outer phase
                return await call(*args, **kwargs)
            self.active.add(phase)
            start = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                self.spent[phase] += time.perf_counter() - start
                self.active.discard(phase)

        return wrapper

    def timed(self, phase: str, call: Callable[..., Any]) -> Any:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if phase in self.active:
                return call(*args, **kwargs)
            self.active.add(phase)
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[phase] += time.perf_counter() - start
                self.active.discard(phase)

        return wrapper

    def install(self) -> None:
        import builtins

        import psycopg
        from psycopg.types import TypeInfo
        from sqlalchemy.sql import compiler

        from app.llm import embeddings

        connect = psycopg.AsyncConnection.connect.__func__  # type: ignore[attr-defined]
        psycopg.AsyncConnection.connect = classmethod(  # type: ignore[method-assign,assignment]
            self.timed_async("connect", connect)
        )
        fetch = TypeInfo.fetch.__func__  # type: ignore[attr-defined]
        fetched: Any = classmethod(self.timed_async("types", fetch))
        TypeInfo.fetch = fetched  # type: ignore[method-assign]
        cursor = psycopg.AsyncCursor
        for name in ("execute", "executemany"):
            setattr(cursor, name, self.timed_async("sql", getattr(cursor, name)))
        compiled = self.timed("compile", compiler.SQLCompiler.__init__)
        compiler.SQLCompiler.__init__ = compiled  # type: ignore[method-assign]
        embeddings._load_embedder = self.timed("embedder", embeddings._load_embedder)
        local = self.timed("embedder", embeddings.LocalEmbedder.__init__)
        embeddings.LocalEmbedder.__init__ = local  # type: ignore[method-assign]
        original_import = builtins.__import__
        builtins.__import__ = self.timed("imports", original_import)

    @contextlib.contextmanager
    def request(self) -> Iterator[dict[str, float]]:
        """The phases of what runs inside (seconds), `imported` the modules it imported."""
        for phase in PHASES:
            self.spent[phase] = 0.0
        before = len(sys.modules)
        result: dict[str, float] = {}
        start = time.perf_counter()
        yield result
        wall = time.perf_counter() - start
        # An import of a module already loaded costs a dict lookup: only new ones count.
        imported = len(sys.modules) - before
        if not imported:
            self.spent["imports"] = 0.0
        result.update(self.spent)
        result["wall"] = wall
        result["modules"] = imported
        result["rest"] = wall - sum(self.spent[p] for p in PHASES if p not in ("wall", "rest"))


async def served(url: str, home: str) -> dict[str, list[dict[str, float]]]:
    """In this process: the served app's two requests per route, each split into phases."""
    import httpx

    meter = Meter()
    meter.install()
    from app.config import load_settings
    from app.main import create_app

    os.environ["AGMEM_HOME"] = home
    settings = load_settings(database_url=url, _env_file=None, gemini_api_key=None)
    app = create_app(settings, database_url=url, warm_routes=True)
    sessions: list[str] = []
    calls: list[str] = []
    results: dict[str, list[dict[str, float]]] = {route: [] for route in ROUTES}
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
        app.router.lifespan_context(app),
    ):

        async def post(path: str, body: dict[str, object]) -> Any:
            answer = await client.post(path, json=body)
            if answer.status_code >= 300:
                raise SystemExit(f"{path}: {answer.status_code} {answer.text}")
            return answer.json()

        async def start() -> None:
            sessions.append((await post("/api/session/start", {"projectPath": PROJECT}))["id"])

        async def observe() -> None:
            calls.append(uuid.uuid4().hex)
            content = "def handler(event):\n    return event\n" * 150
            args = {"path": "src/app.py", "content": content}
            body = {"sessionId": sessions[-1], "id": calls[-1], "functionName": "write_file"}
            await post("/api/observe", {**body, "functionArgs": args})

        async def result() -> None:
            body = {"sessionId": sessions[-1], "observationId": calls.pop(0)}
            await post(
                "/api/observe/result",
                {**body, "functionName": "write_file", "result": "ok " * 2000},
            )

        async def search() -> None:
            await post("/api/search", {"query": "deployment notes", "projectPath": PROJECT})

        async def context() -> None:
            query = urllib.parse.urlencode({"projectPath": PROJECT, "prompt": "deploy staging"})
            answer = await client.get(f"/api/context?{query}")
            if answer.status_code != 200:
                raise SystemExit(f"context: {answer.status_code} {answer.text}")

        health = await client.get("/health")
        if health.status_code != 200:
            raise SystemExit(f"/health: {health.status_code} {health.text}")
        # What a real server has done by now beyond /health: answer it over HTTP.
        await asyncio.sleep(0.2)
        sends = dict(zip(ROUTES, [start, observe, result, search, context], strict=True))
        for route, send in sends.items():
            for _ in range(2):
                with meter.request() as phases:
                    await send()
                results[route].append(phases)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("URL", "HOME"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(asyncio.run(served(*options.child))))
        return
    runs: list[dict[str, list[dict[str, float]]]] = []
    with (
        bench_database("agmem_phases", upgrade=False) as url,
        tempfile.TemporaryDirectory(prefix="phases-bench-") as home,
    ):
        prepare(HERE / ".venv", url, home, None)
        for _ in range(options.runs):
            child = subprocess.run(
                [sys.executable, "-m", "bench.first_request_phases", "--child", url, home],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "AGMEM_LOG_LEVEL": "warning"},
                cwd=Path(HERE),
            )
            runs.append(json.loads(child.stdout.splitlines()[-1]))
    print(f"median of {options.runs} processes, ms per phase of each route's 1st / 2nd request")
    print(f"{'route':<15} {'#':>2} " + " ".join(f"{p:>8}" for p in PHASES) + f" {'modules':>7}")
    for route in ROUTES:
        for index in range(2):
            cells = []
            for phase in PHASES:
                value = statistics.median(run[route][index][phase] for run in runs) * 1e3
                cells.append(f"{value:>8.1f}")
            modules = statistics.median(run[route][index]["modules"] for run in runs)
            print(f"{route:<15} {index + 1:>2} " + " ".join(cells) + f" {modules:>7.0f}")


if __name__ == "__main__":
    main()
