"""Fixtures: a fake upstream, and the real app behind uvicorn on a free port forwarding to it."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from google import genai
from google.genai import types

from app.main import create_app
from tests.conftest import make_settings
from tests.proxy.live import live_server
from tests.proxy.upstream import FakeUpstream, fake_upstream

PROJECT = "/home/dev/shop"
CALLER_KEY = "caller-own-gemini-key"


@dataclass
class Proxy:
    url: str
    upstream: FakeUpstream
    app: FastAPI

    def wait_for_capture(self, timeout_s: float = 10.0) -> None:
        """Until the capture jobs of the calls made so far are done (submitted as each arrived)."""
        jobs = self.app.state.proxy.capture.jobs
        deadline = time.monotonic() + timeout_s
        while jobs.pending and time.monotonic() < deadline:
            time.sleep(0.01)

    def client(self, **headers: str) -> genai.Client:
        """The real google-genai client, pointed at the proxy, with the caller's own key."""
        return genai.Client(
            api_key=CALLER_KEY,
            http_options=types.HttpOptions(
                base_url=self.url, headers={"X-Agmem-Project": PROJECT, **headers}
            ),
        )


ProxyFactory = Callable[..., AbstractContextManager[Proxy]]


@pytest.fixture
def start_proxy(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> ProxyFactory:
    """Start a proxy (settings overridable) in front of a fresh fake upstream."""

    @contextmanager
    def start(
        *, upstream_url: str | None = None, db_url: str | None = None, **overrides: Any
    ) -> Iterator[Proxy]:
        with fake_upstream() as fake:
            # Tests assert what is injected, not how fast: give the builder all the time it needs.
            overrides.setdefault("proxy_context_timeout_ms", 10_000)
            settings = make_settings(
                home=tmp_path / "home", gemini_upstream=upstream_url or fake.url, **overrides
            )
            app = create_app(settings, database_url=db_url or database_url)
            with live_server(app) as url:
                yield Proxy(url=url, upstream=fake, app=app)

    return start


@pytest.fixture
def proxy(start_proxy: ProxyFactory) -> Iterator[Proxy]:
    with start_proxy() as running:
        yield running


# trylast: inside pytest's own wrapper, so still under the test's output capture.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """The `proxy` fixture's capture jobs end with the test that made the calls.

    A job still running when the test returned logged (`session.started`) in the gap before the
    fixture's teardown, where pytest captures nothing: the line landed among the progress dots.
    """
    try:
        return (yield)
    finally:
        running = getattr(item, "funcargs", {}).get("proxy")
        if isinstance(running, Proxy):
            running.wait_for_capture()
