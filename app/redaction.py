"""Today's redaction rules applied to everything already stored (`agmem redact`).

Text is sanitized when it is stored, under the rules of that day: a secret whose shape a later
rule catches stays in the rows written before it (observations, summaries, kv memories and their
history, every index row). This pass walks each table in primary-key order, one short
transaction a batch (its rows locked for the batch only: a write to one of them waits for the
batch's read, redaction and updates), and rewrites only the values the rules change. A batch is
at most BATCH_ROWS rows and BATCH_BYTES of their text (a compressed jsonb by its text), or one
row bigger than that. The rules' regex work for rows up to HUGE_ROW_BYTES runs in the caller's
event loop (in a thread it made the pass slower: the regexes hold the GIL), so the pass turns the
loop after every PIECE_BYTES of rows it redacted: in `agmem serve` a request waits for one
batch's fetch or one piece's redaction at most, not for 500 rows of 64 KB (/health max 221 ms
seen before, bench.redact --large). A row bigger than HUGE_ROW_BYTES is redacted whole (cut into
pieces, a rule would not see a secret across a cut) in a child process (app/redaction_worker.py,
started at the pass's first such row, ended with the pass or with its process), the loop turning
while it runs. A jsonb is read as its text: its parse is the redaction's work, not the fetch's.

Only `redact_secrets` and the credential-named JSON keys are applied, not `<private>` stripping:
a stored memory-file chunk keeps a `<private>` written inside a code span, as its sync did.
Running it twice changes nothing the second time.

A changed index row gets its content hash and search terms again (the generated tsvector
follows its content) and loses its vector, so that the worker embeds the redacted text. The
embedding cache's vector of the old text, which no row names any more, goes with the worker's
hourly prune of orphans (an hour after it was cached at the earliest).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import exactjson
from app.errors import AppError
from app.index.terms import search_terms
from app.index.writer import content_hash
from app.privacy import redact_json, redact_json_text, redact_secrets, redact_secrets_lines
from app.redaction_worker import HEADER, frame

BATCH_ROWS = 500
# A batch's text bytes (its redacted columns), a row bigger than this alone. The whole result of
# a batch's SELECT is converted in one go, without a turn of the event loop: with jsonb parsed
# there, 500 rows of 64 KB took 75 ms of it, 1 MB of rows ~5 ms. A jsonb is now read as its text
# and parsed in its row's redaction (`_json`); the bound also keeps a batch's locks short.
BATCH_BYTES = 1 << 20
# The redaction of this much text, or of one row bigger than it (up to HUGE_ROW_BYTES), between
# two turns of the event loop: `agmem serve`'s requests wait for no more. 64 KB of text is ~1 ms
# of the rules' work, of JSON of small dicts up to ~15 ms (a rule's walk per string). Not fewer:
# 100,000 small rows would pay a turn (~3 µs, and the other tasks' work) each.
PIECE_BYTES = 64 << 10
# A row with more text than this is redacted in a child process, the loop turning meanwhile: its
# redaction in one go would hold the loop (2 MB of JSON: ~490 ms). Not in a thread: the GIL is
# held for the whole of one C call, and a 2 MB JSON's parse, serializing, comparison and freeing
# are ~60 ms each (the loop's longest stall 141-174 ms with them in a thread). Not every row: a
# hand-off costs a pickle of the row's text each way, and the process's start ~0.2 s a pass.
HUGE_ROW_BYTES = 256 << 10
# Who wrote a kv memory's version that the redaction made (its `updatedBy`, then its history's
# `writtenBy`).
REDACTION_WRITER = "agmem redact"

_T = TypeVar("_T")
log = structlog.get_logger(__name__)


def _tags(tags: list[str] | None) -> list[str] | None:
    # As a write stores them: each redacted, the ones made equal kept once.
    if tags is None:
        return None
    return list(dict.fromkeys(tag for tag in (redact_secrets(t).strip() for t in tags) if tag))


def _text(value: str | None) -> str | None:
    return redact_secrets(value) if value is not None else None


def _name(value: str | None) -> str | None:
    # A varchar(200) (who wrote it): redaction can lengthen a short secret ("-pab1").
    return redact_secrets(value)[:200] if value is not None else None


def _json(value: str | None) -> str | None:
    # A jsonb is fetched as its text and parsed here, in the redaction (a huge row's in a worker
    # process): psycopg parsed it in the fetch, on the event loop (2 MB of small dicts ~60 ms).
    # Unchanged, its text is given back as fetched; changed, as the UPDATE binds it. Its numbers
    # are written back as stored (app/exactjson.py): only its strings are the rules' to change.
    if value is None:
        return None
    # A jsonb's text is always JSON, and `exactjson.loads` reads each of its numbers: only the
    # nesting can stop the parse.
    try:
        stored = exactjson.loads(value)
    except RecursionError:
        return redact_json_text(value)
    try:
        redacted = redact_json(stored)
        return value if redacted == stored else exactjson.dumps(redacted)
    except RecursionError:
        # Read, but too deep for the walks: the nesting Python's parser stops at is near it.
        return redact_json_text(value)


@dataclass(frozen=True)
class _Table:
    name: str
    key: str
    # column -> (redaction, SQL cast of its new value)
    columns: dict[str, tuple[Callable[[Any], Any], str]]
    # A kv memory: a change is a write, a new version with the one it replaces in its history.
    versioned: bool = False

    @property
    def size(self) -> str:
        """SQL for the text bytes of a row's redacted columns, the measure of its work."""
        return _size((column, cast) for column, (_redact, cast) in self.columns.items())

    def selected(self, column: str) -> str:
        """SQL for `column` as the pass reads it: a jsonb as its text (see `_json`)."""
        return f"{column}::text AS {column}" if self.columns[column][1] == "jsonb" else column


def _size(columns: Iterable[tuple[str, str]]) -> str:
    # A compressed jsonb by its text, not its stored size: a kv memory's value is stored
    # compressed (2 MB of small dicts in 146 KB), and both its parsing and its redaction go by
    # its text. An uncompressed one (observations' args and results are stored EXTERNAL) by its
    # stored size, near its text's: making the text of every 64 KB observation twice a batch
    # (the size window, the fetch) cost the pass ~40%. pg_column_compression and octet_length
    # of a text read only the TOAST pointer. A text[] (tags) is small.
    def one(column: str, cast: str) -> str:
        if cast == "text":
            return f"octet_length({column})"
        if cast == "jsonb":
            return (
                f"CASE WHEN pg_column_compression({column}) IS NULL "
                f"THEN pg_column_size({column}) ELSE octet_length({column}::text) END"
            )
        return f"pg_column_size({column})"

    return " + ".join(f"coalesce({one(column, cast)}, 0)" for column, cast in columns)


_TEXT = (_text, "text")
_NAME = (_name, "text")
_JSON = (_json, "jsonb")
_TABLES = (
    _Table(
        "sessions",
        "id",
        {"user_prompt": _TEXT, "summary": _TEXT, "created_by": _NAME, "metadata": _JSON},
    ),
    _Table(
        "observations",
        "id",
        {"function_args": _JSON, "result": _JSON, "compressed_data": _TEXT, "entities": _JSON},
    ),
    _Table(
        "memories",
        "id",
        {"value": _JSON, "tags": (_tags, "text[]"), "created_by": _NAME, "updated_by": _NAME},
        versioned=True,
    ),
    _Table("memory_versions", "id", {"value": _JSON, "written_by": _NAME}),
)


@dataclass
class RedactReport:
    """Rows read and rows rewritten, by table."""

    scanned: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    dry_run: bool = False

    def summary_line(self) -> str:
        parts = ", ".join(
            f"{table} {self.changed.get(table, 0)}/{self.scanned[table]}" for table in self.scanned
        )
        total = sum(self.changed.values())
        if self.dry_run:
            return f"would redact {total} rows (to change/read: {parts}); nothing written"
        return f"redacted {total} rows (changed/read: {parts})"


async def redact_stored(
    sessionmaker: async_sessionmaker[AsyncSession],
    *,
    dry_run: bool = False,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
    progress: Callable[[str, int], None] | None = None,
) -> RedactReport:
    """Apply today's redaction rules to every stored text; with `dry_run`, only count.

    `progress` is called after each batch with the table's name and its rows read so far."""
    report = RedactReport(dry_run=dry_run)
    batch = _Batch(batch_rows, batch_bytes, dry_run)
    try:
        for table in _TABLES:
            await _walk(sessionmaker, table.name, batch, report, progress, table)
        await _walk(sessionmaker, "memory_chunks", batch, report, progress, None)
    finally:
        await batch.close()
    return report


class RedactionWorkerDied(AppError):
    """The process redacting a huge row ended before answering (killed: the OOM killer, a
    signal). The pass stops; its rows done so far stay done, and the next pass goes on."""

    status_code = 503


class _Worker:
    """The process redacting the pass's huge rows (app/redaction_worker.py), one row at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.busy = False  # a row sent and not answered: a pass stopped then does not wait

    @classmethod
    async def start(cls) -> _Worker:
        # `-m`, not multiprocessing's spawn: that re-imports the caller's __main__ (see the
        # worker's docstring).
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.redaction_worker",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def call(self, function: Callable[..., _T], *args: Any) -> _T:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.busy = True
        try:
            self.process.stdin.write(frame((function, args)))
            await self.process.stdin.drain()
            header = await self.process.stdout.readexactly(HEADER.size)
            payload = await self.process.stdout.readexactly(HEADER.unpack(header)[0])
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            code = await self.process.wait()
            raise RedactionWorkerDied(
                f"the process redacting a row over {HUGE_ROW_BYTES >> 10} KB was killed "
                f"(exit {code}); the rows redacted so far stay redacted, run the pass again"
            ) from error
        self.busy = False
        ok, value = pickle.loads(payload)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    async def stop(self) -> None:
        if self.process.returncode is not None:
            return
        if self.busy:  # a pass stopped mid-row does not wait for the row
            self.process.kill()
        elif self.process.stdin is not None:
            self.process.stdin.close()  # its EOF: it exits
        await self.process.wait()


@dataclass
class _Batch:
    """A batch's bounds, and the text redacted since the event loop last turned."""

    rows: int
    bytes: int
    dry_run: bool
    unturned: int = 0
    # Started at the pass's first huge row, for the rest of the pass.
    worker: _Worker | None = None

    async def redact(self, size: int, redact: Callable[..., _T], *args: Any) -> _T:
        """`redact(*args)` for a row of `size` bytes of text; the loop turned once a piece's
        worth is done since its last turn. A huge row is redacted in a worker process: the loop
        turns meanwhile, instead of waiting for its whole redaction."""
        if size > HUGE_ROW_BYTES:
            self.unturned = 0
            if self.worker is None:
                self.worker = await _Worker.start()
            return await self.worker.call(redact, *args)
        result = redact(*args)
        self.unturned += size
        if self.unturned >= PIECE_BYTES:
            self.unturned = 0
            await asyncio.sleep(0)
        return result

    async def close(self) -> None:
        if self.worker is not None:
            worker, self.worker = self.worker, None
            await worker.stop()


async def _walk(
    sessionmaker: async_sessionmaker[AsyncSession],
    name: str,
    batch: _Batch,
    report: RedactReport,
    progress: Callable[[str, int], None] | None,
    table: _Table | None,
) -> None:
    report.scanned[name] = report.changed[name] = 0
    after: Any = None
    while True:
        async with sessionmaker() as session, session.begin():
            if table is None:
                rows, changed = await _chunk_batch(session, after, batch)
            else:
                rows, changed = await _table_batch(session, table, after, batch)
        if not rows:
            return
        after = rows[-1]
        report.scanned[name] += len(rows)
        report.changed[name] += changed
        if progress is not None:
            progress(name, report.scanned[name])


def _batch_select(table: str, key: str, columns: list[str], size: str, first: bool) -> str:
    """The next batch of `table` after key `:after` (or from its first row), locked: at most
    `:limit` rows, and at most `:budget` of their text bytes (`size`), or its first row alone.

    The batch's length comes from a running sum in key order, which stops at the first row past
    the budget (FOR UPDATE cannot lock a window's rows); the rows from a LIMIT of that length, as
    before, in the same statement and so the same snapshot."""
    after = f"WHERE {key} > :after " if not first else ""
    sizes = (
        f"SELECT row_number() OVER w AS n, sum({size}) OVER w AS running "
        f"FROM {table} {after}WINDOW w AS (ORDER BY {key}) ORDER BY {key} LIMIT :limit + 1"
    )
    rows = (
        f"coalesce((SELECT n - 1 FROM ({sizes}) s "
        "WHERE n > 1 AND (running > :budget OR n > :limit) LIMIT 1), :limit)"
    )
    return (
        f"SELECT {key}, {size} AS text_bytes, {', '.join(columns)} FROM {table} {after}"
        f"ORDER BY {key} LIMIT {rows} FOR UPDATE"
    )


def _redact_row(table: _Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's changed columns, with their values as the UPDATE binds them (a jsonb's as JSON
    text, made here: for a huge value, its parsing and serializing are as long as a piece of
    the rules)."""
    new: dict[str, Any] = {}
    for column, (redact, _cast) in table.columns.items():
        old = row[column]
        value = redact(old)
        if value != old:
            new[column] = value
    return new


async def _table_batch(
    session: AsyncSession, table: _Table, after: Any, batch: _Batch
) -> tuple[list[Any], int]:
    """Redact one batch of `table`'s rows after key `after`: (the keys read, rows changed)."""
    columns = [table.selected(column) for column in table.columns]
    columns += list(_VERSION_COLUMNS) if table.versioned else []
    select = _batch_select(table.name, table.key, columns, table.size, after is None)
    params = {"after": after, "limit": batch.rows, "budget": batch.bytes}
    rows = (await session.execute(text(select), params)).all()
    changed = 0
    for row in rows:
        # A huge row is pickled to the worker process: as a dict (a Row holds its cursor's
        # metadata); the others are redacted here, copying nothing.
        values = dict(row._mapping) if row.text_bytes > HUGE_ROW_BYTES else row._mapping
        new = await batch.redact(row.text_bytes, _redact_row, table, values)
        if not new:
            continue
        changed += 1
        if batch.dry_run:
            continue
        sets = [f"{column} = CAST(:{column} AS {table.columns[column][1]})" for column in new]
        if table.versioned:
            await _keep_version(session, row, new)
            sets += _NEW_VERSION
            new["updated_by"] = REDACTION_WRITER
        await session.execute(
            text(
                f"UPDATE {table.name} SET {', '.join(dict.fromkeys(sets))} WHERE {table.key} = :key"
            ),
            {**new, "key": getattr(row, table.key)},
        )
    return [getattr(row, table.key) for row in rows], changed


# docs/memories.md: a memory's version is +1 on every write, and every update first keeps the
# stored value in its history. A redaction is a write: a client holding the ETag of the
# secret-bearing value gets a 409 instead of overwriting the redacted one unawares. The history
# keeps the replaced version redacted (keeping its secret would undo the pass), and the TTL is
# not restarted: the owner did not write.
_VERSION_COLUMNS = ("version", "updated_at", "project_path")
_NEW_VERSION = [
    "updated_by = CAST(:updated_by AS text)",
    "version = version + 1",
    "updated_at = now()",
]
_KEEP_VERSION = text(
    "INSERT INTO memory_versions (memory_id, project_path, version, value, written_by, "
    "written_at) VALUES (:id, :project, :version, CAST(:value AS jsonb), :by, :at)"
)


async def _keep_version(session: AsyncSession, row: Any, new: dict[str, Any]) -> None:
    """The memory's current version, as a write keeps it in `memory_versions`, redacted."""
    writer = new.get("updated_by", row.updated_by) or new.get("created_by", row.created_by)
    kept = {
        "id": row.id,
        "project": row.project_path,
        "version": row.version,
        "value": new.get("value", row.value),
        "by": writer,
        "at": row.updated_at,
    }
    await session.execute(_KEEP_VERSION, kept)


_CHUNKS = text(
    _batch_select(
        "memory_chunks", "id", ["content", "search_terms"], _size([("content", "text")]), False
    )
)
_SET_CHUNK = text(
    "UPDATE memory_chunks SET content = :content, hash = :hash, search_terms = :terms, "
    "embedding = NULL, model = NULL, embed_attempts = 0, embed_error = NULL, "
    "embed_claimed_until = NULL WHERE id = :id"
)


async def _chunk_batch(session: AsyncSession, after: Any, batch: _Batch) -> tuple[list[Any], int]:
    params = {"after": after or 0, "limit": batch.rows, "budget": batch.bytes}
    rows = (await session.execute(_CHUNKS, params)).all()
    changed = 0
    for row in rows:
        # Lines kept: a file chunk's start and end lines still point at its text.
        content = await batch.redact(row.text_bytes, redact_secrets_lines, row.content)
        if content == row.content:
            continue
        changed += 1
        if not batch.dry_run:
            params = {
                "id": row.id,
                "content": content,
                "hash": content_hash(content),
                "terms": _terms(row.content, content, row.search_terms),
            }
            await session.execute(_SET_CHUNK, params)
    return [row.id for row in rows], changed


def _terms(old: str, new: str, stored: str | None) -> str:
    """The search terms of the redacted content: a file chunk's terms end with its section
    titles (`index_terms`), which the content does not hold, so they are kept, redacted."""
    terms = search_terms(new)
    own = search_terms(old)
    if stored and stored.startswith(own):
        headings = redact_secrets(stored[len(own) :]).strip()
        return f"{terms} {headings}".strip() if headings else terms
    return terms
