"""Fixtures of the API's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import TEST_HOSTS, make_settings


@pytest.fixture
def on_loopback(database_url: str, tmp_path: Any) -> Iterator[TestClient]:
    """The app as `agmem serve` builds it on 127.0.0.1 (no token), with one extra name and one
    extra browser origin allowed."""
    settings = make_settings(
        home=tmp_path,
        allowed_hosts=[*TEST_HOSTS, "devbox.lan"],
        allowed_origins=["https://app.example"],
    )
    with TestClient(create_app(settings, database_url=database_url)) as client:
        yield client
