"""Logs: what a logged error prints."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys

import pytest
import structlog
import typer
from typer.testing import CliRunner

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


class ClosedPipe:
    """stderr whose reader has gone (`agmem serve 2>&1 | head`, a log collector that died)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_log_line_that_cannot_be_written_does_not_fail_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The BrokenPipeError came out of the log call: every request that logged was a 500 and
    # `agmem memory set` rolled its write back, because nobody read the log any more.
    configure_logging("info")
    monkeypatch.setattr("sys.stderr", ClosedPipe())

    structlog.get_logger("test").info("memory.created", key="project.k")
    structlog.get_logger("test").error("worker.step_error")


def test_the_watch_library_does_not_narrate_each_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `agmem sync --watch` printed watchfiles' "1 change detected" before each summary line.
    configure_logging("info")

    logging.getLogger("watchfiles.main").info("%d change%s detected", 1, "")
    logging.getLogger("watchfiles.main").warning("kept: a problem")

    printed = capsys.readouterr().err
    assert "change detected" not in printed
    assert "kept: a problem" in printed


def test_the_mcp_sdk_does_not_narrate_each_stateless_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # /mcp runs stateless: the SDK ends a transport per request and logged "Terminating session:
    # None" at INFO for each tool call, into `agmem serve`'s log (and, from the tests' live
    # servers' threads, between pytest's dots).
    configure_logging("info")

    logging.getLogger("mcp.server.streamable_http").info("Terminating session: %s", None)
    logging.getLogger("mcp.server.streamable_http").warning("kept: a problem")

    printed = capsys.readouterr().err
    assert "Terminating session" not in printed
    assert "kept: a problem" in printed


def test_logging_does_not_import_rich_and_rich_still_imports_after() -> None:
    # structlog imported rich and pygments with it (~0.15 s of CPU) for every `agmem` command.
    probe = (
        "import sys, app.cli, app.logs\n"
        "app.logs.configure_logging('info')\n"
        "print('rich' in sys.modules)\n"
        "from rich.console import Console\n"
        "print(type(Console()).__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.split() == ["False", "Console"]


def test_a_library_logs_to_stderr_as_it_is_now_not_as_it_was_when_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The tests run commands in-process through typer's CliRunner, which sets sys.stderr to its
    # own stream for the command (whose `configure_logging` bound the root handler to it) and
    # closes it after. Every library record later (mcp's "Terminating session", uvicorn's) was
    # then a "--- Logging error ---" (ValueError: I/O operation on closed file); from uvicorn's
    # thread in tests/mcp/test_http.py, as pytest printed a dot, its "Call stack:" line came out
    # between the dots. structlog's lines already follow sys.stderr (`_CurrentStderr`).
    command = typer.Typer()

    @command.command()
    def configure() -> None:
        configure_logging("info")

    assert CliRunner().invoke(command, []).exit_code == 0
    now = io.StringIO()
    monkeypatch.setattr("sys.stderr", now)
    monkeypatch.setattr(logging, "raiseExceptions", True)

    logging.getLogger("a.library").info("Shutting down")

    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT[\d:.]+Z \[info +\] Shutting down +\[a\.library\]\n", now.getvalue()
    )


def logging_to_a_string(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What is written to sys.stderr from now on, with logging configured at info. Set inside
    the test: pytest's capture sets sys.stderr again between a fixture's setup and the test."""
    now = io.StringIO()
    monkeypatch.setattr("sys.stderr", now)
    configure_logging("info")
    return now


def test_a_library_record_has_a_time_a_level_and_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Standard-library records printed as a bare message, no time or level: psycopg_pool's
    # "error connecting" as several lines, the server's error's lines after the first bare.
    now, pool = logging_to_a_string(monkeypatch), logging.getLogger("psycopg.pool")

    pool.warning("error connecting in %r: %s", "pool-1", "connection failed: gone\nHINT: retry")

    [line] = now.getvalue().splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT[\d:.]+Z \[warning +\] error connecting in 'pool-1': "
        r"connection failed: gone \| HINT: retry +\[psycopg\.pool\]",
        line,
    )

    configure_logging("info", json=True)
    pool.warning("error connecting in %r: %s", "pool-1", "refused")
    record = json.loads(now.getvalue().splitlines()[-1])
    assert (record["level"], record["logger"], record["event"]) == (
        "warning",
        "psycopg.pool",
        "error connecting in 'pool-1': refused",
    )
    assert record["timestamp"].endswith("Z")


def test_the_pool_discarding_closed_connections_says_so_only_at_debug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One warning per connection a postmaster's death closed: ~10 lines of one event.
    now, pool = logging_to_a_string(monkeypatch), logging.getLogger("psycopg.pool")

    pool.warning("discarding closed connection: %s", "<psycopg.AsyncConnection [BAD]>")
    assert now.getvalue() == ""

    configure_logging("debug")
    pool.warning("discarding closed connection: %s", "<psycopg.AsyncConnection [BAD]>")
    assert "[debug    ] discarding closed connection" in now.getvalue()
    configure_logging("info")
