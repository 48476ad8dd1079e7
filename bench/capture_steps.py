"""CPU per value of capture's own derived-field steps, on the capture benchmark's payloads.

    uv run python -m bench.capture_steps

Times, in process CPU (so other processes on a shared machine disturb it less than wall time),
the best of several passes over the 800 argument and result values that `bench.capture` sends:
sanitizing (clean, private spans, redaction), the whole stored-payload preparation, entity
extraction and the encoding of the entities. Run it on two commits back to back to compare a
change to these steps without the HTTP server, Postgres and the load generator around them.

Each pass gets values parsed afresh from the request bodies by the routes' own models, as the
server does: a string that has been through orjson keeps its UTF-8 cached, so passes over the
same values found every later encoding free (a fresh 10 KB non-ASCII text takes ~35 µs to
encode), and the figures were too low.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from app.capture.derive import Payload, dumps, prepare_payload
from app.capture.entities import SANITIZE_SCANNER, extract_entities
from app.capture.schemas import ObserveIn, ObserveResultIn
from app.privacy import sanitize_json
from bench.capture import payload_pool

MAX_CHARS = 65_536  # AGMEM_CAPTURE_MAX_FIELD_CHARS's default
MAX_DEPTH = 64
PASSES = 7
POOL = payload_pool(400)
OBSERVE = b'{"sessionId":"s","functionName":"write_file","functionArgs":%s}'
RESULT = b'{"sessionId":"s","functionName":"write_file","result":%s}'


def fresh_values() -> list[Any]:
    """The pool's arguments and results, parsed from request bodies as the routes parse them."""
    values: list[Any] = []
    for args, result in POOL:
        values.append(ObserveIn.model_validate_json(OBSERVE % args).function_args)
        values.append(ObserveResultIn.model_validate_json(RESULT % result).result)
    return values


def per_value_us(step: Callable[[Any], object], make: Callable[[], list[Any]]) -> float:
    """Best of PASSES passes, each over values made afresh, in µs of process CPU per value."""
    best = float("inf")
    for _ in range(PASSES):
        values = make()
        started = time.process_time()
        for value in values:
            step(value)
        best = min(best, time.process_time() - started)
    return best / len(values) * 1e6


def prepare(value: Any) -> Payload:
    """The stored payload, as the capture service prepares it."""
    return prepare_payload(
        value, max_chars=MAX_CHARS, max_depth=MAX_DEPTH, scanner=SANITIZE_SCANNER
    )


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

    def prepared() -> list[Any]:
        return [
            prepare_payload(v, max_chars=MAX_CHARS, max_depth=MAX_DEPTH).value
            for v in fresh_values()
        ]

    def both(value: Any) -> object:
        payload = prepare(value)
        return dumps(extract_entities(payload.value, scanned=payload.scanned))

    count = 2 * len(POOL)
    print(f"{count} values (arguments and results of bench.capture), µs of CPU per value:")
    print(f"  sanitize_json             {per_value_us(sanitize_json, fresh_values):7.1f}")
    print(f"  prepare_payload           {per_value_us(prepare, fresh_values):7.1f}")
    print(f"  extract_entities alone    {per_value_us(extract_entities, prepared):7.1f}")
    print(
        f"  prepare + entities + dump {per_value_us(both, fresh_values):7.1f}"
        "  (one request's share, as the service runs them)"
    )


if __name__ == "__main__":
    main()
