"""A Batch API job we stop waiting for is cancelled at Gemini, through the real google-genai
client and the fake server, and the cancel's state is kept in `embedding_batches`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from structlog.testing import capture_logs

from app.config import Settings
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from app.sync import cancels
from app.sync.indexer import SyncRequest, sync_project
from app.sync.report import SyncReport
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, RecordedRequest, fake_gemini
from tests.sync.helpers import make_project, on_engine, run_sync
from tests.sync.test_gemini_sync import BatchServer, sync_leaving_the_batch_running

CANCEL = "batches/job-1:cancel"


def accepted(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse(200, {})


def error(code: int, status: str) -> FakeResponse:
    return FakeResponse(
        code, {"error": {"code": code, "message": status.lower(), "status": status}}
    )


def narrow_answer(request: RecordedRequest) -> FakeResponse:
    return FakeResponse(
        200, {"embeddings": [{"values": [0.5] * 256} for _ in request.body["requests"]]}
    )


def local_with_key(fake: FakeGemini, tmp_path: Path) -> Any:
    """The model switched to `local`, a Gemini key still configured (for the cancel only)."""
    return make_settings(home=tmp_path / "home", gemini_api_key="k", gemini_base_url=fake.url)


def later(db: psycopg.Connection[Any]) -> None:
    """As if the last try were long enough ago for the next sync to try again."""
    db.execute("UPDATE embedding_batches SET updated_at = updated_at - interval '1 hour'")


def cancel_state(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT status, cancel_status, cancel_requested_at IS NOT NULL, "
        "cancel_settled_at IS NOT NULL, cancel_error FROM embedding_batches"
    ).fetchall()


@dataclass
class Superseded:
    """A project whose Batch API job still runs at the fake Gemini (`batches/job-1`), and its
    syncs with the model switched to `local`, the key kept (`settings`)."""

    fake: FakeGemini
    server: BatchServer
    project: Path
    settings: Settings
    database_url: str
    db: psycopg.Connection[Any]

    def sync(self, settings: Settings | None = None) -> SyncReport:
        """One sync with the local model (with `settings`' key, the key kept when not given)."""
        return run_sync(
            self.database_url, settings or self.settings, local_embedder(), self.project
        )

    def sync_later(self, settings: Settings | None = None) -> SyncReport:
        """A sync long enough after the last cancel's try to try again."""
        later(self.db)
        return self.sync(settings)


@pytest.fixture
def job(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> Iterator[Superseded]:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        server, _ = sync_leaving_the_batch_running(fake, tmp_path, database_url, project)
        yield Superseded(fake, server, project, local_with_key(fake, tmp_path), database_url, db)


def test_a_superseded_job_is_cancelled_at_gemini_once(
    job: Superseded, db: psycopg.Connection[Any]
) -> None:
    job.fake.on(CANCEL, accepted)

    report = job.sync()
    job.sync_later()

    calls = job.fake.calls(":cancel")
    assert [(c.method, c.path.split("?")[0].rsplit("/", 2)[1:]) for c in calls] == [
        ("POST", ["batches", "job-1:cancel"])
    ]
    assert report.errors == []
    assert cancel_state(db) == [("failed", "cancelled", True, True, None)]


def test_a_cancel_that_failed_is_retried_by_the_next_sync(
    job: Superseded, db: psycopg.Connection[Any]
) -> None:
    job.fake.queue(CANCEL, error(503, "UNAVAILABLE"), error(429, "RESOURCE_EXHAUSTED"))
    job.fake.queue(CANCEL, FakeResponse(drop=True))
    job.fake.on(CANCEL, accepted)

    first = job.sync()
    assert first.errors == []  # the sync itself is fine
    state = cancel_state(db)
    assert state[0][:4] == ("failed", "pending", True, False)
    assert "503" in state[0][4]

    # Not at once: a watch's every sync waited on a failing cancel during an outage.
    job.sync()
    assert len(job.fake.calls(":cancel")) == 1
    job.sync_later()
    assert "429" in cancel_state(db)[0][4]
    job.sync_later()
    assert cancel_state(db)[0][1] == "pending"  # the network failed: tried again later
    job.sync_later()
    job.sync_later()

    assert len(job.fake.calls(":cancel")) == 4
    assert cancel_state(db) == [("failed", "cancelled", True, True, None)]


def test_without_a_key_the_cancel_is_recorded_as_not_done_and_logged_once(
    job: Superseded, db: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.fake.on(CANCEL, accepted)
    no_key = make_settings(home=tmp_path / "home")

    # A logger keeps the configuration of its first use (an in-process CLI test's level).
    configure_logging("info")
    monkeypatch.setattr(cancels, "log", structlog.get_logger(cancels.__name__))
    with capture_logs() as logged:
        first = job.sync(no_key)
        second = job.sync_later(no_key)

    assert (first.errors, second.errors) == ([], [])
    assert job.fake.calls(":cancel") == []
    assert cancel_state(db) == [
        ("failed", "pending", True, False, "not cancelled: GEMINI_API_KEY is not set")
    ]
    unconfigured = [e for e in logged if e["event"] == "sync.batch_cancel_failed"]
    assert len(unconfigured) == 1
    assert unconfigured[0]["job"] == "batches/job-1"

    # A key set later: the next sync cancels it.
    job.sync_later()
    assert len(job.fake.calls(":cancel")) == 1
    assert cancel_state(db) == [("failed", "cancelled", True, True, None)]


@pytest.mark.parametrize(
    "answer", [error(400, "FAILED_PRECONDITION"), error(404, "NOT_FOUND")], ids=["ended", "gone"]
)
def test_a_job_ended_or_gone_at_gemini_is_closed_without_retrying(
    job: Superseded, db: psycopg.Connection[Any], answer: FakeResponse
) -> None:
    job.fake.on(CANCEL, lambda _r: answer)

    report = job.sync()
    job.sync_later()

    assert len(job.fake.calls(":cancel")) == 1
    assert report.errors == []
    state = cancel_state(db)
    assert state[0][:4] == ("failed", "ended", True, True)
    assert str(answer.status) in state[0][4]


def test_a_cancel_pending_past_the_jobs_48_hours_is_closed_without_a_call(
    job: Superseded, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Gemini ends every job within 48 hours of its creation: nothing is left to cancel.
    job.sync(make_settings(home=tmp_path / "home"))
    db.execute("UPDATE embedding_batches SET created_at = now() - interval '49 hours'")
    job.fake.on(CANCEL, accepted)

    job.sync_later()

    assert job.fake.calls(":cancel") == []
    assert cancel_state(db)[0][:4] == ("failed", "expired", True, True)


def test_a_switch_between_gemini_models_cancels_with_the_current_client(
    job: Superseded, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from tests.sync.test_gemini_sync import gemini

    job.fake.on(CANCEL, accepted)
    job.fake.on(":batchEmbedContents", narrow_answer)
    settings, embedder = gemini(
        job.fake, tmp_path, embedding_dims=256, gemini_embed_batch_threshold=100_000
    )

    run_sync(job.database_url, settings, embedder, job.project)

    assert len(job.fake.calls(":cancel")) == 1
    # After the embedding pass: a cancel never holds up the sync's own work.
    routes = [r.path.split("?")[0] for r in job.fake.requests]
    assert routes.index(job.fake.calls(":cancel")[0].path.split("?")[0]) > max(
        i for i, route in enumerate(routes) if route.endswith(":batchEmbedContents")
    )
    assert cancel_state(db) == [("failed", "cancelled", True, True, None)]


def test_a_job_of_the_current_model_is_never_cancelled(
    job: Superseded, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from tests.sync.test_gemini_sync import gemini

    job.fake.on(CANCEL, accepted)
    job.server.polls_pending = 0
    settings, embedder = gemini(job.fake, tmp_path, gemini_embed_batch_threshold=5)

    run_sync(job.database_url, settings, embedder, job.project)

    assert job.fake.calls(":cancel") == []
    assert cancel_state(db) == [("done", None, False, False, None)]


def test_a_cancel_refused_for_a_bad_key_stays_pending_until_the_key_works(
    job: Superseded, db: psycopg.Connection[Any]
) -> None:
    # Gemini answers a key it does not know with 400 INVALID_ARGUMENT, not 401: taken for
    # "already ended", the job was never cancelled once the key was fixed.
    job.fake.queue(CANCEL, error(400, "INVALID_ARGUMENT"))
    job.fake.on(CANCEL, accepted)

    job.sync()
    state = cancel_state(db)
    assert state[0][:4] == ("failed", "pending", True, False)
    assert "INVALID_ARGUMENT" in state[0][4]
    job.sync_later()

    assert len(job.fake.calls(":cancel")) == 2
    assert cancel_state(db) == [("failed", "cancelled", True, True, None)]


@pytest.mark.parametrize("key", ["s\u00e9cret-KEY-0042", "secret\x00KEY-0042"])
def test_a_key_the_client_cannot_send_never_reaches_the_table_or_the_log(
    job: Superseded,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
) -> None:
    # The client's errors name the header's value: a non-ASCII key's UnicodeEncodeError holds
    # it in its repr, a NUL's LocalProtocolError in its message.
    job.fake.on(CANCEL, accepted)
    # Settings refuse such a key (tests/test_settings.py); set past that check, the
    # scrub of every Gemini error is the second line.
    settings = make_settings(home=tmp_path / "home", gemini_base_url=job.fake.url).model_copy(
        update={"gemini_api_key": key}
    )

    configure_logging("info")
    monkeypatch.setattr(cancels, "log", structlog.get_logger(cancels.__name__))
    with capture_logs() as logged:
        report = job.sync(settings)

    assert job.fake.calls(":cancel") == []
    assert report.errors == []
    state = cancel_state(db)
    assert state[0][:4] == ("failed", "pending", True, False)
    # The error's type stays, to say what went wrong.
    assert state[0][4].startswith(
        ("cancel failed: UnicodeEncodeError", "cancel unreachable: LocalProtocolError")
    )
    for text in (state[0][4], repr(logged)):
        for fragment in ("KEY-0042", "KEY\\x2d0042", "cr\\xc3\\xa9t"):
            assert fragment not in text
    assert any(e["event"] == "sync.batch_cancel_failed" for e in logged)


def test_cancels_that_hang_are_cut_by_one_deadline_and_stay_pending(
    job: Superseded, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Each cancel waited up to its own timeout, one after another, the project's lock held.
    job.sync(make_settings(home=tmp_path / "home"))
    db.execute(
        "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status, "
        "last_error, cancel_status, cancel_requested_at) SELECT project_path, model, "
        "'batches/job-2', hashes, status, last_error, cancel_status, cancel_requested_at "
        "FROM embedding_batches"
    )
    job.fake.on(":cancel", lambda _r: FakeResponse(200, {}, delay_s=30))

    started = time.monotonic()
    report = job.sync_later()  # a cancel's own timeout: 10 s
    took = time.monotonic() - started

    assert len(job.fake.calls(":cancel")) == 2  # both asked, at once
    assert took < cancels.CANCEL_DEADLINE_SECONDS + 3
    assert report.errors == []
    states = cancel_state(db)
    assert [s[:4] for s in states] == [("failed", "pending", True, False)] * 2
    assert all("no answer within" in s[4] for s in states)


def test_a_sync_stopped_while_a_cancel_hangs_stops_at_once(
    job: Superseded, db: psycopg.Connection[Any]
) -> None:
    # A cancel in a worker thread ran on to its timeout when the sync was stopped (Ctrl-C):
    # the process's exit waited for the thread.
    job.fake.on(CANCEL, lambda _r: FakeResponse(200, {}, delay_s=30))
    request = SyncRequest(project_path=str(job.project))

    stopped_at: list[float] = []

    async def stopped_mid_cancel(sessionmaker: Any) -> None:
        sync = asyncio.create_task(
            sync_project(sessionmaker, job.settings, local_embedder(), request)
        )
        while not job.fake.calls(":cancel"):
            await asyncio.sleep(0.01)
        stopped_at.append(time.monotonic())
        sync.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sync

    on_engine(job.database_url, stopped_mid_cancel)  # its end: the event loop's, threads too
    took = time.monotonic() - stopped_at[0]

    # The cancel's own timeout is 10 s, the sync's bound on cancels 5 s: well under both, with
    # room for a loaded machine.
    assert took < 4
    assert cancel_state(db)[0][:2] == ("failed", "pending")


def all_closed(fake: FakeGemini, route: str, *, within: float = 10.0) -> bool:
    """Whether every connection that asked `route` is closed by its client, within `within` s
    (the fake's thread notices a close when it reads the next request)."""
    deadline = time.monotonic() + within
    while fake.left_open(route):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize(
    "answer", [accepted, lambda _r: error(503, "UNAVAILABLE")], ids=["accepted", "refused"]
)
def test_a_syncs_cancel_client_leaves_no_connection_open(
    job: Superseded, answer: Callable[[RecordedRequest], FakeResponse]
) -> None:
    # The client a sync makes for its cancels (the model switched to `local`, the key kept) was
    # never closed: its connection to Gemini stayed open until the garbage collector came by.
    job.fake.on(CANCEL, answer)

    job.sync()

    assert len(job.fake.calls(":cancel")) == 1
    assert all_closed(job.fake, ":cancel")


def test_a_sync_stopped_after_its_cancel_was_answered_leaves_no_connection_open(
    job: Superseded,
) -> None:
    # Stopped while its answered cancel is being recorded: the connection the answer came on
    # is idle in the client's pool, and only closing the client closes it (a request cut
    # mid-answer has its connection closed by httpcore, closed client or not).
    locked = threading.Event()

    def answered_once_locked(_request: RecordedRequest) -> FakeResponse:
        locked.wait(30)
        return FakeResponse(200, {})

    job.fake.on(CANCEL, answered_once_locked)
    request = SyncRequest(project_path=str(job.project))
    holder = psycopg.connect(job.database_url)

    def settle_waits_for_the_lock() -> bool:
        waiting = job.db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE 'UPDATE embedding_batches AS b SET cancel_status%'"
        ).fetchone()
        return bool(waiting and waiting[0])

    async def stopped_while_settling(sessionmaker: Any) -> tuple[bool, int]:
        sync = asyncio.create_task(
            sync_project(sessionmaker, job.settings, local_embedder(), request)
        )
        while not job.fake.calls(":cancel"):
            await asyncio.sleep(0.01)
        # The sync took its cancel in a statement of its own: the row is free to lock until
        # the answer is recorded, which then waits for this lock.
        holder.execute("SELECT id FROM embedding_batches FOR UPDATE")
        locked.set()
        while not settle_waits_for_the_lock():
            await asyncio.sleep(0.01)
        sync.cancel()
        holder.rollback()
        kept: BaseException | None = None
        try:
            await sync
        except asyncio.CancelledError as stopped:
            # Kept, as whatever stops a sync may keep it (a log, a caller's handler): its
            # traceback holds the sync's frames and the client in them. Dropped, the client's
            # own __del__ closed it, and the test could not tell a client left open.
            kept = stopped
        deadline = time.monotonic() + 10
        while job.fake.left_open(":cancel") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        left_open = len(job.fake.left_open(":cancel"))
        del kept
        return sync.cancelled(), left_open

    try:
        stopped, left_open = on_engine(job.database_url, stopped_while_settling, timeout=60)
    finally:
        locked.set()
        holder.close()

    assert stopped
    assert len(job.fake.calls(":cancel")) == 1
    assert left_open == 0
