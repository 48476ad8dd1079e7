"""The redaction pass's work on one jsonb value (`app.redaction._json`: parse, redact, compare,
dump when changed), against the parse and dump of 201d02b (`json.loads` / `json.dumps`, which
lost or refused numbers Python cannot round-trip), alternated in this process.

    uv run python -m bench.redact_json [--rounds 7]

Values as the pass reads them (jsonb's text, as Postgres writes it), each clean and with a
secret: 2 MB of small dicts (a kv memory, the pass's biggest rows), a 64 KB tool result with
numbers in it, and 100,000 floats (an embedding-like result, the most numbers a byte). The
median of each side's rounds is printed, in ms a value.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from app.privacy import redact_json
from app.redaction import _json

SECRET = "password: hunter2"


def _old(value: str | None) -> str | None:
    # 201d02b's `_json`, verbatim but for its name.
    if value is None:
        return None
    stored = json.loads(value)
    redacted = redact_json(stored)
    return value if redacted == stored else json.dumps(redacted)


def _jsonb_text(value: Any) -> str:
    # jsonb's text: ", " and ": " separators, as Postgres writes them.
    return json.dumps(value, ensure_ascii=False)


def _values(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    dicts = [
        {"id": i, "name": f"item-{i}", "score": round(rng.random(), 6), "ok": i % 2 == 0}
        for i in range(28_000)
    ]
    result = {
        "rows": [
            {"line": i, "text": "x" * rng.randint(20, 80), "ms": rng.random() * 100}
            for i in range(600)
        ]
    }
    floats = [rng.random() for _ in range(100_000)]
    shapes = {"2MB dicts": dicts, "64KB result": result, "100k floats": floats}
    values = {}
    for name, shape in shapes.items():
        values[f"{name} clean"] = _jsonb_text(shape)
        values[f"{name} secret"] = _jsonb_text({"note": SECRET, "data": shape})
    return values


def _time(function: Callable[[str], str | None], value: str) -> float:
    started = time.perf_counter()
    function(value)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    values = _values(args.seed)
    for name, value in values.items():
        # The same answer where `json` round-trips (a float's text may differ: 1e-05 is 0.00001).
        new_text, old_text = _json(value), _old(value)
        assert (new_text == old_text) if old_text == value else (new_text != value), name
        assert json.loads(new_text or "null") == json.loads(old_text or "null"), name
        old: list[float] = []
        new: list[float] = []
        for _ in range(args.rounds):
            old.append(_time(_old, value))
            new.append(_time(_json, value))
        before, after = statistics.median(old), statistics.median(new)
        print(
            f"{name:20} {len(value) >> 10:6} KB  201d02b {before:8.2f} ms  "
            f"exact {after:8.2f} ms  ratio {after / before:5.2f}"
        )


if __name__ == "__main__":
    main()
