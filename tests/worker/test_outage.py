"""The worker while its database is down: one warning line a failure, no traceback."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import psycopg
import pytest
import structlog

from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.worker import loop
from app.worker.loop import Worker
from tests.conftest import make_settings
from tests.db.test_pool_replacement import Outage
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.llm.test_compress_gemini import ANSWER, gemini_settings
from tests.worker.builders import make_observation, make_session, row, worker_on

DOWN = "postgresql://agmem:pw@127.0.0.1:1/agmem"


async def run_until_logged(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run the worker until every needle has been logged (or 20 s have passed); the log."""
    engine = make_async_engine(DOWN, pool_size=2)
    worker = Worker(
        settings=make_settings(database_url=DOWN, worker_poll_seconds=0.1),
        sessionmaker=make_sessionmaker(engine),
        database_url=DOWN,
        concurrency=1,
    )
    stop = asyncio.Event()
    logged: list[str] = []

    async def watch() -> None:
        # A fixed run time failed on a loaded machine: the maintenance pass had not come round.
        deadline = asyncio.get_running_loop().time() + 20
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            logged.append(capsys.readouterr().err)
            if all(needle in "".join(logged) for needle in needles):
                break
        stop.set()

    watcher = asyncio.create_task(watch())
    try:
        await worker.run(stop)
    finally:
        await watcher
        await engine.dispose()
    return "".join(logged) + capsys.readouterr().err


def test_a_database_outage_is_logged_in_one_line_each_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging("info")
    # Loggers keep the configuration of their first use: after an in-process CLI test at
    # AGMEM_LOG_LEVEL=error and a worker test, the worker's logger filtered these warnings out.
    monkeypatch.setattr(loop, "log", structlog.get_logger(loop.__name__))
    # Unreachable from the start, the worker retries its start-up rescan and starts no lanes
    # and no upkeep until it succeeds (fixredact17): that retry is what it logs.
    logged = asyncio.run(run_until_logged(capsys, "during=worker.rescan_error"))
    warnings = [line for line in logged.splitlines() if "worker.database_unavailable" in line]
    assert any("during=worker.rescan_error" in line for line in warnings)
    assert all("Connection refused" in line for line in warnings)
    assert "Traceback" not in logged


def test_a_database_lost_as_a_job_writes_its_result_fails_the_attempt_in_one_line(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_logging("info")
    monkeypatch.setattr(loop, "log", structlog.get_logger(loop.__name__))
    make_session(db)
    make_observation(db, "o1")
    outage = Outage(database_url)

    def restart_while_gemini_answers(_request: RecordedRequest) -> FakeResponse:
        # The database restarts under the call: down now, up again a second later.
        outage.down()
        threading.Timer(1.0, outage.up).start()
        return FakeResponse(body=text_answer(ANSWER))

    async def one_job() -> None:
        async with worker_on(gemini_settings(fake.url), outage.url) as worker:
            assert await worker.step()

    try:
        with fake_gemini() as fake:
            fake.on(":generateContent", restart_while_gemini_answers)
            asyncio.run(one_job())
    finally:
        outage.down()

    # The failed attempt is recorded once the database is back, the row due again after its
    # backoff; it stayed claimed until its lease ran out (120 s), after a traceback.
    stored = row(db, "SELECT status, locked_by, attempts, last_error FROM observations")
    assert (stored["status"], stored["locked_by"], stored["attempts"]) == ("captured", None, 1)
    assert "Connection refused" in stored["last_error"]
    logged = capsys.readouterr().err
    assert "worker.database_unavailable" in logged
    assert "during=worker.job_error" in logged
    assert "Traceback" not in logged


def test_a_stop_ends_the_wait_to_record_an_attempt_the_database_loss_cut_short(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry loop slept between tries without looking at the stop: a worker stopped while
    # its database was away waited the whole grace period (10 s) before its lane was cancelled.
    # Both stretched here so that only the stop can end the run.
    monkeypatch.setattr(loop, "FAIL_RETRY_INTERVAL_SECONDS", 3600.0)
    monkeypatch.setattr(loop, "STOP_GRACE_SECONDS", 3600.0)
    make_session(db)
    make_observation(db, "o1")
    outage = Outage(database_url)

    async def stop_while_waiting(fake_url: str) -> None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()

        def lose_database(_request: RecordedRequest) -> FakeResponse:
            outage.down()
            running.call_soon_threadsafe(stop.set)
            return FakeResponse(body=text_answer(ANSWER))

        fake.on(":generateContent", lose_database)
        async with worker_on(gemini_settings(fake_url), outage.url) as worker:
            await asyncio.wait_for(worker.run(stop), timeout=60)

    try:
        with fake_gemini() as fake:
            asyncio.run(stop_while_waiting(fake.url))
    finally:
        outage.down()
    # Left to its lease, as after the last try: the job ran, the attempt was not recorded.
    stored = row(db, "SELECT status, locked_by, last_error FROM observations")
    assert stored["status"] == "captured"
    assert stored["locked_by"] is not None
    assert stored["last_error"] is None


def test_a_database_host_gone_silent_holds_the_lane_for_the_retry_time_not_per_try(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retries were counted (30): against a host that takes connections and never answers,
    # each try waited out the connect timeout (5 s), so the lane was held ~180 s, not ~30 s.
    monkeypatch.setattr(loop, "FAIL_RETRY_SECONDS", 1.0, raising=False)
    make_session(db)
    make_observation(db, "o1")
    outage = Outage(database_url)
    silent = socket.socket()

    def go_silent(_request: RecordedRequest) -> FakeResponse:
        # The server's port still takes connections (the kernel's backlog), nobody answers.
        outage.down()
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", outage.port))
        silent.listen(64)
        return FakeResponse(body=text_answer(ANSWER))

    async def one_job(fake_url: str) -> None:
        async with worker_on(gemini_settings(fake_url), outage.url) as worker:
            # One try (its connect timeout) past the retry time at most, then the lease's.
            assert await asyncio.wait_for(worker.step(), timeout=60)

    try:
        with fake_gemini() as fake:
            fake.on(":generateContent", go_silent)
            asyncio.run(one_job(fake.url))
    finally:
        silent.close()
        outage.down()
    stored = row(db, "SELECT status, locked_by, last_error FROM observations")
    assert (stored["status"], stored["last_error"]) == ("captured", None)
    assert stored["locked_by"] is not None


def test_only_a_connections_os_error_is_the_databases_loss() -> None:
    # Any OSError without a SQLSTATE counted: a job's own PermissionError or TimeoutError lost
    # its traceback and had its failed attempt's record retried for 30 s, as for an outage.
    assert loop.database_lost(ConnectionRefusedError(111, "Connection refused"))
    assert loop.database_lost(ConnectionResetError(104, "Connection reset by peer"))
    for own in (PermissionError(13, "denied"), TimeoutError(), BrokenPipeError(32, "pipe")):
        assert not loop.database_lost(own), own
    # psycopg's own, as an outage raises it: still the database's loss.
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(DOWN, connect_timeout=5)
    assert loop.database_lost(refused.value)
