"""A real uvicorn server on a free loopback port: the app and /mcp on the test database."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import uvicorn

from app.main import create_app
from tests.conftest import make_settings


@dataclass
class LiveServer:
    url: str
    token: str | None


def serve(
    database_url: str, tmp_path: Any, token: str | None, **overrides: Any
) -> Iterator[LiveServer]:
    settings = make_settings(home=tmp_path / "home", api_token=token, **overrides)
    app = create_app(settings, database_url=database_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}", token=token)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.fixture
def live_server(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> Iterator[LiveServer]:
    yield from serve(database_url, tmp_path, None)


@pytest.fixture
def live_server_with_token(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> Iterator[LiveServer]:
    yield from serve(database_url, tmp_path, "s3cret-token")


@pytest.fixture
def live_server_small_context(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> Iterator[LiveServer]:
    yield from serve(database_url, tmp_path, None, context_budget=120, context_sessions=1)
