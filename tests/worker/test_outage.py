"""The worker while its database is down: one warning line a failure, no traceback."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import structlog

from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.worker import loop
from app.worker import outage as database_outage
from app.worker.loop import Worker
from tests.conftest import make_settings
from tests.db.test_pool_replacement import Outage
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.llm.test_compress_gemini import ANSWER, gemini_settings
from tests.worker.builders import log_to_stderr, make_observation, make_session, row, worker_on

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
    monkeypatch.setattr(database_outage, "log", structlog.get_logger(database_outage.__name__))
    # Unreachable from the start, the worker retries its start-up rescan and starts no lanes
    # and no upkeep until it succeeds (fixredact17): that retry is what it logs.
    logged = asyncio.run(run_until_logged(capsys, "during=worker.rescan_error"))
    warnings = [line for line in logged.splitlines() if "worker.database_unavailable" in line]
    assert any("during=worker.rescan_error" in line for line in warnings)
    assert all("Connection refused" in line for line in warnings)
    assert "Traceback" not in logged


def _restart_once(
    outage: Outage, answer: FakeResponse
) -> Callable[[RecordedRequest], FakeResponse]:
    """A Gemini answer during which the database restarts (down now, up a second later), the
    first time only; the same answer, the database untouched, after that."""
    restarted = threading.Event()

    def respond(_request: RecordedRequest) -> FakeResponse:
        if not restarted.is_set():
            restarted.set()
            outage.down()
            threading.Timer(1.0, outage.up).start()
        return answer

    return respond


async def _drain_steps(settings: Any, url: str) -> None:
    async with worker_on(settings, url) as worker:
        while await worker.step():
            pass


# A retry due at once: the old code's second claim came in the same drain.
_RETRY_NOW = {"worker_backoff_base_seconds": 0.001, "worker_backoff_max_seconds": 0.001}


def test_a_compression_answered_as_the_database_restarts_is_written_not_bought_again(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_logging("info")
    monkeypatch.setattr(database_outage, "log", structlog.get_logger(database_outage.__name__))
    make_session(db)
    make_observation(db, "o1")
    outage = Outage(database_url)
    try:
        with fake_gemini() as fake:
            fake.on(
                ":generateContent", _restart_once(outage, FakeResponse(body=text_answer(ANSWER)))
            )
            asyncio.run(_drain_steps(gemini_settings(fake.url, **_RETRY_NOW), outage.url))
            calls = len(fake.calls(":generateContent"))
    finally:
        outage.down()

    # The answer in hand is written once the database is back. The write's failure was a failed
    # attempt: the row went back to `captured` and Gemini was asked (and paid) again.
    assert calls == 1
    stored = row(
        db, "SELECT status, locked_by, attempts, last_error, generated_by FROM observations"
    )
    assert (stored["status"], stored["locked_by"], stored["attempts"]) == ("compressed", None, 1)
    assert stored["generated_by"].startswith("gemini:")
    assert stored["last_error"] is None
    usage = row(db, "SELECT sum(requests) AS calls, sum(input_tokens) AS tokens FROM llm_usage")
    assert (usage["calls"], usage["tokens"]) == (1, 10)
    logged = capsys.readouterr().err
    assert "worker.database_unavailable" in logged
    assert "during=worker.write_result" in logged
    assert "Traceback" not in logged


def test_a_summary_answered_as_the_database_restarts_is_written_not_bought_again(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    make_observation(db, "o1", status="compressed")
    db.execute("UPDATE observations SET compressed_data = 'Read src/o1.ts: validateToken'")
    outage = Outage(database_url)
    try:
        with fake_gemini() as fake:
            summary = FakeResponse(body=text_answer("Fixed the token check in src/o1.ts."))
            fake.on(":generateContent", _restart_once(outage, summary))
            asyncio.run(_drain_steps(gemini_settings(fake.url, **_RETRY_NOW), outage.url))
            calls = len(fake.calls(":generateContent"))
    finally:
        outage.down()

    assert calls == 1
    stored = row(db, "SELECT status, locked_by, summary, last_error FROM sessions")
    assert (stored["status"], stored["locked_by"]) == ("summarized", None)
    assert stored["summary"] == "Fixed the token check in src/o1.ts."
    assert stored["last_error"] is None
    usage = row(db, "SELECT sum(requests) AS calls FROM llm_usage")
    assert usage["calls"] == 1


def test_an_attempt_the_database_loss_cut_short_is_recorded_once_it_is_back(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Lost before any result was in hand (here as the job records Gemini's failure), the
    # attempt's own write failed too when tried once: the row waited out its lease (120 s),
    # claimed, before anyone retried it.
    log_to_stderr(monkeypatch, database_outage, loop)
    make_session(db)
    make_observation(db, "o1")
    outage = Outage(database_url)
    busy = FakeResponse(status=503, body={"error": {"code": 503, "message": "busy"}})

    async def one_job(fake_url: str) -> None:
        async with worker_on(gemini_settings(fake_url), outage.url) as worker:
            assert await worker.step()

    try:
        with fake_gemini() as fake:
            fake.on(":generateContent", _restart_once(outage, busy))
            asyncio.run(one_job(fake.url))
    finally:
        outage.down()

    stored = row(db, "SELECT status, locked_by, attempts, last_error FROM observations")
    assert (stored["status"], stored["locked_by"], stored["attempts"]) == ("captured", None, 1)
    assert "OperationalError" in stored["last_error"]
    assert "connection" in stored["last_error"].lower()
    logged = capsys.readouterr().err
    errors = [line for line in logged.splitlines() if "worker.job_error" in line]
    assert len(errors) == 1
    assert "worker.attempt_failed" in logged
    assert "Traceback" not in logged


def test_a_stop_ends_the_wait_to_write_a_result_the_database_loss_held_up(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry loop slept between tries without looking at the stop: a worker stopped while
    # its database was away waited the whole grace period (10 s) before its lane was cancelled.
    # The database goes as Gemini answers, so the wait stopped is the result's write's (the
    # wait to record a failed attempt is the same `retry_while_away`, its stop the same).
    # Both stretched here so that only the stop can end the run.
    monkeypatch.setattr(database_outage, "RETRY_INTERVAL_SECONDS", 3600.0)
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
    # Left to its lease, as after the last try: the job ran, its result was not written.
    stored = row(db, "SELECT status, locked_by, last_error FROM observations")
    assert stored["status"] == "captured"
    assert stored["locked_by"] is not None
    assert stored["last_error"] is None


def test_a_database_host_gone_silent_holds_the_lane_for_the_retry_time_not_per_try(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retries were counted (30): against a host that takes connections and never answers,
    # each try waited out the connect timeout (5 s), so the lane was held ~180 s, not ~30 s.
    monkeypatch.setattr(database_outage, "WAIT_SECONDS", 1.0)
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
    assert database_outage.database_lost(ConnectionRefusedError(111, "Connection refused"))
    assert database_outage.database_lost(ConnectionResetError(104, "Connection reset by peer"))
    for own in (PermissionError(13, "denied"), TimeoutError(), BrokenPipeError(32, "pipe")):
        assert not database_outage.database_lost(own), own
    # psycopg's own, as an outage raises it: still the database's loss.
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(DOWN, connect_timeout=5)
    assert database_outage.database_lost(refused.value)
