"""After an upgrade of the privacy rules the worker redacts what is stored, once, in the
background (app/worker/rescan.py), and `agmem status` says whether that is pending."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from app.db.engine import make_async_engine, make_sessionmaker
from app.privacy import RULES_GENERATION, RULES_VERSION
from app.redaction import RedactReport
from app.worker.loop import Worker
from app.worker.rescan import CLAIM_KEYS, rescan_if_pending
from tests.cli.helpers import invoke_agmem
from tests.conftest import libpq_url, make_settings
from tests.test_redaction import TABLES, _leaking, _store_old_secrets
from tests.worker.builders import make_observation, make_session, run_until

OLD_RULES = "0123456789abcdef"


def _state(
    db: psycopg.Connection[Any], rules: str | None, generation: int | None = None, **claim: Any
) -> None:
    db.execute(
        "INSERT INTO redaction_state (id, rules, generation, claimed_by, claimed_until) "
        "VALUES (1, %s, %s, %s, now() + %s::interval)",
        (rules, generation, claim.get("by"), claim.get("until")),
    )


def _rescan(url: str, worker: str = "w1") -> RedactReport | None:
    async def go() -> RedactReport | None:
        engine = make_async_engine(url, pool_size=2)
        try:
            return await rescan_if_pending(make_sessionmaker(engine), worker, batch_rows=2)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _row(db: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT rules, redacted_at IS NOT NULL, claimed_by, claimed_until, xmin::text "
        "FROM redaction_state"
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_rows_stored_under_other_rules_are_redacted_once(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    _state(db, OLD_RULES)

    report = _rescan(database_url)
    assert report is not None
    assert sum(report.changed.values()) == 5
    assert _leaking(db) == dict.fromkeys(TABLES, 0)
    rules, redacted, by, until, version = _row(db)
    assert (rules, redacted, by, until) == (RULES_VERSION, True, None, None)

    # Nothing pending: one statement that matches no row, and writes none (the row's xmin holds).
    assert _rescan(database_url) is None
    assert _row(db)[4] == version


def test_a_database_upgraded_to_0005_is_rescanned_once(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    _state(db, None)  # as the migration leaves it
    assert _rescan(database_url) is not None
    assert _leaking(db) == dict.fromkeys(TABLES, 0)
    assert _row(db)[0] == RULES_VERSION


def _hold_claim(url: str, worker: str = "other") -> psycopg.Connection[Any]:
    """A worker's pass under way: the advisory lock held on a connection of its own."""
    holder = psycopg.connect(libpq_url(url), autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s, %s)", CLAIM_KEYS)
    holder.execute("UPDATE redaction_state SET claimed_by = %s", (worker,))
    return holder


def test_a_pass_under_way_is_left_alone_and_taken_over_when_its_worker_dies(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    _state(db, OLD_RULES)
    holder = _hold_claim(database_url)
    assert _rescan(database_url) is None
    assert all(_leaking(db).values())
    running = invoke_agmem("status", DATABASE_URL=database_url)
    assert "redaction  rescan running on other:" in running.stdout

    holder.close()  # its process killed: Postgres drops the lock with the connection
    assert _rescan(database_url) is not None
    assert _leaking(db) == dict.fromkeys(TABLES, 0)


def test_a_claim_left_by_a_killed_worker_holds_nobody_up(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # fixredact17: the claim was a lease in the row; after `kill -9` of serve mid-pass the next
    # worker waited ~2 min for it to lapse, no lanes, and status named the dead process.
    _store_old_secrets(db)
    _state(db, OLD_RULES, by="dead", until="1 hour")
    pending = invoke_agmem("status", DATABASE_URL=database_url)
    assert "redaction  rescan pending:" in pending.stdout
    assert "dead" not in pending.stdout
    assert _rescan(database_url) is not None
    assert _leaking(db) == dict.fromkeys(TABLES, 0)


def test_only_a_build_with_newer_rules_rescans(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # fixredact17: two builds with different rules on one database redid the pass against each
    # other every minute, forever ("rules IS DISTINCT FROM mine").
    _store_old_secrets(db)
    _state(db, OLD_RULES, RULES_GENERATION + 1)  # a newer build redacted them
    assert _rescan(database_url) is None
    assert all(_leaking(db).values())
    status = invoke_agmem("status", DATABASE_URL=database_url)
    assert (
        f"redaction  up to date: redacted under newer rules ({OLD_RULES}, generation "
        f"{RULES_GENERATION + 1}) than this build's" in status.stdout
    )

    db.execute("UPDATE redaction_state SET generation = %s", (RULES_GENERATION - 1,))
    assert _rescan(database_url) is not None
    assert _leaking(db) == dict.fromkeys(TABLES, 0)
    assert _row(db)[0] == RULES_VERSION
    generation = db.execute("SELECT generation FROM redaction_state").fetchone()
    assert generation == (RULES_GENERATION,)


def test_a_newer_generation_redacts_camel_case_credential_keys_stored_before(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # privacy18: generation 3 splits JSON keys into camelCase words; rows stored under
    # generation 2 kept a password of no known shape under `dbPassword` or `githubToken`.
    make_session(db)
    args = {"config": {"dbPassword": "hunter2 horse", "maxTokens": "4096"}}
    make_observation(db, "o1", args=args, result={"githubToken": "hunter2tok"})
    _state(db, OLD_RULES, RULES_GENERATION - 1)

    report = _rescan(database_url)
    assert report is not None
    assert report.changed["observations"] == 1
    row = db.execute("SELECT function_args, result FROM observations").fetchone()
    assert row is not None
    assert tuple(row) == (
        {"config": {"dbPassword": "[REDACTED]", "maxTokens": "4096"}},
        {"githubToken": "[REDACTED]"},
    )


def test_a_starting_worker_rescans_before_its_lanes_take_work(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A lane that compressed an observation pending at the upgrade read its secret before the
    # pass reached it, and wrote it into compressed_data and the index flattened onto one line
    # ("read_file bWU6aHVudGVyMg== · mysql -u root -phunter2 shop password: hunter2"), where no
    # rule finds it any more.
    _store_old_secrets(db)
    _state(db, OLD_RULES)

    def done() -> bool:
        return _row(db)[0] == RULES_VERSION

    run_until(make_settings(), database_url, done)
    assert _leaking(db) == dict.fromkeys(TABLES, 0)


def test_lanes_wait_for_a_start_up_pass_that_failed_until_one_succeeds(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # fixredact17: a start-up pass that failed (the database unreachable) let the lanes start,
    # and they compressed observations the pass had not redacted, the leak the pass before the
    # lanes exists to prevent. The table gone for 1.5 s makes the pass fail the same way.
    _store_old_secrets(db)
    _state(db, OLD_RULES)
    db.execute("ALTER TABLE redaction_state RENAME TO redaction_state_away")

    def back() -> None:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
            connection.execute("ALTER TABLE redaction_state_away RENAME TO redaction_state")

    timer = threading.Timer(1.5, back)
    timer.start()

    def done() -> bool:
        found = db.execute("SELECT to_regclass('redaction_state') IS NOT NULL").fetchone()
        return bool(found and found[0]) and _row(db)[0] == RULES_VERSION

    try:
        run_until(make_settings(), database_url, done)
    finally:
        timer.join()
    assert _leaking(db) == dict.fromkeys(TABLES, 0)


def test_status_shows_a_pending_rescan_until_it_ran(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _state(db, OLD_RULES)
    pending = invoke_agmem("status", DATABASE_URL=database_url)
    assert pending.returncode == 0, pending.stderr
    assert (
        f"redaction  rescan pending: stored rows last redacted under {OLD_RULES}, rules now "
        f"{RULES_VERSION}" in pending.stdout
    )

    # `agmem redact` is the same pass: it records it.
    assert invoke_agmem("redact", DATABASE_URL=database_url).returncode == 0
    done = invoke_agmem("status", DATABASE_URL=database_url)
    assert f"redaction  up to date (rules {RULES_VERSION}, since " in done.stdout


async def _stopped_during_rescan(url: str, ready: Callable[[], bool]) -> float:
    """Start a worker, stop it once `ready()` holds, and time the stop."""
    engine = make_async_engine(url, pool_size=4)
    stop = asyncio.Event()
    try:
        worker = Worker(
            settings=make_settings(), sessionmaker=make_sessionmaker(engine), database_url=url
        )
        running = asyncio.create_task(worker.run(stop))
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(ready):
            assert time.monotonic() < deadline
            assert not running.done()
            await asyncio.sleep(0.05)
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(running, timeout=30)
        return time.monotonic() - started
    finally:
        await engine.dispose()


def _claimed(url: str) -> Callable[[], bool]:
    def claimed() -> bool:
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            row = connection.execute("SELECT claimed_by FROM redaction_state").fetchone()
        return row is not None and row[0] is not None

    return claimed


def _after(seconds: float) -> Callable[[], bool]:
    until = time.monotonic() + seconds
    return lambda: time.monotonic() >= until


def test_a_stop_does_not_wait_for_the_pass_and_gives_its_claim_back(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    _state(db, OLD_RULES)
    # A capture holding a session's row: the pass waits on its first batch.
    with psycopg.connect(libpq_url(database_url)) as holder:
        holder.execute("SELECT 1 FROM sessions FOR UPDATE")
        # Stopped once the pass holds the claim and waits on that row: the stop cancels it.
        took = asyncio.run(_stopped_during_rescan(database_url, _claimed(database_url)))
        holder.rollback()
    assert took < 5
    rules, _redacted, by, until, _xmin = _row(db)
    assert (rules, by, until) == (OLD_RULES, None, None)  # the next start runs it


def test_a_worker_waits_for_another_workers_pass_and_a_stop_ends_the_wait(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _state(db, OLD_RULES)
    with _hold_claim(database_url):
        took = asyncio.run(_stopped_during_rescan(database_url, _after(1.5)))
    assert took < 5
    assert _row(db)[0] == OLD_RULES


def test_a_start_up_pass_finishes_past_rows_python_json_cannot_read(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A jsonb integer of 5,000 digits (Python's json refuses more than 4,300) failed every pass,
    # and the lanes waited behind the retries for ever; a jsonb nested past Python's recursion
    # limit cannot be parsed at all: it is redacted in its text, and so is the rest.
    _store_old_secrets(db)
    for key, value in (("digits", "[" + "9" * 5000 + "]"), ("deep", "[" * 5000 + "]" * 5000)):
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('global', '', %s, %s::jsonb, 'me')",
            (key, value),
        )
    _state(db, OLD_RULES)

    def done() -> bool:
        return _row(db)[0] == RULES_VERSION

    run_until(make_settings(), database_url, done)
    assert _leaking(db) == dict.fromkeys(TABLES, 0)
    assert db.execute(
        "SELECT length(value::text) FROM memories WHERE key = 'digits'"
    ).fetchone() == (5002,)
