"""After the embedded server restarts, the app's raw pools are replaced (AppState.after_restart):
the old ones may be waiting out a reconnect back-off of minutes, which would hold every capture
write and memory read of an agent until it ends."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg_pool.base import AttemptWithBackoff
from sqlalchemy.engine import make_url

from app.capture import db as capture_db
from app.main import create_app
from app.memories import reads
from tests.capture.builders import make_session
from tests.conftest import make_settings
from tests.memories.helpers import PROJECT, put, url


class Outage:
    """A TCP forwarder to the test's PostgreSQL that goes down as a restarting server does (its
    connections cut, new ones refused) and comes back on the same port."""

    def __init__(self, database_url: str) -> None:
        parsed = make_url(database_url)
        socket_dir = parsed.query.get("host")
        self._upstream: str | tuple[str, int]
        if isinstance(socket_dir, str) and socket_dir.startswith("/"):
            self._upstream = f"{socket_dir}/.s.PGSQL.{parsed.port or 5432}"
        else:
            self._upstream = (parsed.host or "127.0.0.1", parsed.port or 5432)
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.port = 0
        self.up()
        self.url = parsed.set(host="127.0.0.1", port=self.port, query={}).render_as_string(
            hide_password=False
        )

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            listener.close()
        with self._lock:
            cut, self._sockets = self._sockets, []
        for sock in cut:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if isinstance(self._upstream, str):
                server = socket.socket(socket.AF_UNIX)
                server.connect(self._upstream)
            else:
                server = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def outage(database_url: str) -> Iterator[Outage]:
    forwarder = Outage(database_url)
    yield forwarder
    forwarder.down()


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_after_a_restart_capture_and_memory_reads_use_fresh_pools(
    outage: Outage,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pool's reconnect back-off after a long outage (up to minutes): longer than the test, so
    # a pool that was not replaced cannot be the one that answers after the restart.
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 120.0)
    # What a request of the pools made at start waits for a connection before its 503 (3 s):
    # its bound, not its length, is the point of the 503s during the outage.
    waits = reads.READS_POOL_TIMEOUT_SECONDS, capture_db.CONNECT_WAIT_SECONDS
    monkeypatch.setattr(reads, "READS_POOL_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(capture_db, "CONNECT_WAIT_SECONDS", 0.3)
    app = create_app(make_settings(home=tmp_path / "home"), database_url=outage.url)
    with TestClient(app, raise_server_exceptions=False) as client:
        state = app.state.agmem
        session_id = make_session(client)
        put(client, "project.stack", "python")
        assert client.get(url("project.stack"), params={"projectPath": PROJECT}).status_code == 200
        pools = [app.state.capture_writer.pool, state.memory_reads.pool]

        outage.down()
        # Each pool finds its idle connections dead; requests find no connection (the reads'
        # pool tries to grow for its waiting request).
        for pool in pools:
            client.portal.call(pool.check)
        assert _observe(client, session_id).status_code == 503
        assert client.get(url("project.stack"), params={"projectPath": PROJECT}).status_code == 503
        # Every connection slot of both pools failed its reconnect: the next attempt of each
        # is one back-off away.
        _wait_for(
            lambda: all(
                pool.get_stats().get("connections_errors", 0) >= pool.get_stats()["pool_size"]
                for pool in pools
            ),
            "the pools never tried to reconnect",
        )
        reads.READS_POOL_TIMEOUT_SECONDS, capture_db.CONNECT_WAIT_SECONDS = waits
        outage.up()
        client.portal.call(state.drop_dead_connections)

        observed = _observe(client, session_id)
        read = client.get(url("project.stack"), params={"projectPath": PROJECT})
        assert (observed.status_code, read.status_code) == (201, 200), (observed.text, read.text)
        assert read.json()["value"] == "python"
    assert db.execute("SELECT count(*) FROM observations").fetchone() == (1,)


def _observe(client: TestClient, session_id: str) -> Any:
    body = {"sessionId": session_id, "functionName": "read_file", "functionArgs": {}}
    return client.post("/api/observe", json=body)
