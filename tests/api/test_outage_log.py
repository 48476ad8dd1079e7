"""The log of requests the database could not serve: a line per cause and window, then a count."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog
from fastapi.testclient import TestClient

from app.api import outage_log
from app.logs import configure_logging
from app.main import create_app
from tests.conftest import make_settings


def test_requests_failing_on_an_unreachable_database_are_one_line_and_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each request logged its own `database.unreachable`: 56 identical lines for a 5 s restart
    # of the embedded server under 20 clients, thousands for a minute's outage.
    configure_logging("info")
    monkeypatch.setattr(outage_log, "log", structlog.get_logger("app.api.errors"))
    # Windows and counts earlier tests' requests left (their loops closed, no timer ran).
    monkeypatch.setattr(outage_log.OUTAGE_LOG, "windows", {})
    monkeypatch.setattr(outage_log, "DATABASE_LOG_SECONDS", 2.0)
    unreachable = f"postgresql://nobody@/agmem?host={tmp_path}"
    app = create_app(make_settings(home=tmp_path), database_url=unreachable)

    with TestClient(app) as client:
        capsys.readouterr()
        statuses = [client.get("/api/sessions").status_code for _ in range(5)]
        time.sleep(2.5)  # the window ends: its count is logged
        logged = capsys.readouterr().err

    assert statuses == [503] * 5
    lines = [line for line in logged.splitlines() if "database.unreachable" in line]
    # Five requests within one window: its line, then its count.
    assert len(lines) == 2, logged
    assert "repeated" not in lines[0]
    assert "repeated=4" in lines[1]
    assert all("No such file or directory" in line for line in lines)
