"""The log of requests the database could not serve: a line per cause and window, then a count."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api import outage_log
from app.logs import configure_logging
from app.main import create_app
from tests.conftest import make_settings


@pytest.fixture
def outage_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The outage log at info on stderr, fresh."""
    configure_logging("info")
    monkeypatch.setattr(outage_log, "log", structlog.get_logger("app.api.errors"))
    # Windows and counts earlier tests' requests left (their loops closed, no timer ran), and
    # the window an app's start sets.
    monkeypatch.setattr(outage_log.OUTAGE_LOG, "windows", {})
    monkeypatch.setattr(outage_log.OUTAGE_LOG, "window", outage_log.OUTAGE_LOG.window)


def unreachable_database(tmp_path: Path) -> str:
    return f"postgresql://nobody@/agmem?host={tmp_path}"


@pytest.fixture
def unreachable_app(tmp_path: Path, outage_logged: None) -> FastAPI:
    """An app whose database is a socket nobody listens on, its outage log at info on stderr."""
    return create_app(make_settings(home=tmp_path), database_url=unreachable_database(tmp_path))


def unreachable_lines(logged: str) -> list[str]:
    return [line for line in logged.splitlines() if "database.unreachable" in line]


def test_requests_failing_on_an_unreachable_database_are_one_line_and_a_count(
    outage_logged: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Each request logged its own `database.unreachable`: 56 identical lines for a 5 s restart
    # of the embedded server under 20 clients, thousands for a minute's outage. The window is
    # AGMEM_REFUSAL_LOG_SECONDS, which the log cited but did not read (always 10 s).
    settings = make_settings(home=tmp_path, refusal_log_seconds=2.0)
    with TestClient(create_app(settings, database_url=unreachable_database(tmp_path))) as client:
        capsys.readouterr()
        statuses = [client.get("/api/sessions").status_code for _ in range(5)]
        time.sleep(2.5)  # the window ends: its count is logged
        logged = capsys.readouterr().err

    assert statuses == [503] * 5
    lines = unreachable_lines(logged)
    # Five requests within one window: its line, then its count.
    assert len(lines) == 2, logged
    assert "repeated" not in lines[0]
    assert "repeated=4" in lines[1]
    assert all("No such file or directory" in line for line in lines)


def test_the_count_of_a_window_the_stop_cuts_short_is_logged(
    unreachable_app: FastAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    # A server stopped within a window (an operator restarting it during the outage) never
    # logged that window's count: its timer died with the loop.
    with TestClient(unreachable_app) as client:
        capsys.readouterr()
        statuses = [client.get("/api/sessions").status_code for _ in range(3)]
    logged = capsys.readouterr().err

    assert statuses == [503] * 3
    lines = unreachable_lines(logged)
    assert len(lines) == 2, logged
    assert "repeated=2" in lines[1]
