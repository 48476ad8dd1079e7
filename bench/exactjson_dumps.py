"""`exactjson.dumps` (the engine's jsonb serializer, the redaction pass's and sync's writer) against
another checkout's, and `json.dumps` for reference, alternated in this process.

    uv run python -m bench.exactjson_dumps --other /path/to/old/checkout [--rounds 9]

Values: a small dict as a client writes a memory (no Decimal: the engine's usual case), the same
with one Decimal (`1.50`, as `exactjson.loads` reads it), and a 64 KB tool result whose floats are
Decimals; each called as the engine's serializer calls it (no option) and as the readers do
(`ensure_ascii=False`). Each round times a number of calls of each side in turn; the median
round is printed, in µs a call.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app import exactjson
from bench.exactjson_loads import load_exactjson

Dumps = Callable[..., str]


def _values(seed: int) -> dict[str, tuple[Any, int]]:
    """Each value and the calls a round makes of it."""
    rng = random.Random(seed)
    small = {"note": "use pnpm, not npm", "tags": ["build", "ci"], "ttl": 3600, "ok": True}
    result = {
        "rows": [
            {"line": i, "text": "x" * rng.randint(20, 80), "ms": rng.random() * 100}
            for i in range(600)
        ]
    }
    exact_result = exactjson.loads(json.dumps(result))
    return {
        "small dict": (small, 20_000),
        "small dict, 1 Decimal": ({**small, "cost": exactjson.loads("1.50")}, 20_000),
        "64KB, Decimal floats": (exact_result, 50),
    }


STYLES: dict[str, dict[str, Any]] = {"engine": {}, "ensure_ascii=False": {"ensure_ascii": False}}


def _per_call(dumps: Dumps, value: Any, calls: int, options: dict[str, Any]) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        dumps(value, **options)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, required=True, help="the old checkout")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    other = load_exactjson(args.other, 0)
    sides: dict[str, Dumps] = {"json": json.dumps, "other": other.dumps, "this": exactjson.dumps}
    for (name, (value, calls)), (style, options) in itertools.product(
        _values(args.seed).items(), STYLES.items()
    ):
        assert exactjson.dumps(value, **options) == other.dumps(value, **options), name
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, dumps in sides.items():
                try:
                    times[side].append(_per_call(dumps, value, calls, options))
                except TypeError:  # `json` and a Decimal
                    times[side].append(float("nan"))
        medians = {side: statistics.median(each) for side, each in times.items()}
        print(
            f"{name:22} {style:18} json {medians['json']:8.2f}  other {medians['other']:8.2f}  "
            f"this {medians['this']:8.2f} µs  this/other {medians['this'] / medians['other']:5.2f}"
        )


if __name__ == "__main__":
    main()
