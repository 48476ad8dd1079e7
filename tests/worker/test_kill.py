"""A worker process killed with SIGKILL mid-batch loses nothing: its claims are leases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.worker.builders import make_observation, make_session, row, rows, run_until

TOTAL = 16
LEASE = 3.0


def _count(db: psycopg.Connection[Any], where: str) -> int:
    return int(row(db, f"SELECT count(*) AS n FROM observations WHERE {where}")["n"])


@pytest.mark.slow
def test_sigkill_mid_batch_loses_nothing(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    make_session(db)
    for n in range(TOTAL):
        make_observation(db, f"o{n}")
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer("Learned: slow"), delay_s=1.0),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGMEM_")}
        env.update(
            DATABASE_URL=database_url,
            GEMINI_API_KEY="k",
            AGMEM_HOME=str(tmp_path / "home"),
            AGMEM_GEMINI_BASE_URL=fake.url,
            AGMEM_WORKER_LEASE_SECONDS=str(LEASE),
            AGMEM_GEMINI_REQUESTS_PER_MINUTE="100000",
        )
        process = subprocess.Popen(
            [sys.executable, "-c", "from app.cli import main; main()", "worker", "-c", "4"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while (
                _count(db, "status = 'compressed'") < 2 or _count(db, "locked_by IS NOT NULL") < 2
            ):
                assert process.poll() is None, "the worker exited on its own"
                assert time.monotonic() < deadline, "the worker never got going"
                time.sleep(0.05)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        claimed_at_kill = {
            r["id"] for r in rows(db, "SELECT id FROM observations WHERE locked_by IS NOT NULL")
        }
        assert claimed_at_kill, "the kill should land mid-batch"
        assert _count(db, "status = 'captured'") > 0

        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Learned: fast")))
        settings = make_settings(
            gemini_api_key="k",
            gemini_base_url=fake.url,
            gemini_requests_per_minute=100_000,
            worker_lease_seconds=LEASE,
        )
        waited = run_until(
            settings,
            database_url,
            lambda: _count(db, "status IN ('compressed', 'failed')") == TOTAL,
            timeout=60,
        )

    assert _count(db, "status = 'compressed'") == TOTAL
    assert _count(db, "locked_by IS NOT NULL OR locked_until IS NOT NULL") == 0
    # The dead worker's claims were taken over once their lease ran out, each costing an attempt.
    reclaimed = rows(db, "SELECT id, attempts FROM observations WHERE attempts > 1")
    assert {r["id"] for r in reclaimed} == claimed_at_kill
    assert waited < LEASE + 30
