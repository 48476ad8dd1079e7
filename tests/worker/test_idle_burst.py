"""The first upkeep after an upgrade ends every stale `active` session: with Gemini, a burst of
summary calls. The idle ends take at most half of the worker's Gemini rate, spread over the
upkeep's interval, so that a live session's summary is not queued behind the whole burst."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.db.engine import transaction
from app.worker import claims, jobs
from tests.conftest import make_settings
from tests.worker.builders import row, rows, worker_on
from tests.worker.test_unanswered import _end, _start

# 30 calls a minute and an upkeep each 60 s: at most 15 idle ends a pass, one due each 4 s.
GEMINI = make_settings(
    gemini_api_key="k",
    gemini_base_url="http://127.0.0.1:9",
    gemini_requests_per_minute=30,
    worker_purge_interval_seconds=60,
)


def _stale_sessions(db: psycopg.Connection[Any], count: int) -> None:
    """Sessions left `active` 7 to 8 hours ago (the upgrade found them), one call each."""
    db.execute(
        "INSERT INTO sessions (id, project_path, status, last_activity_at) "
        "SELECT 'old' || n, '/home/dev/shop', 'active', "
        "now() - interval '7 hours' - make_interval(mins => n) FROM generate_series(1, %s) n",
        (count,),
    )
    db.execute(
        "INSERT INTO observations (id, session_id, project_path, function_name, observation_type, "
        "status, compressed_data, result_at, created_at) SELECT 'o' || id, id, project_path, "
        "'read_file', 'file_read', 'compressed', 'Learned: read it', last_activity_at, "
        "last_activity_at FROM sessions"
    )


async def _upkeep_then_claim(settings: Any, database_url: str, end: Any) -> list[str]:
    async with worker_on(settings, database_url) as worker:
        await jobs.maintain(worker.ctx)
        await asyncio.to_thread(end)
        async with transaction(worker.ctx.sessionmaker) as session:
            claimed = await claims.claim_sessions(
                session, worker=worker.id, lease=60, limit=3, max_attempts=5
            )
    return [work.id for work in claimed]


def test_a_live_end_is_summarised_before_the_upgrades_idle_ends(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _stale_sessions(db, 40)
    _start(client, "live")

    claimed = asyncio.run(_upkeep_then_claim(GEMINI, database_url, lambda: _end(client, "live")))

    # The newest idle end (due at once), then the live end; the others are not due yet.
    assert claimed == ["old1", "live"]
    ending = rows(
        db,
        "SELECT id, round(extract(epoch FROM next_attempt_at - (SELECT min(next_attempt_at) "
        "FROM sessions WHERE id <> 'live'))) AS due_in FROM sessions "
        "WHERE status = 'ending' AND id <> 'live' ORDER BY next_attempt_at",
    )
    assert [(r["id"], r["due_in"]) for r in ending] == [
        (f"old{n}", 4 * (n - 1)) for n in range(1, 16)
    ]
    assert row(db, "SELECT count(*) AS n FROM sessions WHERE status = 'active'")["n"] == 25


def test_without_gemini_every_idle_session_is_ended_at_once(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The extractive summary takes milliseconds: nothing to pace."""
    _stale_sessions(db, 40)
    claimed = asyncio.run(_upkeep_then_claim(make_settings(), database_url, lambda: None))
    assert len(claimed) == 3
    assert row(db, "SELECT count(*) AS n FROM sessions WHERE status = 'active'")["n"] == 0


def test_an_upkeep_adds_no_idle_end_while_the_last_ones_wait(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Gemini slower than the pace (or paused by a 429): a pass tops the queue up to its bound,
    so the summaries a live end waits behind do not pile up pass after pass."""
    _stale_sessions(db, 40)
    asyncio.run(_upkeep_then_claim(GEMINI, database_url, lambda: None))
    db.execute("UPDATE sessions SET locked_by = NULL, locked_until = NULL, attempts = 0")
    db.execute("UPDATE sessions SET status = 'summarized' WHERE id IN ('old1', 'old2', 'old3')")

    asyncio.run(_upkeep_then_claim(GEMINI, database_url, lambda: None))

    counts = row(
        db,
        "SELECT count(*) FILTER (WHERE status = 'ending') AS ending, "
        "count(*) FILTER (WHERE status = 'active') AS active FROM sessions",
    )
    assert (counts["ending"], counts["active"]) == (15, 22)


@pytest.mark.parametrize(
    ("per_minute", "interval", "passes", "expected"),
    [
        # Half of 5 calls a minute is one idle end each 24 s: one each third pass of 10 s.
        (5, 10, 6, [0, 0, 1, 0, 0, 1]),
        # Half of 1 call a minute is one each 120 s: one each second pass of 60 s.
        (1, 60, 4, [0, 1, 0, 1]),
    ],
)
def test_idle_ends_keep_to_half_the_rate_when_a_pass_is_shorter_than_their_spacing(
    per_minute: int,
    interval: int,
    passes: int,
    expected: list[int],
    client: TestClient,
    db: psycopg.Connection[Any],
    database_url: str,
) -> None:
    """A pass allowed at least one end whatever the rate: at 5 calls a minute and an upkeep each
    10 s, six ends a minute (more than the whole rate), and live calls waited behind them."""
    _stale_sessions(db, 40)
    settings = make_settings(
        gemini_api_key="k",
        gemini_base_url="http://127.0.0.1:9",
        gemini_requests_per_minute=per_minute,
        worker_purge_interval_seconds=interval,
    )

    async def upkeeps() -> list[int]:
        ended = []
        async with worker_on(settings, database_url) as worker:
            for _ in range(passes):
                await jobs.maintain(worker.ctx)
                ended.append(
                    row(db, "SELECT count(*) AS n FROM sessions WHERE status = 'ending'")["n"]
                )
                # Each summary written well within the pass's interval.
                db.execute("UPDATE sessions SET status = 'summarized', summarized_at = now() "
                           "WHERE status = 'ending'")  # fmt: skip
        return ended

    assert asyncio.run(upkeeps()) == expected
