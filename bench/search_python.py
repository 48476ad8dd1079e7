"""The Python CPU of one search's own steps, without the database, against other trees'.

    uv run python -m bench.search_python --against /old/checkout [--against /another] [--rounds 6]

`bench.search` times a whole search (the SQL at 20k or 100k rows, the query's embedding, the
Python around them) on a shared machine, where p95 moves by ~1 ms from run to run. This one
times what the service computes in Python for a query, on `bench.search`'s 160 queries: the
query words and their operands, the tsquery texts, the weights, the filters, the SQL's cached
text and the result's assembly. The database calls and the embedding are replaced by fakes that
answer at once (the term statistics with fixed shares and weights, no rows), so the figure is
the same for a tree whatever the database's state and the machine's load.

Each side is measured in a process of its own, by this interpreter, with `app` imported from its
tree; the sides take turns, a process each, round by round, in reversed order every other round.
The best pass of each process, the median over rounds and its ratio to this tree's are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.trees import alternated, measure_in

TREE = Path(__file__).resolve().parent.parent
PASSES = 15
SHARE = 0.01  # every term's share of rows: rare, so each takes every operand's path
IDF = 1.5


def measure(tree: Path) -> None:
    """One side's round, in this process: `app` from `tree`. Prints µs a search, as JSON."""
    sys.path.insert(0, str(tree))
    from app.config import load_settings
    from app.llm.embeddings import LocalEmbedder
    from app.logs import configure_logging
    from app.search import queries, service
    from app.search.schemas import SearchRequest
    from app.search.service import SearchTuning
    from bench.corpus.queries import QUERIES

    files = [str(Path(str(service.__file__)).resolve())]
    if not all(Path(file).is_relative_to(tree) for file in files):
        raise SystemExit(f"app was not imported from {tree}: {files}")
    configure_logging("warning")

    class Statistics:
        """The term statistics without their queries: every term rare, every weight equal."""

        async def shares(self, session: Any, terms: list[str]) -> dict[str, float]:
            return dict.fromkeys(terms, SHARE)

        async def idf(self, session: Any, operands: list[str]) -> dict[str, float]:
            return dict.fromkeys(operands, IDF)

    class Embedder(LocalEmbedder):
        """The local model's identity, so the service embeds on the loop, as it does for it."""

        def __init__(self) -> None:  # no model loaded: `query_vector` is replaced below
            pass

    async def no_rows(session: Any, **arguments: Any) -> list[Any]:
        return []

    vars(service)["TERM_STATS"] = Statistics()  # the name the service looks up
    service.query_vector = lambda embedder, query: "[0.1,0.2,0.3,0.4]"
    queries.run_search = no_rows  # service calls it as `queries.run_search`
    tuning = SearchTuning.from_settings(load_settings(_env_file=None))
    embedder = Embedder()
    requests = [
        SearchRequest(query=query, project_path="/bench/shop", limit=10) for _, query, _ in QUERIES
    ]

    session: Any = None  # every call that would use it is replaced

    async def passes() -> float:
        best = float("inf")
        for _ in range(PASSES):
            started = time.process_time()
            for request in requests:
                await service.search(session, request=request, embedder=embedder, tuning=tuning)
            best = min(best, time.process_time() - started)
        return best / len(requests) * 1e6

    print(json.dumps({"us": asyncio.run(passes()), "files": files}))


def round_of(tree: Path) -> tuple[float, list[str]]:
    result = measure_in(__file__, tree)
    return float(result["us"]), list(result["files"])


def run(against: list[Path], rounds: int) -> None:
    trees = {"this tree": TREE} | {str(tree): tree for tree in against}
    results: dict[str, list[float]] = {name: [] for name in trees}
    for index, name, tree in alternated(trees, rounds):
        us, files = round_of(tree)
        if not index:
            print(f"{name}: " + ", ".join(files))
        results[name].append(us)
    ours = statistics.median(results["this tree"])
    print("µs of CPU a search, database and embedding faked (median of rounds; each round's best)")
    for name, values in results.items():
        median = statistics.median(values)
        shown = " ".join(f"{value:.1f}" for value in values)
        print(f"  {name}: {median:6.1f}  ({shown})  this tree / it: {ours / median:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, action="append", help="another checkout")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure.resolve())
        return
    if not args.against:
        parser.error("--against is required")
    run([tree.resolve() for tree in args.against], args.rounds)


if __name__ == "__main__":
    main()
