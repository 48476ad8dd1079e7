"""How long an in-process worker takes to summarise a session that just ended, and to stop once
asked, on this tree's code and on another (`--old`, e.g. /work/notes28/bmain), alternated.

Each round, per code tree, a child process (that tree's .venv and `app`) starts a worker (4
lanes, no Gemini key: the extractive fallback, the default 5 s poll) on a fresh database,
inserts an ended session with one captured call, waits for its summary (polling the row every
10 ms), then stops the worker. It prints the seconds from the insert to the summary and from
the stop to the worker's return. A lane that misses a wake sleeps for the poll (5 s).

    uv run python -m bench.worker_wake --old /work/notes28/bmain [--rounds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]

RESULT = "\n".join(f"line {n}: def handler_{n}(request): return respond()" for n in range(40))


async def _one(url: str) -> dict[str, float]:
    import psycopg

    from app.config import load_settings
    from app.db.engine import make_async_engine, make_sessionmaker
    from app.worker.loop import Worker

    settings = load_settings(
        database_url=url, gemini_api_key=None, gemini_base_url=None, _env_file=None
    )
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    engine = make_async_engine(url, pool_size=8)
    worker = Worker(settings=settings, sessionmaker=make_sessionmaker(engine), database_url=url)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        with psycopg.connect(libpq, autocommit=True) as db:
            # The worker's start (its rescan, its first upkeep) is not what is measured.
            while not db.execute(
                "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
            ).fetchone():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)
            started = time.perf_counter()
            with db.transaction():
                db.execute(
                    "INSERT INTO sessions (id, project_path, status, user_prompt, ended_at) "
                    "VALUES ('s1', '/bench', 'ending', 'fix the handler', now())"
                )
                db.execute(
                    "INSERT INTO observations (id, session_id, project_path, function_name, "
                    "function_args, result, observation_type, status, result_at) VALUES "
                    "('o1', 's1', '/bench', 'read_file', %s, %s, 'file_read', 'captured', now())",
                    (json.dumps({"path": "src/h.py"}), json.dumps(RESULT)),
                )
            while db.execute("SELECT status FROM sessions").fetchone() != ("summarized",):
                await asyncio.sleep(0.01)
            summarized = time.perf_counter() - started
        stopping = time.perf_counter()
        stop.set()
        await running
        return {"summary_s": summarized, "stop_s": time.perf_counter() - stopping}
    finally:
        stop.set()
        await asyncio.gather(running, return_exceptions=True)
        await engine.dispose()


def _child(root: Path, url: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "AGMEM_LOG_LEVEL": "error"}
    out = subprocess.run(
        [str(root / ".venv/bin/python"), str(Path(__file__).resolve()), "--one", url],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="another tree to alternate with")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(_one(args.one))))
        return
    from bench.db import bench_database

    trees = {"new": HERE, **({"old": args.old.resolve()} if args.old else {})}
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, root in trees.items():
            with bench_database("agmem_wake") as url:
                figures[name].append(_child(root, url))
            print(f"round {round_ + 1} {name}: {figures[name][-1]}", file=sys.stderr)
    for key in ("summary_s", "stop_s"):
        line: dict[str, Any] = {}
        for name, runs in figures.items():
            values = [run[key] for run in runs]
            line[name] = f"median {statistics.median(values):.3f} max {max(values):.3f}"
        if "old" in figures:
            new = statistics.median(run[key] for run in figures["new"])
            old = statistics.median(run[key] for run in figures["old"])
            line["old/new"] = f"{old / new:.2f}"
        print(key, line)


if __name__ == "__main__":
    main()
