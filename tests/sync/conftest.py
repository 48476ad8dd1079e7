"""Fixtures of the sync's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of an `agmem` run against the test database."""
    return {
        "DATABASE_URL": database_url,
        "AGMEM_HOME": str(tmp_path / "home"),
        "GEMINI_API_KEY": "",
    }
