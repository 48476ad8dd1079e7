"""Round trip of an MCP tool call over stdio (`agmem mcp`), two source trees alternated.

Run: `uv run python -m bench.mcp_stdio [--calls 300] [--rounds 4] [TREE ...]` (default: this
tree only; give e.g. a worktree of main and this one to compare). Each round starts `agmem mcp`
from each tree in turn (the order reversed every other round) with its own embedded PostgreSQL,
writes one memory, warms up with 30 reads, then times `--calls` sequential `read_memory` calls
(request written, answer line read) and the server's CPU time over them (/proc). Start-up is
not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from bench.scratch import scratch_folder

HERE = str(Path(__file__).resolve().parent.parent)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, tree: str, home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env = {k: v for k, v in env.items() if not k.startswith("AGMEM_")}
        env["AGMEM_HOME"] = str(home)
        run = f"import sys; sys.path.insert(0, {tree!r}); from app.entry import main; main()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", run, "mcp", "-p", tempfile.gettempdir()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.sent = 0

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.sent += 1
        message = {"jsonrpc": "2.0", "id": self.sent, "method": method, "params": params or {}}
        stdin: IO[bytes] | None = self.process.stdin
        stdout: IO[bytes] | None = self.process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()
        answer: dict[str, Any] = json.loads(stdout.readline())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()  # its server is then stopped with the home (`scratch_folder`)
            self.process.wait()


def measure(tree: str, calls: int) -> tuple[float, float]:
    """The median round trip and the server's CPU per call, in ms."""
    with scratch_folder("agmem-bench-mcp-") as home:
        server = Server(tree, home)
        try:
            return calls_measured(server, calls)
        finally:
            server.close()  # its exit stops the embedded server; one that hung is stopped after


def calls_measured(server: Server, calls: int) -> tuple[float, float]:
    client = {"name": "bench", "version": "1"}
    server.call(
        "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
    )
    read = {"name": "read_memory", "arguments": {"key": "current.task"}}
    server.call(
        "tools/call",
        {"name": "write_memory", "arguments": {"key": "current.task", "value": "auth"}},
    )
    for _ in range(30):
        server.call("tools/call", read)
    before = cpu_seconds(server.process.pid)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        answer = server.call("tools/call", read)
        times.append(time.perf_counter() - start)
        assert not answer["result"].get("isError"), answer
    cpu = cpu_seconds(server.process.pid) - before
    return statistics.median(times) * 1000, cpu / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("trees", nargs="*", default=[HERE])
    args = parser.parse_args()
    print(os.popen("uptime").read().strip())
    results: dict[str, list[tuple[float, float]]] = {tree: [] for tree in args.trees}
    for round_ in range(args.rounds):
        order = args.trees if round_ % 2 == 0 else args.trees[::-1]
        for tree in order:
            median, cpu = measure(tree, args.calls)
            results[tree].append((median, cpu))
            print(f"round {round_} {tree}: median {median:.2f} ms, server CPU {cpu:.2f} ms/call")
    for tree, found in results.items():
        medians = statistics.median(m for m, _ in found)
        cpus = statistics.median(c for _, c in found)
        print(f"{tree}: median of medians {medians:.2f} ms, server CPU {cpus:.2f} ms/call")
    print(os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
