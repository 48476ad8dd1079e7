"""CPU per value of capture's own derived-field steps, on the capture benchmark's payloads.

    uv run python -m bench.capture_steps

Times, in process CPU (so other processes on a shared machine disturb it less than wall time),
the best of several passes over the 800 argument and result values that `bench.capture` sends:
sanitizing (clean, private spans, redaction), the whole stored-payload preparation, entity
extraction and the encoding of the entities. Run it on two commits back to back to compare a
change to these steps without the HTTP server, Postgres and the load generator around them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from app.capture.derive import dumps, prepare_payload
from app.capture.entities import extract_entities
from app.privacy import sanitize_json
from bench.capture import payload_pool

MAX_CHARS = 65_536  # AGMEM_CAPTURE_MAX_FIELD_CHARS's default
MAX_DEPTH = 64
PASSES = 7


def per_value_us(step: Callable[[Any], object], values: list[Any]) -> float:
    """Best of PASSES passes, in µs of process CPU per value."""
    best = float("inf")
    for _ in range(PASSES):
        started = time.process_time()
        for value in values:
            step(value)
        best = min(best, time.process_time() - started)
    return best / len(values) * 1e6


def main() -> None:
    values: list[Any] = []
    for args, result in payload_pool(400):
        values += [json.loads(args), json.loads(result)]
    prepared = [prepare_payload(v, max_chars=MAX_CHARS, max_depth=MAX_DEPTH).value for v in values]

    def prepare(value: Any) -> object:
        return prepare_payload(value, max_chars=MAX_CHARS, max_depth=MAX_DEPTH)

    def both(value: Any) -> object:
        payload = prepare_payload(value, max_chars=MAX_CHARS, max_depth=MAX_DEPTH)
        return dumps(extract_entities(payload.value))

    print(f"{len(values)} values (arguments and results of bench.capture), µs of CPU per value:")
    print(f"  sanitize_json             {per_value_us(sanitize_json, values):7.1f}")
    print(f"  prepare_payload           {per_value_us(prepare, values):7.1f}")
    print(f"  extract_entities          {per_value_us(extract_entities, prepared):7.1f}")
    print(f"  prepare + entities + dump {per_value_us(both, values):7.1f}  (one request's share)")


if __name__ == "__main__":
    main()
