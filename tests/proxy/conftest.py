"""Fixtures: a fake upstream, and the real app behind uvicorn on a free port forwarding to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
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
                yield Proxy(url=url, upstream=fake)

    return start


@pytest.fixture
def proxy(start_proxy: ProxyFactory) -> Iterator[Proxy]:
    with start_proxy() as running:
        yield running
