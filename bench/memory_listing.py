"""CPU of a memory listing's answer (`GET /api/memories`), rows to JSON, against another tree's.

    uv run python -m bench.memory_listing --against /old/checkout [--rounds 8] [--rows 1000]

Times what the route spends on rows already read: `to_schema` of each row and FastAPI's answer
(the response model's validation and its JSON, as the route makes them), in ms of process CPU for
`--rows` rows (the listing's most is 1,000), values shaped as the memory files' notes. No database:
its time is the same on both sides and its noise larger than the difference.

Each side is measured in a process of its own, by this interpreter, with `app` imported from its
tree; the sides alternate, a process each, round by round, the first each round in turn. Each
process warms up, then times PASSES listings; its best, and the median over rounds, are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.trees import measure_in

TREE = Path(__file__).resolve().parent.parent
PASSES = 15


def rows(count: int) -> list[SimpleNamespace]:
    """`count` memory rows as the listing's query gives them (attributes of `MemoryRecord`)."""
    now = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    return [
        SimpleNamespace(
            id=uuid.UUID(int=index + 1),
            key=f"project/notes/{index:04d}",
            value={"note": "use pnpm, not npm; run `make test` before a push", "n": index},
            scope="project",
            project_path="/home/dev/shop",
            session_id=None,
            created_by="claude-code",
            updated_by=None,
            tags=["build", "ci"],
            ttl=None,
            expires_at=None,
            version=3,
            created_at=now,
            updated_at=now,
            accessed_at=now,
            access_count=7,
        )
        for index in range(count)
    ]


def measure(tree: Path, count: int) -> None:
    """One side's round, in this process: `app` from `tree`. Prints ms a listing, as JSON."""
    sys.path.insert(0, str(tree))
    from fastapi.routing import APIRoute, serialize_response

    from app.memories import routes, schemas, service

    files = [str(Path(str(module.__file__)).resolve()) for module in (routes, schemas, service)]
    if not all(Path(file).is_relative_to(tree) for file in files):
        raise SystemExit(f"app was not imported from {tree}: {files}")
    route = next(
        route
        for route in routes.router.routes
        if isinstance(route, APIRoute) and route.path == "/api/memories" and "GET" in route.methods
    )
    listed = rows(count)

    async def listing() -> Any:
        content = schemas.MemoryList(memories=[service.to_schema(row) for row in listed])
        # As FastAPI's handler answers a route with a response model and the default class.
        return await serialize_response(
            field=route.response_field, response_content=content, dump_json=True
        )

    async def best() -> float:
        for _ in range(3):
            await listing()
        fastest = float("inf")
        for _ in range(PASSES):
            started = time.process_time()
            await listing()
            fastest = min(fastest, time.process_time() - started)
        return fastest * 1e3

    answer = json.loads(asyncio.run(listing()))
    assert len(answer["memories"]) == count, "a row was not listed"
    print(json.dumps({"ms": asyncio.run(best()), "files": files}))


def round_of(tree: Path, count: int) -> tuple[float, list[str]]:
    result = measure_in(__file__, tree, "--rows", str(count))
    return float(result["ms"]), list(result["files"])


def run(against: Path, rounds: int, count: int) -> None:
    trees = {"this tree": TREE, str(against): against}
    results: dict[str, list[float]] = {name: [] for name in trees}
    for index in range(rounds):
        order = list(trees.items())
        for name, tree in order if index % 2 == 0 else order[::-1]:  # neither always first
            figure, files = round_of(tree, count)
            if not index:
                print(f"{name}: " + ", ".join(files))
            results[name].append(figure)
    for name, values in results.items():
        shown = " ".join(f"{value:.2f}" for value in values)
        median = statistics.median(values)
        print(f"{name}: median {median:.2f} ms CPU a listing of {count} ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another tree (required)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure.resolve(), args.rows)
        return
    if args.against is None:
        parser.error("--against is required")
    run(args.against.resolve(), args.rounds, args.rows)


if __name__ == "__main__":
    main()
