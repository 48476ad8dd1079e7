"""A new `agmem serve`'s first and second request on each hot route, two trees alternated.

Run: `uv run python -m bench.first_requests [--runs 5] [--against /work/notes23/bmain]`.
Each run starts the tree's `agmem serve --no-worker` (no worker polling beside the requests) on a
bench database (bench/db.py) its own `agmem migrate` brought to its head, waits for /health, then
sends each hot route two requests in turn: `POST /api/session/start`, `/api/observe` (6 KB of
arguments), `/api/observe/result`, `/api/search`, `GET /api/context`, each pair before the next
route's (so a route's first request is the process's first on that route). It prints per route
the median wall milliseconds of the first and of the second request over `--runs` and their
ratio, and given `--against` (another checkout, or a venv) the other tree's, run for run in turn
(the order reversed every other run), and the ratios this/other of the first and the second.
What the first pays beyond the second is what the process left to its
first request on that route.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.db import bench_database
from bench.startup import HERE, environment, free_port, prepare, venv_of

PROJECT = "/tmp/startup-bench-project"
ROUTES = ["session/start", "observe", "observe/result", "search", "context"]


def call(port: int, method: str, path: str, body: dict[str, object] | None = None) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        content: bytes = answer.read()
        return content


def requests(port: int) -> dict[str, Callable[[], object]]:
    """Per route, a request that may be sent twice (each session and tool call new)."""
    sessions: list[str] = []
    calls: list[str] = []

    def start() -> None:
        answer = json.loads(call(port, "POST", "/api/session/start", {"projectPath": PROJECT}))
        sessions.append(answer["id"])

    def observe() -> None:
        calls.append(uuid.uuid4().hex)
        args = {"path": "src/app.py", "content": "def handler(event):\n    return event\n" * 150}
        body = {"sessionId": sessions[-1], "id": calls[-1], "functionName": "write_file"}
        call(port, "POST", "/api/observe", {**body, "functionArgs": args})

    def result() -> None:
        body = {"sessionId": sessions[-1], "observationId": calls.pop(0)}
        call(
            port,
            "POST",
            "/api/observe/result",
            {**body, "functionName": "write_file"} | {"result": "ok " * 2000},
        )

    def search() -> None:
        call(port, "POST", "/api/search", {"query": "deployment notes", "projectPath": PROJECT})

    def context() -> None:
        query = urllib.parse.urlencode({"projectPath": PROJECT, "prompt": "deploy staging"})
        call(port, "GET", f"/api/context?{query}")

    return {
        "session/start": start,
        "observe": observe,
        "observe/result": result,
        "search": search,
        "context": context,
    }


def run_once(venv: Path, url: str, home: str) -> dict[str, tuple[float, float]]:
    """Per route, the wall seconds of a new server's first and second request."""
    port = free_port()
    process = subprocess.Popen(
        [str(venv / "bin" / "agmem"), "serve", "--host", "127.0.0.1", "--port", str(port)]
        + ["--no-worker"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=environment(url, home),
    )
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if process.poll() is not None:
                    raise SystemExit(f"{venv}: agmem serve exited") from None
                time.sleep(0.01)
        times: dict[str, tuple[float, float]] = {}
        for route, send in requests(port).items():
            pair = []
            for _ in range(2):
                start = time.perf_counter()
                send()
                pair.append(time.perf_counter() - start)
            times[route] = (pair[0], pair[1])
        return times
    finally:
        process.terminate()
        process.communicate(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (its .venv is used) or venv, e.g. /work/notes23/bmain",
    )
    options = parser.parse_args()
    venvs = [HERE / ".venv", *([venv_of(options.against)] if options.against else [])]
    results: dict[Path, list[dict[str, tuple[float, float]]]] = {v: [] for v in venvs}
    with contextlib.ExitStack() as stack:
        urls: dict[Path, str] = {}
        homes: dict[Path, str] = {}
        for venv in venvs:
            urls[venv] = stack.enter_context(bench_database("agmem_first", upgrade=False))
            homes[venv] = stack.enter_context(tempfile.TemporaryDirectory(prefix="first-bench-"))
            prepare(venv, urls[venv], homes[venv], None)
        for run in range(options.runs):
            for venv in venvs if run % 2 == 0 else venvs[::-1]:
                results[venv].append(run_once(venv, urls[venv], homes[venv]))

    def medians(venv: Path, route: str) -> tuple[float, float]:
        firsts = [r[route][0] for r in results[venv]]
        seconds = [r[route][1] for r in results[venv]]
        return statistics.median(firsts) * 1e3, statistics.median(seconds) * 1e3

    print(f"median of {options.runs} runs, wall ms of a new server's 1st and 2nd request")
    if len(venvs) == 2:
        print("x = this / other; 1st/2nd = the 1st request's wall over the 2nd's, per tree")
    head = f"{'route':<16} {'1st':>7} {'2nd':>7} {'1st/2nd':>7}"
    if len(venvs) == 2:
        head += f" {'other 1st':>9} {'other 2nd':>9} {'1st/2nd':>7} {'1st x':>6} {'2nd x':>6}"
    print(head)
    for route in ROUTES:
        first, second = medians(venvs[0], route)
        line = f"{route:<16} {first:>7.1f} {second:>7.1f} {first / second:>7.2f}"
        if len(venvs) == 2:
            other_first, other_second = medians(venvs[1], route)
            line += f" {other_first:>9.1f} {other_second:>9.1f}"
            line += f" {other_first / other_second:>7.2f}"
            line += f" {first / other_first:>6.2f} {second / other_second:>6.2f}"
        print(line)


if __name__ == "__main__":
    main()
