"""Run a real server process for benchmarks and process-level tests: free port, ready check, kill.

Used by `bench.capture` and by the SIGKILL durability test, so both exercise the same startup as
`agmem serve`: a separate process, uvicorn with the CLI's settings, a real database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

AGMEM_SERVE = "from app.cli import main; main()"
# The same process setup as `agmem serve`: the startup heap frozen out of garbage collection
# (app/heap.py), then uvicorn with the same settings.
NOOP_SERVE = (
    "import sys, uvicorn; from bench.noop_app import app; "
    "from app.heap import freeze_heap; freeze_heap(); "
    "uvicorn.run(app, host='127.0.0.1', port=int(sys.argv[1]), log_level='warning', "
    "access_log=False)"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no flush; what a crash or OOM kill does."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_ready(server: ServerProcess, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            log = server.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(server.url + path, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not ready on {server.url} after {timeout}s")


@contextlib.contextmanager
def run_server(
    *,
    kind: str,
    log_dir: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    code: str = AGMEM_SERVE,
    tree: Path = ROOT,
) -> Iterator[ServerProcess]:
    """Start `agmem serve` (kind="agmem") or the no-op app (kind="noop") on a free port.

    `code` replaces the `python -c` program that runs `agmem serve` (a diagnostic may wrap it).
    `tree` is the checkout whose code and virtualenv run it (another one: a before/after pair).
    """
    python = sys.executable if tree == ROOT else str(tree / ".venv" / "bin" / "python")
    port = free_port()
    log_path = log_dir / f"{kind}-{port}.log"
    if kind == "agmem":
        argv = [
            python,
            "-c",
            code,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            # The API alone: an in-process worker would compress and embed the captured rows on
            # the same two cores while they are measured (bench/worker.py measures the worker).
            "--no-worker",
        ]
        ready = "/health"
    else:
        argv = [python, "-c", NOOP_SERVE, str(port)]
        ready = "/ready"
    full_env = {**os.environ, "AGMEM_LOG_LEVEL": "warning", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, cwd=tree, env=full_env, stdout=log, stderr=log)
    server = ServerProcess(process, port, log_path)
    try:
        wait_ready(server, ready, timeout)
        yield server
    finally:
        server.stop()
