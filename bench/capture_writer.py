"""The group-commit writer's own CPU per statement: the capture statements replayed through it.

    uv run python -m bench.capture_writer              # 6 rounds of 16 clients x 60 pairs
    uv run python -m bench.capture_writer --rounds 10

The statements and parameters the capture services make for the `bench.capture` payloads are
built first (by running the services against a recorder), then replayed through the real
`GroupWriter` from 16 concurrent clients on uvloop, against a fresh embedded PostgreSQL. Per
round it prints this process's CPU per statement (the writer: parameter conversion, the libpq
sends, the Sync, reading and converting the results, the futures) and Postgres's; the best
round is the figure to compare between two commits run alternately. `AGMEM_CAPTURE_WRITERS`
sets the writer count (default: the setting's default).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop

from bench.capture import cpu_seconds, payload_pool, postgres_pids
from bench.capture_app import answer
from bench.capture_pg import open_writer
from bench.scratch import scratch_folder

CLIENTS = 16
Call = tuple[Any, dict[str, Any]]


def recorded_calls(sessions: list[str], pairs: int, seed: int) -> list[list[Call]]:
    """Each client's statements, as the services make them for `pairs` observe/result pairs."""
    from app.capture import queries, service
    from app.capture.db import GroupWriter, RawResult
    from app.capture.schemas import ObserveIn, ObserveResultIn
    from app.config import Settings

    class Recorder(GroupWriter):
        def __init__(self) -> None:  # no pool, no writer tasks
            self.calls: list[Call] = []

        async def execute(self, query: Any, params: Any = None) -> RawResult:
            if "call_entities" in params:  # the replay cannot know the stored entities
                query = queries.MATCH_BY_ID.pick("touch" in query.text)
                params = {k: v for k, v in params.items() if k not in ("merged", "call_entities")}
            self.calls.append((query, dict(params)))
            result: RawResult = answer(params)
            return result

    settings = Settings()
    pool = payload_pool(400)

    async def record(number: int) -> list[Call]:
        rng = random.Random(seed * 1000 + number)
        recorder = Recorder()
        head = b'{"sessionId":"%s","functionName":"write_file",' % sessions[number].encode()
        for _ in range(pairs):
            arguments, result = pool[rng.randrange(len(pool))]
            call = uuid.uuid4().hex.encode()
            observe = ObserveIn.model_validate_json(
                head + b'"id":"%s","functionArgs":%s}' % (call, arguments)
            )
            answer = ObserveResultIn.model_validate_json(
                head + b'"observationId":"%s","result":%s}' % (call, result)
            )
            await service.record_observation(recorder, data=observe, settings=settings)
            await service.record_result(recorder, data=answer, settings=settings)
        return recorder.calls

    async def all_clients() -> list[list[Call]]:
        return [await record(number) for number in range(CLIENTS)]

    return asyncio.run(all_clients())


async def replay(url: str, pgdata: Path, rounds: int, pairs: int) -> None:
    raw, writer, sessions = await open_writer(url)

    async def client(calls: list[Call]) -> None:
        for query, params in calls:
            await writer.execute(query, params)

    try:
        warm_up = await asyncio.to_thread(recorded_calls, sessions, 10, 0)
        await asyncio.gather(*(client(calls) for calls in warm_up))
        best = float("inf")
        for number in range(1, rounds + 1):
            work = await asyncio.to_thread(recorded_calls, sessions, pairs, number)
            statements = sum(len(calls) for calls in work)
            pids = postgres_pids(pgdata)
            server, own, wall = cpu_seconds(pids), time.process_time(), time.perf_counter()
            await asyncio.gather(*(client(calls) for calls in work))
            server = cpu_seconds(pids) - server
            own, wall = time.process_time() - own, time.perf_counter() - wall
            best = min(best, own / statements)
            print(
                f"round {number}: writer {own / statements * 1e6:.1f} µs CPU a statement, "
                f"postgres {server / statements * 1e6:.1f} µs, {statements / wall:.0f} "
                "statements/s",
                flush=True,
            )
        print(f"best round: {best * 1e6:.1f} µs of writer CPU a statement")
    finally:
        await writer.close()
        await raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pairs", type=int, default=60, help="observe/result pairs per client")
    args = parser.parse_args()

    from app.db import migrate
    from app.db.embedded import start_embedded_postgres
    from app.logs import configure_logging

    configure_logging("warning")
    with scratch_folder("agmem-bench-") as folder:
        pgdata = Path(folder) / "pgdata"
        url = start_embedded_postgres(pgdata)
        migrate.upgrade(url)
        uvloop.run(replay(url, pgdata, args.rounds, args.pairs))


if __name__ == "__main__":
    main()
