"""Running the real `agmem` command in a subprocess, with a controlled environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

AGMEM = str(Path(sys.executable).parent / "agmem")

# Variables a developer's shell may carry that would change what the command does.
_SCRUBBED = ("DATABASE_URL", "GEMINI_API_KEY", "TEST_DATABASE_URL")


def agmem_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED and not k.startswith("AGMEM_")}
    env.update(overrides)
    return env


def run_agmem(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGMEM, *args],
        env=agmem_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def invoke_agmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`agmem <args>` run in this process by click's test runner, with `run_agmem`'s environment:
    its exit code and its stdout and stderr, apart.

    For a command on an external database whose test asserts only what it prints and its exit
    code: a new interpreter costs ~1 s of CPU for its imports. What only a process has (the
    executable's entry: signals, arguments the locale cannot decode, an embedded server stopped
    at exit, bytecode) stays with `run_agmem`, which every command keeps at least one test of.
    An exception escaping the command is raised here, as the process would print its traceback.
    """
    from typer.testing import CliRunner

    from app.cli import cli

    unset: dict[str, str | None] = {
        name: None for name in os.environ if name in _SCRUBBED or name.startswith("AGMEM_")
    }
    result = CliRunner().invoke(cli, list(args), env={**unset, **env})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(
        ["agmem", *args], result.exit_code, result.stdout, result.stderr
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_health(
    port: int, process: subprocess.Popen[str], timeout: float = 120
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"agmem serve exited with {process.returncode}: {output}")
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            if response.status_code == 200:
                body: dict[str, object] = response.json()
                return body
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"agmem serve did not answer /health on port {port} in {timeout}s")


def spawn_agmem(*args: str, **env: str) -> subprocess.Popen[str]:
    """`agmem <args>` running, its stderr merged into its stdout."""
    return subprocess.Popen(
        [AGMEM, *args],
        env=agmem_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def start_serve(port: int, *args: str, **env: str) -> subprocess.Popen[str]:
    return spawn_agmem("serve", "--port", str(port), *args, **env)


def read_banner(process: subprocess.Popen[str], marker: str = "serving on") -> list[str]:
    """The command's output up to its line holding `marker` (or its error)."""
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if marker in line or "error" in line:
            break
    return lines


def serve_on(home: Path) -> tuple[int, subprocess.Popen[str]]:
    """`agmem serve` on the embedded server of `home`, answering /health; its port and process."""
    port = free_port()
    server = start_serve(port, AGMEM_HOME=str(home))
    try:
        wait_for_health(port, server)
    except BaseException:
        server.kill()
        server.wait()
        raise
    return port, server


def running_postmaster(home: Path) -> str:
    """The pid `postmaster.pid` of `home`'s embedded server names."""
    return (home / "pgdata" / "postmaster.pid").read_text().split()[0]
