"""CPU per request of `agmem serve`'s HTTP protocol (app/cli/wire.py) against another version.

A keep-alive POST of an observe's size is fed through `data_received` to a no-op ASGI app on a
fake transport, in process: what the protocol class costs, without the app, the socket or
Postgres (bench.capture's noise is larger than the difference). The two classes alternate, round
by round; the medians are printed. `--against` names the other version's file, e.g.

    git show main:app/cli/wire.py > /tmp/wire_main.py
    uv run python -m bench.wire --against /tmp/wire_main.py
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from app.cli.wire import JsonErrorsProtocol

BODY = b'{"sessionId": "s", "toolName": "read_file", "args": "' + b"x" * 4000 + b'"}'
REQUEST = (
    b"POST /api/observe HTTP/1.1\r\nHost: 127.0.0.1:37777\r\nContent-Type: application/json\r\n"
    b"User-Agent: node\r\nAccept: */*\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY


async def noop_app(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


class Transport:
    def __init__(self) -> None:
        self.closing = False
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"sockname": ("127.0.0.1", 37777), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def load_protocol(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("wire_against", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JsonErrorsProtocol


async def per_request_us(protocol_class: Any, requests: int) -> float:
    config = Config(noop_app, http=protocol_class, log_level="warning", access_log=False)
    config.limit_concurrency = 1001  # as `agmem serve` sets it
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    started = time.process_time()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        await asyncio.sleep(0)  # the request's task runs and answers
        await asyncio.sleep(0)
    took = time.process_time() - started
    assert transport.writes >= requests, "a request was not answered"
    protocol.connection_lost(None)
    return took / requests * 1e6


async def run(against: Path, requests: int, rounds: int) -> None:
    classes = {
        "this tree": JsonErrorsProtocol.configured(idle_timeout=60.0),
        str(against): load_protocol(against),
    }
    results: dict[str, list[float]] = {name: [] for name in classes}
    for _ in range(rounds):
        for name, protocol_class in classes.items():
            results[name].append(await per_request_us(protocol_class, requests))
    for name, values in results.items():
        shown = " ".join(f"{value:.2f}" for value in values)
        print(f"{name}: median {statistics.median(values):.2f} µs/request CPU ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="another app/cli/wire.py")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(run(args.against, args.requests, args.rounds))


if __name__ == "__main__":
    main()
