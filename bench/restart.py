"""How long requests fail after the embedded PostgreSQL is killed under `agmem serve`.

Starts `agmem serve` (no worker) on a fresh embedded server in a temporary home, warms the three
database paths (SQLAlchemy for /health and lists, the raw pools of memory reads and capture),
SIGKILLs the postmaster, and polls each path until it answers again: the seconds from the kill
to its first success, how many requests failed on the way, and every status seen (only 503s and
successes are allowed). Repeats for `--rounds` kills on the same server.

    uv run python -m bench.restart --rounds 5
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.scratch import scratch_folder
from bench.serve import run_server

SESSION = {"projectPath": "/tmp/bench-restart", "id": "bench-restart"}
OBSERVE = {"sessionId": "bench-restart", "functionName": "read_file", "functionArgs": {"p": 1}}
PATHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "health": ("GET", "/health", {}),
    "list": ("GET", "/api/memories", {"params": {"scope": "global"}}),
    "read": ("GET", "/api/memories/k", {"params": {"scope": "global"}}),
    "observe": ("POST", "/api/observe", {"json": OBSERVE}),
}


def kill_and_time(base: str, pgdata: Path, timeout: float) -> dict[str, tuple[float, int]]:
    """Per path: seconds from the kill to the first success, and the failures before it."""
    for _ in range(20):  # every pool holds connections to the server about to die
        for method, path, kwargs in PATHS.values():
            httpx.request(method, base + path, timeout=10, **kwargs).raise_for_status()
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    recovered: dict[str, tuple[float, int]] = {}
    failures = dict.fromkeys(PATHS, 0)
    while len(recovered) < len(PATHS):
        if time.monotonic() - killed_at > timeout:
            raise SystemExit(
                f"not recovered after {timeout}s: {sorted(set(PATHS) - set(recovered))}"
            )
        for name, (method, path, kwargs) in PATHS.items():
            if name in recovered:
                continue
            answer = httpx.request(method, base + path, timeout=10, **kwargs)
            if answer.is_success:
                recovered[name] = (time.monotonic() - killed_at, failures[name])
            elif answer.status_code == 503:
                failures[name] += 1
            else:
                raise SystemExit(f"{name}: {answer.status_code} {answer.text}")
        time.sleep(0.05)
    return recovered


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.restart", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="kills of the same server")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to recover, at most")
    args = parser.parse_args()
    with scratch_folder("agmem-bench-restart-") as folder:
        home = Path(folder) / "home"
        env = {"AGMEM_HOME": str(home), "DATABASE_URL": ""}
        with run_server(kind="agmem", log_dir=Path(folder), env=env) as server:
            httpx.put(f"{server.url}/api/memories/k", json={"value": 1, "scope": "global"})
            httpx.post(f"{server.url}/api/session/start", json=SESSION)
            rounds = []
            for n in range(args.rounds):
                result = kill_and_time(server.url, home / "pgdata", args.timeout)
                rounds.append(result)
                shown = ", ".join(f"{k} {s:.2f} s ({f} failed)" for k, (s, f) in result.items())
                print(f"kill {n + 1}: {shown}")
            for name in PATHS:
                seconds = [result[name][0] for result in rounds]
                print(
                    f"{name:8} back after median {statistics.median(seconds):.2f} s "
                    f"(min {min(seconds):.2f}, max {max(seconds):.2f})"
                )


if __name__ == "__main__":
    main()
