"""A 429's `Retry-After` may be an HTTP-date (RFC 9110 §5.6.7) instead of seconds: honoured
relative to the answer's `Date` (the server's clock), a date past being no wait, under the same
900 s cap; anything but one of the three forms, exactly, ignored and logged once per 429 answer;
through the real google-genai client and the fake server, into the real database, for each
consumer of a server's delay (a compression, a cancel sweep, an embedding lease)."""

from __future__ import annotations

import asyncio
import calendar
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from structlog.testing import capture_logs

from app.llm import generation
from app.llm.generation import MAX_RETRY_AFTER_SECONDS
from app.logs import configure_logging
from app.sync import cancels
from app.worker import jobs
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.worker.builders import make_observation, make_session, worker_on
from tests.worker.test_cancel_sweep import pending_cancel, with_key
from tests.worker.test_embedding_outage import add_memory_row
from tests.worker.test_embedding_outage import gemini_settings as embedding_settings
from tests.worker.test_retry_after_bounds import compress_settings, due_in, quota


def http_date(seconds_from_now: float) -> str:
    """The IMF-fixdate form servers send: `Fri, 27 Nov 2026 03:00:00 GMT`."""
    return formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Any:
    # A logger keeps the configuration of its first use (an in-process CLI test's level).
    configure_logging("info")
    monkeypatch.setattr(generation, "log", structlog.get_logger(generation.__name__))
    with capture_logs() as entries:
        yield entries


def compress_two(url: str, tmp_path: Path, database_url: str) -> float:
    """The first row's call answered by the fake's 429, then the second row: the gate's pause."""

    async def two_steps() -> float:
        async with worker_on(compress_settings(url, tmp_path), database_url) as worker:
            assert await worker.step()
            assert await worker.step()
            return worker.ctx.gate.paused_for()

    return asyncio.run(two_steps())


def test_a_date_in_the_future_pauses_until_then(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path, logged: Any
) -> None:
    # It was read as no delay: the row came back after its own 2 s backoff, into the quota.
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: quota(header=http_date(300)))
        paused = compress_two(fake.url, tmp_path, database_url)
        assert len(fake.calls(":generateContent")) == 1  # the second row waited, no call

    assert 240 < paused <= 301
    for status, due in due_in(db).values():
        assert status == "captured"
        assert 240 < due <= 301
    assert not [e for e in logged if e["event"].startswith("gemini.retry_after")]


def test_a_date_past_the_cap_pauses_the_cap(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path, logged: Any
) -> None:
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: quota(header=http_date(86_400)))
        paused = compress_two(fake.url, tmp_path, database_url)

    assert MAX_RETRY_AFTER_SECONDS - 60 < paused <= MAX_RETRY_AFTER_SECONDS
    capped = [e for e in logged if e["event"] == "gemini.retry_after_capped"]
    assert [(e["log_level"], e["seconds"]) for e in capped] == [
        ("warning", MAX_RETRY_AFTER_SECONDS)
    ]


@pytest.mark.parametrize("skew", [-86_400 * 400, 3_600], ids=["behind", "ahead"])
def test_a_date_is_read_against_the_servers_own_clock(
    skew: float, db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # RFC 9110 10.2.3: the date is the server's, to be read against its `Date`. Read against
    # ours, a server clock a year behind asked no wait (the row came back into the quota), and
    # one an hour ahead the cap's 900 s for its 300.
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    sent = time.time() + skew
    answer = quota(header=formatdate(sent + 300, usegmt=True))
    answer.headers["Date"] = formatdate(sent, usegmt=True)
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: answer)
        paused = compress_two(fake.url, tmp_path, database_url)

    assert 290 < paused <= 301
    for status, due in due_in(db).values():
        assert status == "captured"
        assert 290 < due <= 301


@pytest.mark.parametrize("date", ["yesterday", ""], ids=["garbled", "empty"])
def test_a_date_with_an_unreadable_date_header_is_read_against_ours(
    date: str, db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    answer = quota(header=http_date(300))
    answer.headers["Date"] = date
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: answer)
        paused = compress_two(fake.url, tmp_path, database_url)

    assert 240 < paused <= 301


@pytest.mark.parametrize(
    ("header", "unreadable"),
    [
        (http_date(-3600), False),  # past: no wait, and nothing wrong with it
        ("Fri, 31 Nov 2026 03:00:00 GMT", True),  # no such day
        ("tomorrow-ish", True),
        # Each read as the date it starts with, or a date's right GMT.
        (http_date(300) + " junk", True),
        (" ".join([http_date(300)] * 1000), True),
        (http_date(300).replace("GMT", "ZZZ"), True),
        (http_date(300).replace(" GMT", ""), True),
        (http_date(300).replace("GMT", "+0000"), True),
    ],
    ids=[
        "a date past",
        "no such day",
        "garbled",
        "junk after",
        "repeated",
        "zone ZZZ",
        "no zone",
        "an offset",
    ],
)
def test_a_date_past_or_garbled_is_no_wait(
    header: str,
    unreadable: bool,
    db: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    logged: Any,
) -> None:
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    with fake_gemini() as fake:
        fake.queue(":generateContent", quota(header=header))
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Learned: x")))
        paused = compress_two(fake.url, tmp_path, database_url)

    assert paused == 0
    (waiting, compressed) = sorted(due_in(db).values())
    assert waiting[0] == "captured"
    assert waiting[1] <= 2.5  # its own backoff (jittered: it may be due already)
    assert compressed[0] == "compressed"
    ignored = [e for e in logged if e["event"] == "gemini.retry_after_unreadable"]
    assert [(e["log_level"], e["asked"]) for e in ignored] == (
        [("warning", header[:100])] if unreadable else []
    )


@pytest.mark.parametrize(
    "form",
    [
        "Fri, 27 Nov 2026 03:00:00 GMT",  # IMF-fixdate
        "Friday, 27-Nov-26 03:00:00 GMT",  # RFC 850
        "Fri Nov 27 03:00:00 2026",  # asctime
        "Fri Nov  7 03:00:00 2026",  # asctime, a day padded with a space
    ],
)
def test_each_of_rfc_9110s_three_date_forms_is_read(form: str) -> None:
    day = 7 if "  7" in form else 27
    expected = calendar.timegm((2026, 11, day, 3, 0, 0))
    assert generation._http_date(form) == expected


def test_a_cancels_date_holds_the_sweep_until_then(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    pending_cancel(db, "batches/job-1")
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: quota(header=http_date(300)))

        async def one_sweep() -> cancels.Swept:
            async with worker_on(with_key(fake, tmp_path), database_url) as worker:
                return await jobs.sweep_cancels(worker.ctx)

        swept = asyncio.run(one_sweep())

    assert 240 < swept.next_in(1.0) <= 301


def test_an_embeddings_date_leases_the_rows_until_then(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", lambda _r: quota(header=http_date(300)))
        add_memory_row(db, "written during the quota window")

        async def one_batch() -> None:
            async with worker_on(embedding_settings(fake, tmp_path), database_url) as worker:
                await jobs.embed_batch(worker.ctx)

        asyncio.run(one_batch())

    ((attempts, lease),) = db.execute(
        "SELECT embed_attempts, extract(epoch FROM embed_claimed_until - now())::float "
        "FROM memory_chunks"
    ).fetchall()
    assert attempts == 0  # waited out, not charged
    assert 240 < lease <= 301
