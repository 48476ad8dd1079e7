"""`exactjson.loads_stored` (the engine's and the raw pool's jsonb reader: every read of a
memory, an observation, a session) against other checkouts', and `json.loads` for reference,
alternated in this process.

    uv run python -m bench.exactjson_loads --other /old/checkout [--other /another] [--rounds 9]

Values, as Postgres writes jsonb's text: a small dict as a client writes a memory, a 64 KB tool
result with 600 floats, and a list of 1,000 integers. Each round times a number of calls of
each side in turn; the median round is printed, in µs a call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from app import exactjson

Loads = Callable[[str], Any]


def load_exactjson(checkout: Path, index: int) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"other_exactjson_{index}", checkout / "app" / "exactjson.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _values(seed: int) -> dict[str, tuple[str, int]]:
    """Each value's jsonb text and the calls a round makes of it."""
    rng = random.Random(seed)
    small = {"note": "use pnpm, not npm", "tags": ["build", "ci"], "ttl": 3600, "ok": True}
    result = {
        "rows": [
            {"line": i, "text": "x" * rng.randint(20, 80), "ms": rng.random() * 100}
            for i in range(600)
        ]
    }
    integers = [rng.randint(0, 10**9) for _ in range(1000)]
    return {
        "small dict": (json.dumps(small, separators=(", ", ": ")), 20_000),
        "64KB, 600 floats": (json.dumps(result, separators=(", ", ": ")), 100),
        "1,000 integers": (json.dumps(integers, separators=(", ", ": ")), 500),
    }


def _per_call(loads: Loads, text: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        loads(text)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sides: dict[str, Loads] = {"json": json.loads}
    for index, checkout in enumerate(args.other):
        sides[f"other{index + 1}"] = load_exactjson(checkout, index).loads_stored
    sides["this"] = exactjson.loads_stored
    for name, (text, calls) in _values(args.seed).items():
        assert all(loads(text) == json.loads(text) for loads in sides.values()), name
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, loads in sides.items():
                times[side].append(_per_call(loads, text, calls))
        medians = {side: statistics.median(each) for side, each in times.items()}
        shown = "  ".join(f"{side} {median:8.2f}" for side, median in medians.items())
        print(f"{name:18} {shown} µs")


if __name__ == "__main__":
    main()
