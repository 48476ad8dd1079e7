"""`agmem serve` on the embedded default: starts, answers, stops on Ctrl-C, keeps data, shares."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.cli.helpers import (
    free_port,
    invoke_agmem,
    read_banner,
    run_agmem,
    running_postmaster,
    serve_on,
    spawn_agmem,
    start_serve,
    wait_for_health,
)
from tests.conftest import libpq_url

pytestmark = pytest.mark.slow


def embedded_url(home: Path) -> str:
    return f"postgresql://postgres:@/postgres?host={home / 'pgdata'}"


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGINT)  # what Ctrl-C sends
    output, _ = process.communicate(timeout=60)
    return output


def test_serve_embedded_survives_restart_stops_postgres_on_ctrl_c_and_restarts_it_killed(
    tmp_path: Path,
) -> None:
    # The second start on the same home also serves the test of a postmaster killed under it:
    # a start of `agmem serve` and of its embedded server fewer (~5 s of CPU, more loaded).
    home = tmp_path / "home"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = start_serve(port, AGMEM_HOME=str(home))
    try:
        health = wait_for_health(port, first)
        assert health["database"] == "ok"
        assert str(health["pgvector"]).startswith("0.")
        with psycopg.connect(embedded_url(home), autocommit=True) as connection:
            connection.execute(
                "INSERT INTO memories (scope, key, value) VALUES ('global', 'survives', '42')"
            )
    finally:
        output = stop(first)
    assert first.returncode == 0, output
    assert "Traceback" not in output
    pidfile = home / "pgdata" / "postmaster.pid"
    assert not pidfile.exists(), "postgres kept running"

    second = start_serve(port, AGMEM_HOME=str(home))
    try:
        wait_for_health(port, second)
        with psycopg.connect(embedded_url(home), autocommit=True) as connection:
            row = connection.execute("SELECT value FROM memories WHERE key = 'survives'").fetchone()
        assert row == (42,)

        # The postmaster killed under a serving process: it starts it again. Each pool holds a
        # connection to the killed server first (a write, a capture).
        stored = httpx.put(f"{base}/api/memories/restarted", json={"value": 7, "scope": "global"})
        assert stored.status_code == 201, stored.text
        session = {"projectPath": "/tmp/p", "id": "killed-postmaster"}
        assert httpx.post(f"{base}/api/session/start", json=session).status_code == 201
        killed = kill_postmaster(home)

        # Health first (SQLAlchemy's pool), then the two raw pools: memory reads and capture.
        health = poll_until_ok("GET", f"{base}/health")
        assert health.json()["database"] == "ok"
        assert int(pidfile.read_text().split()[0]) != killed
        read = poll_until_ok("GET", f"{base}/api/memories/restarted", params={"scope": "global"})
        assert read.json()["value"] == 7
        observe = {
            "sessionId": "killed-postmaster",
            "functionName": "read_file",
            "functionArgs": {"path": "a.py"},
        }
        observed = poll_until_ok("POST", f"{base}/api/observe", json=observe)
        assert observed.status_code == 201
    finally:
        output = stop(second)
    assert second.returncode == 0, output
    assert "Traceback" not in output
    assert "embedded_postgres.restarted" in output
    assert not pidfile.exists(), "postgres kept running after serve stopped"


def test_serve_on_port_0_shares_its_server_and_stops_postgres_on_sigterm(
    embedded_home: Path,
) -> None:
    # Port 0 was refused ("greater than or equal to 1"): a script had to guess a free port and
    # race for it. The banner names the port the OS picked.
    # kill, docker stop and systemd send SIGTERM; uvicorn re-raises it after shutting down.
    # One server for both promises here: its start is most of each test's time.
    home = embedded_home
    server = spawn_agmem("serve", AGMEM_HOME=str(home), AGMEM_PORT="0")
    banner = []
    try:
        banner = read_banner(server)
        found = re.search(r"serving on http://127\.0\.0\.1:(\d+)$", banner[-1].strip())
        assert found, banner
        port = int(found.group(1))
        assert port != 0
        wait_for_health(port, server)

        # A second process on the same home shares the server the first started.
        pid_before = running_postmaster(home)
        status = run_agmem("status", AGMEM_HOME=str(home))
        assert status.returncode == 0, status.stderr
        assert "at head" in status.stdout
        pid_after = running_postmaster(home)
        assert pid_after == pid_before, "a second postgres was started on the same data"
        # The second process leaving must not stop the server the first still uses.
        health = wait_for_health(port, server, timeout=30)
        assert health["database"] == "ok"
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    output = "".join(banner) + output
    assert server.returncode == 0, output
    assert "Traceback" not in output
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


def test_lock_files_a_reboot_left_naming_other_processes_are_recovered(embedded_home: Path) -> None:
    # After a reboot (or a SIGKILL'd server), postmaster.pid and pgserver's handle list name pids
    # that other processes now have. pgserver took the postmaster for running: "database
    # unreachable" until the file was removed by hand, and at exit, its `pg_ctl stop` refused,
    # it killed that process. A handle list naming a live process kept every later agmem process
    # from being the last: the server was never stopped.
    home = embedded_home
    pgdata = home / "pgdata"
    bystander = subprocess.Popen(["sleep", "120"])
    try:
        # postmaster.pid as a running server writes it: pid, folder, start, port, socket, host,
        # shared memory, status.
        (pgdata / "postmaster.pid").write_text(
            f"{bystander.pid}\n{pgdata}\n1700000000\n5432\n{pgdata}\n\n  1234  5\nready   \n"
        )
        handles = pgdata / ".handle_pids.json"
        handles.write_text(f"[{bystander.pid}]")
        before_boot = time.time() - 3600
        os.utime(handles, (before_boot, before_boot))

        again = run_agmem("status", AGMEM_HOME=str(home))

        assert again.returncode == 0, again.stderr
        assert "at head" in again.stdout
        assert bystander.poll() is None, "agmem killed another process"
        assert not (pgdata / "postmaster.pid").exists(), "postgres kept running"
        assert handles.read_text() == "[]"
    finally:
        bystander.kill()
        bystander.wait()


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    # In this process: the refusal's exit and one line as a process gives them are
    # test_a_provider_that_cannot_be_built_stops_the_start_in_one_line's (serve's same `fail`).
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]

        result = invoke_agmem("serve", "--port", str(port), AGMEM_HOME=str(tmp_path))

    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"agmem: error: port {port} on 127.0.0.1 is in use; set AGMEM_PORT or stop its owner"
    )


@pytest.mark.xdist_group("serving")  # the module-scoped `serving` starts once
def test_an_ipv6_host_is_bound_and_named_as_a_url(serving: str) -> None:
    # `[::1]` (the URL form) was refused, "Name or service not known", and `::1` was announced
    # as http://::1:<port>, a URL no client or script can use. `serving` was started so.
    assert re.fullmatch(r"http://\[::1\]:\d+", serving), serving
    health = httpx.get(f"{serving}/health", timeout=30)
    assert health.status_code == 200


def answers(method: str, url: str, **kwargs: object) -> httpx.Response | None:
    """The response, or None when the request could not be sent (the server is down)."""
    try:
        return httpx.request(method, url, timeout=10, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError:
        return None


def poll_until_ok(method: str, url: str, timeout: float = 60, **kwargs: object) -> httpx.Response:
    """Repeat a request until it succeeds; every failure on the way is a 503 in our error shape."""
    deadline = time.monotonic() + timeout
    while True:
        response = answers(method, url, **kwargs)
        assert response is not None, f"{method} {url}: no answer"
        if response.is_success:
            return response
        assert response.status_code == 503, response.text
        assert response.json()["error"] in ("DatabaseUnavailable", "ServiceUnavailable")
        assert time.monotonic() < deadline, f"{method} {url} still 503 after {timeout}s"
        time.sleep(0.2)


def kill_postmaster(home: Path) -> int:
    """SIGKILL the embedded server's postmaster, as the OOM killer does; returns its pid."""
    pid = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    return pid


def test_the_worker_restarts_the_embedded_postgres_after_it_is_killed(embedded_home: Path) -> None:
    # A worker may be the only process left on the embedded server: it restarts it too.
    home = embedded_home
    worker = spawn_agmem("worker", AGMEM_HOME=str(home))
    try:
        assert "worker on" in read_banner(worker, "worker on")[-1]
        killed = kill_postmaster(home)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError, ValueError, IndexError):
                lines = (home / "pgdata" / "postmaster.pid").read_text().splitlines()
                # Its 8th line turns "ready" once it takes connections, as pg_ctl waits for: a
                # connection before that is refused with "the database system is starting up".
                if int(lines[0]) != killed and lines[7].strip() == "ready":
                    break
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker did not restart postgres in 60s"
            time.sleep(0.2)
        with psycopg.connect(embedded_url(home), autocommit=True) as connection:
            assert connection.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert "Traceback" not in output
    assert "embedded_postgres.restarted" in output


@pytest.mark.parametrize(
    ("command", "provider", "reason"),
    [
        ("serve", "gemini", "needs GEMINI_API_KEY, which is not set"),
        ("worker", "gemini", "needs GEMINI_API_KEY, which is not set"),
        ("serve", "sentence-transformers", "needs the optional extra"),
        ("mcp", "gemini", "needs GEMINI_API_KEY, which is not set"),
    ],
)
def test_a_provider_that_cannot_be_built_stops_the_start_in_one_line(
    tmp_path: Path, command: str, provider: str, reason: str
) -> None:
    # serve started, /health said "ok" and every search answered 503, a keyword search too;
    # the worker logged nothing while it left every new row without a vector.
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    result = run_agmem(
        *args,
        AGMEM_HOME=str(tmp_path),
        AGMEM_EMBEDDING_PROVIDER=provider,
        PYTHONPROFILEIMPORTTIME="1",
        timeout=60,
    )

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import ")}
    (line,) = [line for line in lines if not line.startswith("import ")]
    assert line.startswith(f"agmem: error: AGMEM_EMBEDDING_PROVIDER={provider} ")
    assert reason in line
    assert not (tmp_path / "pgdata").exists()  # refused before starting anything
    # Nor after paying for what it would have served with (the MCP SDK: ~1 s of CPU).
    assert not imported & {"mcp", "app.mcp.server", "app.db.supervisor"}


@pytest.fixture(scope="module")
def serving(database_url: str) -> Iterator[str]:
    """One `agmem serve --no-worker` on the test database, for tests that only send it requests
    on connections of their own: the URL its banner names. A start costs ~3-4 s of CPU
    (imports, app, pools), so the one server is also the test of an IPv6 host and port 0: bound
    to `[::1]` (as a user writes it in a URL) on a port the OS picks."""
    server = spawn_agmem(
        "serve", "--no-worker", DATABASE_URL=database_url, AGMEM_HOST="[::1]", AGMEM_PORT="0"
    )
    try:
        banner = read_banner(server)
        found = re.search(r"serving on (http://\S+)$", banner[-1].strip())
        assert found, banner
        # Up before any test's request: a SIGTERM during the start is an exit of 143, not 0.
        assert httpx.get(f"{found.group(1)}/health", timeout=60).status_code == 200
        yield found.group(1)
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output


@pytest.mark.xdist_group("serving")  # the module-scoped `serving` starts once
@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /api/search HTTP/1.1\r\nHost: [::1]\r\nContent-Length: 5\r\n"
        b"Content-Length: 12\r\n\r\n",
        b"GET /api/context/p?prompt=%s HTTP/1.1\r\nHost: [::1]\r\n\r\n" % (b"%E4%B8%AD" * 8000),
    ],
    ids=["request line", "two lengths", "URL over 64 KiB"],
)
def test_a_request_the_parser_refuses_is_a_400_in_the_error_shape(
    serving: str, request_bytes: bytes
) -> None:
    # uvicorn answered these itself in plain text ("Invalid HTTP request received."), before
    # the app, and a client reading every error as JSON failed on it.
    address = httpx.URL(serving)
    with socket.create_connection((address.host, address.port), timeout=30) as connection:
        connection.sendall(request_bytes)
        answer = b""
        while chunk := connection.recv(65536):  # the server closes the connection
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")

    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)
    assert error["error"] == "BadRequest"
    assert "POST /api/context" in error["detail"]


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "agmem: interrupted"), (signal.SIGTERM, 143, "agmem: terminated")],
)
def test_a_second_signal_as_serve_shuts_down_ends_it_quickly_in_one_line(
    embedded_home: Path, signum: int, code: int, line: str
) -> None:
    # Ctrl-C twice ~150 ms apart: uvicorn's second Ctrl-C skipped the app's shutdown, and its
    # tasks (the worker, the embedded server's supervisor) were cancelled by asyncio's exit: a
    # lifespan traceback and exit 0, 5 of 6 times. The second is sent here as uvicorn starts
    # shutting down, before it asks the app to.
    home = embedded_home
    port, server = serve_on(home)
    assert server.stdout is not None
    server.send_signal(signum)
    output = read_banner(server, "Shutting down")
    server.send_signal(signum)
    started = time.monotonic()
    rest, _ = server.communicate(timeout=60)
    took = time.monotonic() - started
    output += rest.splitlines(keepends=True)

    assert server.returncode == code, "".join(output)
    assert "Traceback" not in "".join(output)
    assert output[-1] == f"{line}\n"
    assert "worker.stopped" in "".join(output)  # the app's shutdown ran, hurried
    assert took < 10, "".join(output)
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_second_signal_answers_a_request_in_flight_503_in_the_error_shape(
    db: psycopg.Connection[Any], database_url: str, signum: int, code: int
) -> None:
    # A write held up by a lock (as any slow request) when the second signal came: asyncio's
    # exit cancelled it under the app, "Exception in ASGI application" with psycopg's
    # CancelledError traceback, and the client got uvicorn's plain-text 500.
    port = free_port()
    server = start_serve(port, "--no-worker", DATABASE_URL=database_url)
    wait_for_health(port, server)
    url = f"http://127.0.0.1:{port}/api/memories/in-flight"
    with (
        psycopg.connect(libpq_url(database_url)) as locker,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        locker.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        body = {"value": 1, "scope": "global"}
        answer = pool.submit(httpx.put, url, json=body, timeout=60)
        deadline = time.monotonic() + 30
        while not db.execute("SELECT 1 FROM pg_locks WHERE NOT granted").fetchone():
            assert not answer.done(), answer.result().text
            assert time.monotonic() < deadline, "the write never waited on the lock"
            time.sleep(0.05)
        server.send_signal(signum)
        # The second once the first is seen: two sent before the server runs its handler are
        # one to Python (a loaded machine's scheduler can hold it off for longer than a sleep).
        banner = read_banner(server, "Shutting down")
        server.send_signal(signum)
        rest, _ = server.communicate(timeout=60)
        output = "".join(banner) + rest
        response = answer.result()
        locker.rollback()

    assert server.returncode == code, output
    assert "Traceback" not in output
    assert "Exception in ASGI application" not in output
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "ServiceUnavailable"
    assert "stopping" in response.json()["detail"]
    assert int(response.headers["retry-after"]) > 0
    # Not acknowledged, and not stored behind the client's back either.
    assert db.execute("SELECT 1 FROM memories WHERE key = 'in-flight'").fetchone() is None
