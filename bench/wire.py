"""CPU of `agmem serve`'s HTTP protocol (app/cli/wire.py) against other trees'.

Cases. `request`: a keep-alive POST of an observe's size is fed through `data_received` to a
no-op ASGI app on a fake transport, the CPU per request. `chunks`: a POST whose chunked body is
100,000 chunks of one byte, fed in reads of 64 KiB as a socket gives them, the CPU per body (each
chunk's framing is followed beside llhttp: rev-mends22 measured it at 2.8 times the parse); the
other `chunks-*` cases are such bodies in other forms or reads (`CHUNK_FORMS`). All
are what the protocol class costs, without the app, the socket or Postgres (bench.capture's noise
is larger than the difference). Each side is measured in a process of its own, by this harness and
this interpreter, with `app` imported from its tree: its wire.py with its own stalls.py,
headers.py, refusals.py and app/cli/http1/ (where it has one), configured as `agmem serve`
configures it. (The other side was its wire.py alone, loaded over this tree's modules and left
unconfigured: a change to those modules was on both sides, and the class it measured was not the
one served.) The sides alternate, a process each, round by round, the first each round in turn;
each warms up before it is timed; the medians are printed, with this tree's ratio to each other
one's. `--against` names another tree (or its app/cli/wire.py), once or more, e.g.

    git worktree add --detach /tmp/wire-main main
    uv run python -m bench.wire --against /tmp/wire-main --against /tmp/wire-older
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

from bench.trees import measure_in

TREE = Path(__file__).resolve().parent.parent
BODY = b'{"sessionId": "s", "toolName": "read_file", "args": "' + b"x" * 4000 + b'"}'
REQUEST = (
    b"POST /api/observe HTTP/1.1\r\nHost: 127.0.0.1:37777\r\nContent-Type: application/json\r\n"
    b"User-Agent: node\r\nAccept: */*\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY
WARMUP = 2_000  # requests before the timed ones: the first few hundred cost more
CHUNKS = 100_000
CHUNKED_HEAD = (
    b"POST /api/observe HTTP/1.1\r\nHost: 127.0.0.1:37777\r\nTransfer-Encoding: chunked\r\n\r\n"
)
READ = 64 * 1024  # what a socket's read gives of a large body
# The chunks cases: a 1-byte chunk's form, the read size and the chunks a body. `chunks` is the
# plain form the small-chunk run takes; the others are forms it does not take (each chunk's framing
# read a line at a time, and no run tried after it: rev-wire23 saw them 1.3-1.5 times as slow as
# 5c0a06b's when it was) and the plain form in reads of 7 bytes, about one chunk each. (A size line
# ended by a bare LF is llhttp's 400 at its first chunk: bench/chunk_framing.py times its framing.)
CHUNK_FORMS = {
    "chunks": (b"1\r\nx\r\n", READ, CHUNKS),
    "chunks-extension": (b"1;a\r\nx\r\n", READ, CHUNKS),
    "chunks-leading-zero": (b"01\r\nx\r\n", READ, CHUNKS),
    "chunks-7-byte-reads": (b"1\r\nx\r\n", 7, CHUNKS // 10),
}
BODIES = 5  # chunked bodies timed a round, one warming up before them
UNITS = {"request": "µs/request"} | {
    case: f"ms a body of {count:,} 1-byte chunks ({form!r}, reads of {read:,} bytes)"
    for case, (form, read, count) in CHUNK_FORMS.items()
}


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


def tree_of(path: Path) -> Path:
    """The tree `path` names, itself or as its app/cli/wire.py."""
    path = path.resolve()
    if path.is_file():
        path = path.parents[2]
    if not (path / "app" / "cli" / "wire.py").is_file():
        raise SystemExit(f"{path} holds no app/cli/wire.py")
    return path


def connected(protocol_class: Any) -> tuple[Any, Transport]:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    config = Config(noop_app, http=protocol_class, log_level="warning", access_log=False)
    config.limit_concurrency = 1001  # as `agmem serve` sets it
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def per_request_us(protocol_class: Any, requests: int) -> float:
    protocol, transport = connected(protocol_class)
    started = time.process_time()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        await asyncio.sleep(0)  # the request's task runs and answers
        await asyncio.sleep(0)
    took = time.process_time() - started
    assert transport.writes >= requests, "a request was not answered"
    protocol.connection_lost(None)
    return took / requests * 1e6


async def per_body_ms(protocol_class: Any, bodies: int, case: str) -> float:
    """The median CPU of a chunked body's request, its reads fed as the app takes them."""
    form, read, count = CHUNK_FORMS[case]
    chunked = CHUNKED_HEAD + form * count + b"0\r\n\r\n"
    protocol, transport = connected(protocol_class)
    reads = [chunked[at : at + read] for at in range(0, len(chunked), read)]
    took = []
    for index in range(bodies):
        started = time.process_time()
        for data in reads:
            protocol.data_received(data)
            await asyncio.sleep(0)  # the app reads what came
        for _ in range(4):
            await asyncio.sleep(0)  # ... and answers
        took.append(time.process_time() - started)
        assert transport.writes >= index + 1, "the chunked request was not answered"
    protocol.connection_lost(None)
    return statistics.median(took) * 1e3


def measure(tree: Path, case: str, requests: int) -> None:
    """One side's round of a case, in this process: `app` from `tree`. Prints its figure and the
    files its protocol came from, as JSON."""
    sys.path.insert(0, str(tree))
    from app.cli import headers, refusals, stalls, wire

    modules = [wire, headers, stalls, refusals]
    modules += [m for n, m in sorted(sys.modules.items()) if n.startswith("app.cli.http1.")]
    files = [str(Path(str(module.__file__)).resolve()) for module in modules]
    if not all(Path(file).is_relative_to(tree) for file in files):
        raise SystemExit(f"app was not imported from {tree}: {files}")
    protocol_class = wire.JsonErrorsProtocol.configured(idle_timeout=60.0)
    if case in CHUNK_FORMS:
        figure = asyncio.run(per_body_ms(protocol_class, 1 + BODIES, case))
    else:
        asyncio.run(per_request_us(protocol_class, WARMUP))
        figure = asyncio.run(per_request_us(protocol_class, requests))
    print(json.dumps({"figure": figure, "files": files}))


def round_of(tree: Path, case: str, requests: int) -> tuple[float, list[str]]:
    result = measure_in(__file__, tree, "--case", case, "--requests", str(requests))
    return float(result["figure"]), list(result["files"])


def run(against: list[Path], cases: list[str], requests: int, rounds: int) -> None:
    trees = {"this tree": TREE} | {str(tree): tree for tree in against}
    results = {(case, name): list[float]() for case in cases for name in trees}
    for index in range(rounds):
        order = list(trees.items())
        shift = index % len(order)  # each tree first in turn
        for case in cases:
            for name, tree in order[shift:] + order[:shift]:
                figure, files = round_of(tree, case, requests)
                if not index and case == cases[0]:
                    print(f"{name}: " + ", ".join(files))
                results[case, name].append(figure)
    for case in cases:
        ours = statistics.median(results[case, "this tree"])
        for name in trees:
            values = results[case, name]
            median = statistics.median(values)
            shown = " ".join(f"{value:.2f}" for value in values)
            ratio = "" if name == "this tree" else f"; this tree / it {ours / median:.2f}"
            print(f"{name}: median {median:.2f} {UNITS[case]} CPU ({shown}){ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        help="another tree, or its app/cli/wire.py (required; once or more)",
    )
    parser.add_argument("--case", choices=sorted(UNITS), action="append", help="default: both")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.measure is not None:
        measure(tree_of(args.measure), (args.case or ["request"])[0], args.requests)
        return
    if args.against is None:
        parser.error("--against is required")
    cases = args.case or list(UNITS)
    run([tree_of(tree) for tree in args.against], cases, args.requests, args.rounds)


if __name__ == "__main__":
    main()
