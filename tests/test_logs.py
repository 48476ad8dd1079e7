"""Logs: what a logged error prints."""

from __future__ import annotations

import pytest
import structlog

from app.logs import configure_logging


def connect(password: str) -> None:
    raise ConnectionRefusedError("connection refused")


def test_a_logged_traceback_prints_no_local_variables(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    secret = "-".join(["s3cret", "from", "database", "url"])  # not in any printed source line
    try:
        connect(password=secret)
    except ConnectionRefusedError:
        structlog.get_logger("test").exception("worker.step_error")

    printed = capsys.readouterr().err
    assert "worker.step_error" in printed
    assert "ConnectionRefusedError: connection refused" in printed
    assert secret not in printed
