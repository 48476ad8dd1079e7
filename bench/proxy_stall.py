"""Other requests' latency while the Gemini proxy takes a large request, two trees alternated.

Run: `uv run python -m bench.proxy_stall [--mb 7.6] [--calls 5] [--runs 3] [--against DIR]`
(DIR: another checkout, e.g. /work/notes27/bmain, or a venv).
A fake upstream (tests/fakes/gemini.py) answers `generateContent` in a child process. Each run
starts each tree's `agmem serve --no-worker` (the order reversed every other run) on a bench
database, and sends `--calls` proxied requests of `--mb` MB (a long conversation whose system
instruction holds an older `<memory>` block, as a client sends back its last turn's: the proxy
replaces it) while another connection asks `GET /health` over and over. It prints, per tree,
the median of each call's slowest /health and the slowest of all: how long the event loop
stalled on the large body.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.db import bench_database
from bench.resume_client import (
    alternated,
    fake_and_server_ports,
    print_ratio,
    seed,
    serve,
    tree_options,
    trees_of,
)

PROJECT = "/tmp/proxy-stall-bench-project"

FAKE = """
import sys
from http.server import ThreadingHTTPServer
from tests.fakes.gemini import FakeGemini, FakeResponse, _handler, text_answer
fake = FakeGemini()
fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Done.")))
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _handler(fake)).serve_forever(0.05)
"""


def large_body(megabytes: float) -> bytes:
    turn = "Refactor the session middleware to read the JWT from the cookie. " * 60
    contents = []
    while len(contents) * len(turn) < megabytes * 1_000_000:
        role = "user" if len(contents) % 2 == 0 else "model"
        contents.append({"role": role, "parts": [{"text": f"{len(contents)} {turn}"}]})
    contents.append({"role": "user", "parts": [{"text": "What is left on the auth work?"}]})
    system = {"parts": [{"text": "<memory>an older turn's block</memory>\nBe brief."}]}
    body = {"systemInstruction": system, "contents": contents}
    return json.dumps(body).encode()


def probe(port: int, done: threading.Event, worst: list[float]) -> None:
    """Ask /health until `done`; the slowest answer's milliseconds go to `worst[0]`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not done.is_set():
        start = time.perf_counter()
        connection.request("GET", "/health")
        connection.getresponse().read()
        worst[0] = max(worst[0], (time.perf_counter() - start) * 1000)
        time.sleep(0.002)
    connection.close()


def slowest_probes(port: int, body: bytes, calls: int) -> list[float]:
    """Per large call, the slowest /health (ms) answered while it was in flight."""
    slowest: list[float] = []
    for _ in range(calls + 1):  # the first warms the route and the block; not counted
        done = threading.Event()
        worst = [0.0]
        prober = threading.Thread(target=probe, args=(port, done, worst))
        prober.start()
        time.sleep(0.05)
        caller = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"content-type": "application/json", "x-agmem-project": PROJECT}
        caller.request("POST", "/v1beta/models/bench:generateContent", body, headers)
        answer = caller.getresponse()
        answer.read()
        caller.close()
        done.set()
        prober.join()
        if answer.status != 200:
            raise SystemExit(f"the proxied call answered {answer.status}")
        slowest.append(worst[0])
    return slowest[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=7.6)
    parser.add_argument("--calls", type=int, default=5)
    tree_options(parser)
    options = parser.parse_args()
    Path(PROJECT).mkdir(exist_ok=True)
    trees = trees_of(options)
    body = large_body(options.mb)
    worst: dict[str, list[float]] = {name: [] for name in trees}
    with (
        fake_and_server_ports(options, FAKE) as (fake_port, serve_port),
        bench_database("agmem_bench_proxy_stall") as url,
    ):
        settings = {"AGMEM_GEMINI_UPSTREAM": f"http://127.0.0.1:{fake_port}"}
        seed(trees["this"], url, PROJECT)
        for name in alternated(trees, options.runs):
            with tempfile.TemporaryDirectory(prefix="proxy-stall-home-") as home:
                process, port = serve(trees[name], url, home, serve_port, settings)
                try:
                    worst[name] += slowest_probes(port, body, options.calls)
                finally:
                    process.terminate()
                    process.communicate(timeout=60)
    print(f"body: {len(body) / 1e6:.1f} MB; slowest /health per proxied call, ms")
    for name, values in worst.items():
        print(f"{name}: median {statistics.median(values):.0f}, max {max(values):.0f}")
    print_ratio(worst)


if __name__ == "__main__":
    main()
