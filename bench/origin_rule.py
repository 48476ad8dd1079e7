"""The origin rule's own cost a request, in process: without `Origin` (curl, SDKs, IDE hooks, the
capture benchmark's client) and with an extension's (`chrome-extension://…`, whose answers get
CORS headers). The rule wraps a trivial ASGI endpoint; the endpoint alone is timed alternately.

    uv run python -m bench.origin_rule
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from starlette.types import ASGIApp, Scope

from app.api.origins import BrowserOriginMiddleware, OriginPolicy

EXTENSION = b"chrome-extension://abcdefghijklmnopabcdefghijklmnop"


async def endpoint(scope: Scope, receive: Any, send: Any) -> None:
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


async def discard(message: Any) -> None:
    pass


async def one_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"{}"}


def capture_scope(origin: bytes | None) -> Scope:
    """The headers an interceptor's capture request carries (httpx's, or a browser's)."""
    headers = [
        (b"host", b"127.0.0.1:37777"),
        (b"user-agent", b"python-httpx/0.28"),
        (b"accept", b"*/*"),
        (b"accept-encoding", b"gzip"),
        (b"connection", b"keep-alive"),
        (b"content-type", b"application/json"),
        (b"content-length", b"900"),
    ]
    if origin is not None:
        headers.insert(3, (b"origin", origin))
    return {"type": "http", "method": "POST", "path": "/api/observe", "headers": headers}


async def per_request_us(app: ASGIApp, scope: Scope, requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        await app(scope, one_body, discard)
    return (time.perf_counter() - start) / requests * 1e6


async def main(rounds: int, requests: int) -> None:
    wrapped = BrowserOriginMiddleware(endpoint, policy=OriginPolicy())
    for label, origin in (("no Origin", None), ("an extension's Origin", EXTENSION)):
        scope = capture_scope(origin)
        alone, ruled = [], []
        for _ in range(rounds):
            alone.append(await per_request_us(endpoint, scope, requests))
            ruled.append(await per_request_us(wrapped, scope, requests))
        base, with_rule = statistics.median(alone), statistics.median(ruled)
        print(
            f"{label}: endpoint alone {base:.3f} µs, with the rule {with_rule:.3f} µs, "
            f"the rule {with_rule - base:.3f} µs a request (medians of {rounds} rounds)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200_000, help="a round")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.requests))
