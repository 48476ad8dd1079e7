"""The redaction pass over big rows: batches bounded by bytes, and the event loop turned between
rows, so that `agmem serve`'s requests do not wait behind a batch of 64 KB transcripts."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.types.json
import pytest

import app.redaction
from app.db.engine import make_async_engine, make_sessionmaker
from app.redaction import RedactReport, redact_stored
from tests.worker.builders import make_observation, make_session

SECRET = "\npassword: hunter2\n"
# Text that no rule touches, cut to any length.
CLEAN = "".join(f"line {n}: const total = items.reduce(add, 0);\n" for n in range(20_000))


def _padded(size: int, secret: bool = True) -> str:
    """`size` characters of clean text, with a secret in the middle."""
    if not secret:
        return CLEAN[:size]
    half = (size - len(SECRET)) // 2
    return CLEAN[:half] + SECRET + CLEAN[: size - len(SECRET) - half]


def _run(
    url: str, progress: Callable[[str, int], None] | None = None, **options: Any
) -> RedactReport:
    async def go() -> RedactReport:
        engine = make_async_engine(url, pool_size=1)
        try:
            return await redact_stored(make_sessionmaker(engine), progress=progress, **options)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _batches(seen: list[tuple[str, int]], table: str) -> list[int]:
    """The rows of each batch of `table`, from the progress callback's running counts."""
    counts = [count for name, count in seen if name == table]
    return [b - a for a, b in zip([0, *counts], counts, strict=False)]


def test_a_row_bigger_than_the_byte_budget_is_still_redacted_in_a_batch_of_its_own(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, "s1", user_prompt=_padded(1_000))
    make_session(db, "s2", user_prompt=_padded(200_000))
    make_session(db, "s3", user_prompt=_padded(1_000))
    make_session(db, "s4", user_prompt=_padded(1_000))
    make_observation(db, "o1", result=_padded(300_000))
    seen: list[tuple[str, int]] = []

    report = _run(
        database_url,
        progress=lambda table, count: seen.append((table, count)),
        batch_bytes=64_000,
    )

    assert report.changed["sessions"] == 4
    assert report.changed["observations"] == 1
    # The big row alone; the small ones after it together again.
    assert _batches(seen, "sessions") == [1, 1, 2]
    assert _batches(seen, "observations") == [1]
    leaking = db.execute(
        "SELECT (SELECT count(*) FROM sessions WHERE user_prompt LIKE '%hunter2%') "
        "+ (SELECT count(*) FROM observations WHERE result::text LIKE '%hunter2%')"
    ).fetchone()
    assert leaking == (0,)
    (prompt,) = db.execute("SELECT user_prompt FROM sessions WHERE id = 's2'").fetchone() or ("",)
    assert prompt == _padded(200_000).replace("hunter2", "[REDACTED]")


def test_batch_boundaries_inside_a_sessions_rows_lose_nothing_and_redact_each_once(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, "s1", user_prompt=_padded(10_000))
    for n in range(1, 12):
        make_observation(db, f"o{n:02}", result=[_padded(10_000), "clean"])
    for n in range(1, 6):
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('project', '/p', %s, %s, 'me')",
            # Incompressible: a jsonb's stored bytes are the budget's measure.
            (f"k{n}", json.dumps(secrets.token_hex(5_000) + SECRET)),
        )
    seen: list[tuple[str, int]] = []

    def progress(table: str, count: int) -> None:
        seen.append((table, count))
        if (table, count) == ("observations", 2):
            # Stored while the pass runs, after the batch it is in: the walk reaches it.
            make_observation(db, "o99", result=_padded(10_000))

    report = _run(database_url, progress=progress, batch_bytes=25_000)

    assert report.scanned["observations"] == report.changed["observations"] == 12
    assert report.scanned["memories"] == report.changed["memories"] == 5
    assert set(_batches(seen, "observations")) == {2}
    assert set(_batches(seen, "memories")) <= {1, 2}
    assert db.execute(
        "SELECT count(*) FROM observations WHERE result::text LIKE '%hunter2%'"
    ).fetchone() == (0,)
    # Each memory redacted once: one new version each, and one kept version.
    assert db.execute("SELECT array_agg(DISTINCT version) FROM memories").fetchone() == ([2],)
    assert db.execute(
        "SELECT count(*), count(DISTINCT memory_id) FROM memory_versions"
    ).fetchone() == (5, 5)
    assert db.execute(
        "SELECT count(*) FROM memory_versions WHERE value::text LIKE '%hunter2%'"
    ).fetchone() == (0,)


def test_the_pass_turns_the_event_loop_between_big_rows(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clean rows: the pass writes nothing, so no UPDATE's round trip turns the loop for it.
    row_chars = 128_000
    for n in range(16):
        make_session(db, f"s{n:02}", user_prompt=_padded(row_chars, secret=False))
    redacted = [0]
    redact = app.redaction.redact_secrets

    def counting(text: str) -> str:
        redacted[0] += len(text)
        return redact(text)

    # Counted, not replaced: the rules run as they do in the pass.
    monkeypatch.setattr(app.redaction, "redact_secrets", counting)
    gaps: list[int] = []

    async def go() -> RedactReport:
        engine = make_async_engine(database_url, pool_size=1)
        done = asyncio.Event()

        async def probe() -> None:
            # What the pass redacted between two of this task's turns of the loop.
            last = 0
            while not done.is_set():
                await asyncio.sleep(0)
                gaps.append(redacted[0] - last)
                last = redacted[0]

        probing = asyncio.create_task(probe())
        try:
            return await redact_stored(make_sessionmaker(engine))
        finally:
            done.set()
            await probing
            await engine.dispose()

    report = asyncio.run(go())

    assert report.scanned["sessions"] == 16
    assert sum(gaps) >= 16 * row_chars  # the probe ran throughout the pass
    # A turn after every row bigger than the pass's piece of text (64 KB): at most one row's
    # text between two turns (and the next row's few other characters).
    assert max(gaps) < 2 * row_chars


def _big_json(items: int) -> str:
    """A kv memory's value as JSON text: many small dicts, which its column stores compressed to
    a small fraction (20 of its text's bytes become ~1), and a secret in the middle."""
    value: list[Any] = [{"n": n, "note": "clean", "done": n % 2 == 0} for n in range(items)]
    value.insert(items // 2, {"note": SECRET})
    return json.dumps(value)


def _store_memories(db: psycopg.Connection[Any], count: int, items: int) -> int:
    for n in range(count):
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('project', '/p', %s, %s, 'me')",
            (f"k{n:02}", _big_json(items)),
        )
    row = db.execute(
        "SELECT max(octet_length(value::text)), max(pg_column_size(value)) FROM memories"
    ).fetchone()
    assert row is not None
    assert row[1] * 4 < row[0]  # stored compressed
    return int(row[0])


def test_a_batch_of_kv_memories_is_bounded_by_their_json_text_not_its_compressed_size(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    chars = _store_memories(db, 12, 4_000)
    seen: list[tuple[str, int]] = []

    report = _run(database_url, progress=lambda t, n: seen.append((t, n)), batch_bytes=3 * chars)

    assert report.scanned["memories"] == report.changed["memories"] == 12
    # The batch's rows are converted at once, without a turn of the loop, and their JSON parsed
    # and redacted: its text is the measure (the compressed size let ~12 rows of it into one).
    assert max(_batches(seen, "memories")) <= 3
    assert db.execute(
        "SELECT count(*) FROM memories WHERE value::text LIKE '%hunter2%'"
    ).fetchone() == (0,)


def test_a_huge_kv_memory_is_parsed_and_redacted_outside_this_process(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    chars = _store_memories(db, 2, 30_000)
    assert chars > app.redaction.HUGE_ROW_BYTES
    parsed: list[int] = []
    redacted: list[int] = []
    loads, redact = json.loads, app.redaction.redact_json

    def watched_loads(data: str | bytes | bytearray | memoryview) -> Any:
        parsed.append(len(data))
        return loads(bytes(data) if isinstance(data, memoryview) else data)

    def watched_redact(value: Any) -> Any:
        redacted.append(len(json.dumps(value)))
        return redact(value)

    # Watched, not replaced: the JSON is parsed and redacted as before. psycopg's jsonb loader
    # holds its own reference to json.loads (taken at its import), the pass the module's.
    monkeypatch.setattr(psycopg.types.json._JsonLoader, "_loads", watched_loads)
    monkeypatch.setattr(json, "loads", watched_loads)
    monkeypatch.setattr(app.redaction, "redact_json", watched_redact)

    report = _run(database_url)

    assert report.changed["memories"] == 2
    assert report.changed["memory_versions"] == 0  # the kept versions were stored redacted
    # In this process, on the loop's thread or another, a 1 MB value's parse (or serializing,
    # or freeing) is one C call holding the GIL, and so `agmem serve`'s loop, throughout
    # (2 MB of small dicts: ~60 ms each).
    huge = app.redaction.HUGE_ROW_BYTES
    assert [size for size in parsed + redacted if size > huge] == []
    assert db.execute(
        "SELECT count(*) FROM memories WHERE value::text LIKE '%hunter2%'"
    ).fetchone() == (0,)
    assert db.execute(
        "SELECT count(*) FROM memory_versions WHERE value::text LIKE '%hunter2%'"
    ).fetchone() == (0,)
