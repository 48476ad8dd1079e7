"""How the worker's loop words a failed step or upkeep in its log."""

from __future__ import annotations

import psycopg
import pytest
import structlog
from sqlalchemy import exc as sa_exc
from structlog.testing import capture_logs

from app.logs import configure_logging
from app.redaction import RedactionWorkerDied
from app.worker import outage


@pytest.mark.parametrize(
    ("error", "event"),
    [
        (psycopg.errors.DeadlockDetected("deadlock detected"), "worker.transaction_conflict"),
        (psycopg.errors.SerializationFailure("could not serialize"), "worker.transaction_conflict"),
        (psycopg.OperationalError("connection refused"), "worker.database_unavailable"),
        (psycopg.errors.AdminShutdown("terminating connection"), "worker.database_unavailable"),
    ],
)
def test_a_conflict_is_not_logged_as_an_outage(
    error: psycopg.Error, event: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The upkeep's give-up losing a deadlock to a capture batch was logged as
    # `worker.database_unavailable` while the database was up.
    wrapped = sa_exc.OperationalError("UPDATE observations ...", {}, error)
    # An in-process CLI test may have left the level at error (AGMEM_LOG_LEVEL), and a logger
    # keeps the configuration of its first use: after either, capture_logs saw nothing.
    configure_logging("info")
    monkeypatch.setattr(outage, "log", structlog.get_logger(outage.__name__))
    with capture_logs() as logged:
        outage.log_failure("worker.maintenance_error", wrapped)

    assert [(entry["event"], entry["during"]) for entry in logged] == [
        (event, "worker.maintenance_error")
    ]


def test_a_killed_redaction_child_is_one_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pass is retried; a traceback through asyncio's pipes said nothing the detail does not.
    died = RedactionWorkerDied("the process redacting a row over 256 KB was killed (exit -9)")
    configure_logging("info")
    monkeypatch.setattr(outage, "log", structlog.get_logger(outage.__name__))
    with capture_logs() as logged:
        outage.log_failure("worker.rescan_error", died, retry_seconds=1.0)

    assert logged == [
        {
            "event": "worker.rescan_error",
            "log_level": "error",
            "error": died.detail,
            "retry_seconds": 1.0,
        }
    ]
