"""The capture app's own CPU per request, in process: no uvicorn, no HTTP, a real Postgres.

    uv run python -m bench.capture_app              # 10 rounds of 16 x 20 observe/result pairs
    uv run python -m bench.capture_app --rounds 5 --pairs 40
    uv run python -m bench.capture_app --no-db      # the writer answers at once: Python only
    uv run python -m bench.capture_app --profile app.prof   # where that CPU goes, by function

Calls the whole ASGI app (middlewares, router, routes, the group-commit writer) directly with
the bodies `bench.capture` sends, from 16 concurrent clients, on an embedded PostgreSQL, and
prints this process's CPU time per request for each round and the best round. Postgres runs in
its own processes and is not counted. On a shared machine the process CPU of the best round
moves far less than the HTTP benchmark's rates: run it on two commits alternately to compare a
change to the app's per-request work.

With --no-db the group-commit writer is replaced, once the app has started, by one that turns
each statement's parameters into their wire form (as the real one does) and answers at once: the
figure is then the Python of the middlewares, routes and services alone, without the writer's
libpq round trips and the waits for Postgres, and it moves far less from run to run.

With --profile FILE the measured rounds (not the start-up or the warm-up) run under cProfile,
timed in process CPU (wall time counted every wait for Postgres and for the CPU on a shared
machine as the function's own), and the stats go to FILE and their top to the output. cProfile's
own cost inflates the per-request figures of those rounds about threefold, so compare shares, not
times.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import random
import time
import uuid
from collections import namedtuple
from pathlib import Path
from typing import Any

from bench.capture import payload_pool
from bench.scratch import scratch_folder

CLIENTS = 16


async def call(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    """One POST through the ASGI app; (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # a disconnect never comes
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


# The columns the hot statements return (INSERT_OBSERVATION's and the matches', which add one).
AnswerRow = namedtuple(
    "AnswerRow",
    "session_project id session_id project_path status observation_type original_tokens truncated",
)


def answer(params: Any) -> Any:
    """What a capture statement answers when it matches: one row, the observation pending."""
    from app.capture.db import RawResult

    observation_id = params.get("id") or params.get("observation_id")
    row = AnswerRow("/p", observation_id, params["session_id"], "/p", "pending", "write", 1, False)
    return RawResult([row])


def instant_writer() -> Any:
    """A group-commit writer that answers every statement at once with a matching row."""
    from app.capture import pipeline
    from app.capture.db import GroupWriter, RawResult

    class InstantWriter(GroupWriter):
        def __init__(self) -> None:  # no pool, no writer tasks
            pass

        async def execute(self, query: Any, params: Any = None) -> RawResult:
            stmt = pipeline.statement(query.text)
            pipeline.dump_params(stmt, params)
            result: RawResult = answer(params)
            return result

        async def close(self) -> None:
            pass

    return InstantWriter()


async def run(
    url: str, rounds: int, pairs: int, no_db: bool = False, profile: Path | None = None
) -> None:
    from app.config import Settings
    from app.heap import freeze_heap
    from app.main import create_app

    pool = payload_pool(400)
    app = create_app(Settings(database_url=url), database_url=url)
    async with app.router.lifespan_context(app):
        if no_db:
            real_writer, app.state.capture_writer = app.state.capture_writer, instant_writer()
        sessions = []
        for _ in range(CLIENTS):
            body = json.dumps({"projectPath": "/bench/project", "id": uuid.uuid4().hex})
            _, answer = await call(app, "/api/session/start", body.encode())
            sessions.append(json.loads(answer)["id"].encode())

        async def client(number: int, count: int) -> None:
            rng = random.Random(number)
            session = sessions[number]
            for _ in range(count):
                args, result = pool[rng.randrange(len(pool))]
                call_id = uuid.uuid4().hex.encode()
                observe = b'{"sessionId":"%s","id":"%s","functionName":"write_file",' % (
                    session,
                    call_id,
                )
                status, _ = await call(
                    app, "/api/observe", observe + b'"functionArgs":' + args + b"}"
                )
                answer = b'{"sessionId":"%s","observationId":"%s","functionName":"write_file",' % (
                    session,
                    call_id,
                )
                second, _ = await call(
                    app, "/api/observe/result", answer + b'"result":' + result + b"}"
                )
                if (status, second) != (201, 200):
                    raise RuntimeError(f"unexpected answers {status}, {second}")

        await asyncio.gather(*(client(n, 10) for n in range(CLIENTS)))  # warm-up
        freeze_heap()  # as `agmem serve` does after startup
        profiler = cProfile.Profile(time.process_time) if profile else None
        best = float("inf")
        requests = CLIENTS * pairs * 2
        for number in range(1, rounds + 1):
            if profiler:
                profiler.enable()
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(client(n, pairs) for n in range(CLIENTS)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if profiler:
                profiler.disable()
            best = min(best, cpu / requests)
            print(
                f"round {number}: {cpu / requests * 1000:.3f} ms CPU a request, "
                f"{requests / wall:.0f} req/s",
                flush=True,
            )
        print(
            f"best round: {best * 1000:.3f} ms of app CPU a request ({requests} requests a round)"
        )
        if profiler and profile:
            profiler.dump_stats(profile)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        if no_db:
            app.state.capture_writer = real_writer  # the lifespan closes the real one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=20, help="observe/result pairs per client")
    parser.add_argument(
        "--no-db", action="store_true", help="a writer that answers at once: the app's Python alone"
    )
    parser.add_argument(
        "--profile", type=Path, metavar="FILE", help="cProfile the rounds (process CPU) into FILE"
    )
    args = parser.parse_args()

    from app.db import migrate
    from app.db.embedded import start_embedded_postgres
    from app.logs import configure_logging

    configure_logging("warning")
    with scratch_folder("agmem-bench-") as folder:
        url = start_embedded_postgres(Path(folder) / "pgdata")
        migrate.upgrade(url)
        asyncio.run(run(url, args.rounds, args.pairs, args.no_db, args.profile))


if __name__ == "__main__":
    main()
