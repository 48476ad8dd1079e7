"""Durability: an acknowledged observation survives a SIGKILL of the server process."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.serve import ServerProcess, run_server

WRITERS = 4


def post(url: str, body: dict[str, Any], timeout: float = 5) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def writer(server: ServerProcess, session_id: str, number: int, acked: list[str]) -> None:
    """Send observations until the server dies; record the ids it acknowledged."""
    index = 0
    while True:
        observation_id = f"w{number}-{index}"
        body = {
            "sessionId": session_id,
            "functionName": "run_shell_command",
            "functionArgs": {"command": f"echo {index}", "pad": "x" * 2000},
            "id": observation_id,
        }
        try:
            status, answer = post(server.url + "/api/observe", body)
        # A kill mid-answer cuts the body short (IncompleteRead): not acknowledged either.
        except (
            urllib.error.URLError,
            http.client.HTTPException,
            ConnectionError,
            TimeoutError,
            OSError,
        ):
            return
        if status in (200, 201) and answer["id"] == observation_id:
            acked.append(observation_id)
        index += 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_acknowledged_observations_survive_sigkill(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    env = {"DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path / "home")}
    acked: list[str] = []
    with run_server(kind="agmem", log_dir=tmp_path, env=env) as server:
        status, session = post(server.url + "/api/session/start", {"projectPath": "/p", "id": "s"})
        assert status == 201
        threads = [
            threading.Thread(target=writer, args=(server, "s", number, acked), daemon=True)
            for number in range(WRITERS)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(acked) < 150 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()  # mid-stream: writers have requests in flight
        for thread in threads:
            thread.join(timeout=30)
    assert len(acked) >= 150

    stored = {row[0] for row in db.execute("SELECT id FROM observations")}
    missing = [observation_id for observation_id in acked if observation_id not in stored]
    assert missing == []

    # The restarted server sees them, and a retry of any id (acknowledged or in flight when the
    # server died) creates no duplicate.
    with run_server(kind="agmem", log_dir=tmp_path, env=env) as server:
        status, answer = post(
            server.url + "/api/observe",
            {
                "sessionId": "s",
                "functionName": "run_shell_command",
                "functionArgs": {"command": "echo 0", "pad": "x" * 2000},
                "id": "w0-0",
            },
        )
        assert (status, answer["id"]) == (200, "w0-0")
        with urllib.request.urlopen(server.url + f"/api/observations/{acked[-1]}") as response:
            assert json.loads(response.read())["id"] == acked[-1]
    after = db.execute("SELECT count(*) FROM observations").fetchone()
    assert after is not None
    assert after[0] == len(stored)
