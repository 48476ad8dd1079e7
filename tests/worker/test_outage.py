"""The worker while its database is down: one warning line a failure, no traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.worker.loop import Worker
from tests.conftest import make_settings

DOWN = "postgresql://agmem:pw@127.0.0.1:1/agmem"


async def run_briefly(seconds: float) -> None:
    engine = make_async_engine(DOWN, pool_size=2)
    worker = Worker(
        settings=make_settings(database_url=DOWN, worker_poll_seconds=0.1),
        sessionmaker=make_sessionmaker(engine),
        database_url=DOWN,
        concurrency=1,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, stop.set)
    try:
        await worker.run(stop)
    finally:
        await engine.dispose()


def test_a_database_outage_is_logged_in_one_line_each_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info")
    asyncio.run(run_briefly(0.5))

    logged: Any = capsys.readouterr().err
    warnings = [line for line in logged.splitlines() if "worker.database_unavailable" in line]
    assert any("during=worker.step_error" in line for line in warnings)
    assert any("during=worker.maintenance_error" in line for line in warnings)
    assert all("Connection refused" in line for line in warnings)
    assert "Traceback" not in logged
