"""What an `agmem` process costs before its first useful output, per command, two trees alternated.

Run: `uv run python -m bench.startup [--runs 5] [--against /work/notes23/bmain] [COMMAND ...]`.
Each run starts the tree's `agmem` (its venv's editable install is its checkout) and stops the
clock at the command's first useful output: its exit for a one-shot command (`help` is
`--help`, `status`, `sync`, `search` (`--json`), `memory get`, `redact --dry-run`, `migrate`),
`/health` answering 200 for `serve` and `serve-embedded`, the `initialize` answer for `mcp`, its
"worker on" line (printed as it starts polling) for `worker`. For `serve` it then times its
first capture (POST /api/session/start, /api/observe with 6 KB of arguments,
/api/observe/result), which must not pay what start-up no longer does, and then its first
request to /mcp (`initialize`), which loads the MCP server since it is no longer loaded at
start. It prints per command the median wall and CPU (the process's user + system time, from
/proc or its rusage; the embedded PostgreSQL's is not counted) over `--runs`; given `--against`
(another checkout, or a venv), that tree's too, run for run in turn (the order reversed every
other run), and the ratio this/other.

Each tree's commands run against a bench database (bench/db.py) its own `agmem migrate` brought
to its head, through DATABASE_URL, so what is timed is the process, not an embedded server's
start (and an older checkout is not refused a schema a newer one migrated); the local embedding
provider. `serve-embedded` (`mcp-embedded`, `worker-embedded`) is `agmem serve` (`mcp`,
`worker`) as a user first runs it: no DATABASE_URL, the embedded PostgreSQL of a temporary
AGMEM_HOME (created and migrated before the runs, so each run starts and stops that server, as
every start after the first does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.db import bench_database

HERE = Path(__file__).resolve().parent.parent

# name -> (arguments, how the first useful output is awaited)
COMMANDS: dict[str, tuple[list[str], str]] = {
    "help": (["--help"], "exit"),
    "serve": (["serve", "--host", "127.0.0.1"], "health"),
    "serve-embedded": (["serve", "--host", "127.0.0.1"], "health"),
    "mcp": (["mcp", "-p", "/tmp/startup-bench-project"], "initialize"),
    "mcp-embedded": (["mcp", "-p", "/tmp/startup-bench-project"], "initialize"),
    "worker": (["worker"], "worker-line"),
    "worker-embedded": (["worker"], "worker-line"),
    "status": (["status"], "exit"),
    "sync": (["sync", "-p", "/tmp/startup-bench-project"], "exit"),
    "search": (["search", "deployment notes", "--json"], "exit"),
    "memory get": (["memory", "get", "current.task", "-p", "/tmp/startup-bench-project"], "exit"),
    "redact --dry-run": (["redact", "--dry-run"], "exit"),
    "migrate": (["migrate"], "exit"),
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(url: str | None, home: str) -> dict[str, str]:
    """The command's environment: `url` as DATABASE_URL, or none (the embedded server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGMEM_", "GEMINI_"))}
    env.pop("DATABASE_URL", None)
    env |= {"AGMEM_HOME": home, "AGMEM_LOG_LEVEL": "warning"}
    if url is not None:
        env["DATABASE_URL"] = url
    env.pop("VIRTUAL_ENV", None)
    return env


def post(port: int, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        parsed: dict[str, object] = json.loads(answer.read())
        return parsed


def first_capture(port: int) -> float:
    """Wall seconds of a new server's first capture: a session, a tool call and its result."""
    start = time.perf_counter()
    session = post(port, "/api/session/start", {"projectPath": "/tmp/startup-bench-project"})
    args = {"path": "src/app.py", "content": "def handler(event):\n    return event\n" * 150}
    call_id = uuid.uuid4().hex
    call = {"sessionId": session["id"], "id": call_id, "functionName": "write_file"}
    post(port, "/api/observe", {**call, "functionArgs": args})
    result = {"sessionId": session["id"], "observationId": call_id, "functionName": "write_file"}
    post(port, "/api/observe/result", {**result, "result": "ok " * 2000})
    return time.perf_counter() - start


def first_mcp(port: int) -> float:
    """Wall seconds of a new server's first MCP request (`initialize` over streamable HTTP)."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        data=json.dumps(hello).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        if b'"result"' not in answer.read():
            raise SystemExit("/mcp did not answer initialize")
    return time.perf_counter() - start


Firsts = tuple[float, float] | None  # `serve`'s first capture and first MCP request, wall s


def run_once(venv: Path, command: str, url: str | None, home: str) -> tuple[float, float, Firsts]:
    """Wall and CPU seconds from the start of `agmem <command>` to its first useful output, and
    for `serve` the wall seconds of its first capture and of its first MCP request."""
    arguments, until = COMMANDS[command]
    agmem = str(venv / "bin" / "agmem")
    env = environment(None if command.endswith("-embedded") else url, home)
    if until == "health":
        port = free_port()
        arguments = [*arguments, "--port", str(port)]
    start = time.perf_counter()
    if until == "exit":
        process = subprocess.Popen(
            [agmem, *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        stderr = process.stderr.read() if process.stderr else b""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{venv}: agmem {command} failed: {stderr.decode()}")
        return wall, usage.ru_utime + usage.ru_stime, None
    process = subprocess.Popen(
        [agmem, *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        wait: Callable[[], None]
        if until == "health":

            def wait() -> None:
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                            return
                    except OSError:
                        if process.poll() is not None:
                            raise SystemExit(f"{venv}: agmem serve exited") from None
                        time.sleep(0.01)

        elif until == "initialize":

            def wait() -> None:
                assert process.stdin is not None
                assert process.stdout is not None
                hello = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"},
                    },
                }
                process.stdin.write(json.dumps(hello).encode() + b"\n")
                process.stdin.flush()
                if b'"result"' not in process.stdout.readline():
                    raise SystemExit(f"{venv}: agmem mcp did not answer initialize")

        else:

            def wait() -> None:
                assert process.stderr is not None
                for line in process.stderr:
                    if b"worker on" in line:
                        return
                raise SystemExit(f"{venv}: agmem worker said no start line")

        wait()
        wall = time.perf_counter() - start
        cpu = cpu_seconds(process.pid)
        firsts = (first_capture(port), first_mcp(port)) if command == "serve" else None
    finally:
        process.terminate()
        process.communicate(timeout=60)
    return wall, cpu, firsts


def prepare(venv: Path, url: str, home: str, embedded_home: str | None) -> None:
    """One memory for `memory get` and one memory file for `sync` and `search` to find."""
    project = Path("/tmp/startup-bench-project")
    (project / "memory").mkdir(parents=True, exist_ok=True)
    (project / "memory" / "notes.md").write_text("# Deployment notes\nStaging deploys at noon.\n")
    env = environment(url, home)
    agmem = str(venv / "bin" / "agmem")
    for arguments in (
        ["migrate"],
        ["memory", "set", "current.task", "startup", "-p", str(project)],
        ["sync", "-p", str(project)],
    ):
        subprocess.run([agmem, *arguments], env=env, check=True, capture_output=True)
    if embedded_home is not None:  # its cluster created and migrated, as after a first run
        env = environment(None, embedded_home)
        subprocess.run([agmem, "migrate"], env=env, check=True, capture_output=True)


def venv_of(path: Path) -> Path:
    """A checkout's venv (`<path>/.venv`), or `path` itself when it is a venv."""
    return path / ".venv" if (path / ".venv" / "bin" / "agmem").exists() else path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--against",
        "--other",
        dest="against",
        type=Path,
        help="another checkout (its .venv is used) or venv, e.g. /work/notes23/bmain",
    )
    parser.add_argument("commands", nargs="*", help=f"some of: {', '.join(COMMANDS)}")
    options = parser.parse_args()
    options.commands = options.commands or list(COMMANDS)
    unknown = set(options.commands) - set(COMMANDS)
    if unknown:
        parser.error(f"unknown command(s) {sorted(unknown)}; choose from {list(COMMANDS)}")
    venvs = [HERE / ".venv", *([venv_of(options.against)] if options.against else [])]
    results: dict[tuple[Path, str], tuple[list[float], list[float]]] = {
        (v, c): ([], []) for v in venvs for c in options.commands
    }
    captures: dict[Path, list[float]] = {v: [] for v in venvs}
    mcps: dict[Path, list[float]] = {v: [] for v in venvs}
    with contextlib.ExitStack() as stack:
        urls: dict[Path, str] = {}
        homes: dict[Path, str] = {}
        embedded_homes: dict[Path, str] = {}
        for venv in venvs:
            urls[venv] = stack.enter_context(bench_database("agmem_startup", upgrade=False))
            homes[venv] = stack.enter_context(tempfile.TemporaryDirectory(prefix="startup-bench-"))
            embedded = any(command.endswith("-embedded") for command in options.commands)
            if embedded:
                embedded_homes[venv] = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="startup-bench-home-")
                )
            prepare(venv, urls[venv], homes[venv], embedded_homes.get(venv))
        for command in options.commands:
            for run in range(options.runs):
                for venv in venvs if run % 2 == 0 else venvs[::-1]:
                    home = homes[venv]
                    if command.endswith("-embedded"):
                        home = embedded_homes[venv]
                    wall, cpu, firsts = run_once(venv, command, urls[venv], home)
                    results[venv, command][0].append(wall)
                    results[venv, command][1].append(cpu)
                    if firsts is not None:
                        captures[venv].append(firsts[0])
                        mcps[venv].append(firsts[1])
    head = f"{'command':<18} {'wall s':>7} {'cpu s':>7}"
    if len(venvs) == 2:
        head += f" {'other wall':>10} {'other cpu':>9} {'wall x':>7} {'cpu x':>6}"
    print(f"median of {options.runs} runs; x = this / other")
    print(head)
    for command in options.commands:
        wall, cpu = (statistics.median(x) for x in results[venvs[0], command])
        line = f"{command:<18} {wall:>7.3f} {cpu:>7.3f}"
        if len(venvs) == 2:
            other_wall, other_cpu = (statistics.median(x) for x in results[venvs[1], command])
            line += f" {other_wall:>10.3f} {other_cpu:>9.3f}"
            line += f" {wall / other_wall:>7.2f} {cpu / other_cpu:>6.2f}"
        print(line)
    if captures[venvs[0]]:
        first = statistics.median(captures[venvs[0]]) * 1e3
        line = f"serve's first capture (3 requests): {first:.1f} ms"
        if len(venvs) == 2:
            line += f", other {statistics.median(captures[venvs[1]]) * 1e3:.1f} ms"
        print(line)
        first = statistics.median(mcps[venvs[0]]) * 1e3
        line = f"serve's first /mcp request (initialize): {first:.1f} ms"
        if len(venvs) == 2:
            line += f", other {statistics.median(mcps[venvs[1]]) * 1e3:.1f} ms"
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
