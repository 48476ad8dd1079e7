"""Finding the session of the calls a proxied request's tool results answer: the project's
latest five proxy sessions searched (two queries in a transaction), against the conversation's
current session tried first (one query when it holds them, a tool loop's every turn).

Run: `uv run python -m bench.proxy_late_results [--rounds N] [--observations N]`. It starts
PostgreSQL (the test suite's choice), opens five proxy sessions of one project, each with
`--observations` recorded calls, and the calls answered in the newest. Each round looks the
session up both ways, in alternating order, so both see the same machine noise; it prints the
medians, their ratio and the statements each way sent (counted on the engine).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from sqlalchemy import event

from app.capture.schemas import SessionStartIn
from app.capture.service import start_session
from app.db import migrate
from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.proxy.calls import FunctionCall
from app.proxy.record import record_calls, session_of_calls
from app.proxy.sessions import PROXY_CREATOR
from app.state import AppState
from tests.conftest import make_settings
from tests.postgres import choose_kind, create_database, start_server

PROJECT = "/home/dev/bench-late-results"
SESSIONS = 5
CONVERSATION = "fix the failing auth test"


def _calls(turn: int) -> list[FunctionCall]:
    return [FunctionCall(name="read_file", args={"path": f"src/file_{turn}.ts"})]


async def _run(database_url: str, rounds: int, observations: int) -> None:
    engine = make_async_engine(database_url, pool_size=2)
    statements = [0]
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *_: _count(statements))
    with tempfile.TemporaryDirectory() as home:
        settings = make_settings(home=Path(home))
        agmem = cast(
            AppState, SimpleNamespace(sessionmaker=make_sessionmaker(engine), settings=settings)
        )
        current = ""
        for _ in range(SESSIONS):
            async with agmem.sessionmaker() as db, db.begin():
                data = SessionStartIn(project_path=PROJECT, created_by=PROXY_CREATOR)
                ref, _ = await start_session(db, data=data, settings=settings)
            current = ref.id
            for turn in range(observations):
                await record_calls(
                    agmem,
                    session_id=current,
                    turn_index=turn,
                    calls=_calls(turn),
                    conversation=CONVERSATION,
                )
        answered = (observations - 1, _calls(observations - 1))

        async def lookup(hint: str | None) -> tuple[float, int]:
            before = statements[0]
            started = time.perf_counter()
            found = await session_of_calls(
                agmem,
                project=PROJECT,
                answered=answered,
                conversation=CONVERSATION,
                current=hint,
            )
            took = (time.perf_counter() - started) * 1e6
            assert found == current, (found, current)
            return took, statements[0] - before

        searched: list[float] = []
        tried: list[float] = []
        counts: dict[str, int] = {}
        for n in range(rounds + 20):
            ways: list[tuple[str, str | None, list[float]]] = [
                ("latest five", None, searched),
                ("current first", current, tried),
            ]
            for name, hint, sink in ways if n % 2 else reversed(ways):
                took, sent = await lookup(hint)
                counts[name] = sent
                if n >= 20:  # warmed up
                    sink.append(took)
    await engine.dispose()
    old, new = statistics.median(searched), statistics.median(tried)
    print(f"late-result lookup, {SESSIONS} proxy sessions x {observations} calls, {rounds} rounds")
    print(f"  latest five searched: median {old:8.1f} us, {counts['latest five']} statements")
    print(f"  current tried first:  median {new:8.1f} us, {counts['current first']} statements")
    print(f"  ratio current-first / latest-five: {new / old:.2f}")


def _count(statements: list[int]) -> None:
    statements[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--observations", type=int, default=200, help="calls per session")
    args = parser.parse_args()
    configure_logging("warning")
    with start_server(choose_kind()) as server:
        database_url = create_database(server)
        migrate.upgrade(database_url)
        asyncio.run(_run(database_url, args.rounds, args.observations))


if __name__ == "__main__":
    main()
