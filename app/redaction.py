"""Today's redaction rules applied to everything already stored (`agmem redact`).

Text is sanitized when it is stored, under the rules of that day: a secret whose shape a later
rule catches stays in the rows written before it (observations, summaries, kv memories and their
history, every index row). This pass walks each table in primary-key order, one short
transaction a batch (its rows locked for the batch only: a write to one of them waits for the
batch's read, redaction and updates, milliseconds for small rows, 352 ms seen for 500 rows of
64 KB), and rewrites only the values the rules change. The rules' regex work runs in the
caller's event loop: in `agmem serve` requests wait behind a batch's CPU time (/health max
341 ms seen during a pass over 64 KB rows). Only `redact_secrets` and the
credential-named JSON keys are applied, not `<private>` stripping: a stored memory-file chunk
keeps a `<private>` written inside a code span, as its sync did. Running it twice changes
nothing the second time.

A changed index row gets its content hash and search terms again (the generated tsvector
follows its content) and loses its vector, so that the worker embeds the redacted text. The
embedding cache's vector of the old text, which no row names any more, goes with the worker's
hourly prune of orphans (an hour after it was cached at the earliest).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.index.terms import search_terms
from app.index.writer import content_hash
from app.privacy import redact_json, redact_secrets, redact_secrets_lines

BATCH_ROWS = 500
# Who wrote a kv memory's version that the redaction made (its `updatedBy`, then its history's
# `writtenBy`).
REDACTION_WRITER = "agmem redact"


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


def _json(value: Any) -> Any:
    return redact_json(value) if value is not None else None


@dataclass(frozen=True)
class _Table:
    name: str
    key: str
    # column -> (redaction, SQL cast of its new value)
    columns: dict[str, tuple[Callable[[Any], Any], str]]
    # A kv memory: a change is a write, a new version with the one it replaces in its history.
    versioned: bool = False


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
    progress: Callable[[str, int], None] | None = None,
) -> RedactReport:
    """Apply today's redaction rules to every stored text; with `dry_run`, only count."""
    report = RedactReport(dry_run=dry_run)
    for table in _TABLES:
        await _walk(sessionmaker, table.name, batch_rows, report, dry_run, progress, table)
    await _walk(sessionmaker, "memory_chunks", batch_rows, report, dry_run, progress, None)
    return report


async def _walk(
    sessionmaker: async_sessionmaker[AsyncSession],
    name: str,
    batch_rows: int,
    report: RedactReport,
    dry_run: bool,
    progress: Callable[[str, int], None] | None,
    table: _Table | None,
) -> None:
    report.scanned[name] = report.changed[name] = 0
    after: Any = None
    while True:
        async with sessionmaker() as session, session.begin():
            if table is None:
                rows, changed = await _chunk_batch(session, after, batch_rows, dry_run)
            else:
                rows, changed = await _table_batch(session, table, after, batch_rows, dry_run)
        if not rows:
            return
        after = rows[-1]
        report.scanned[name] += len(rows)
        report.changed[name] += changed
        if progress is not None:
            progress(name, report.scanned[name])


async def _table_batch(
    session: AsyncSession, table: _Table, after: Any, limit: int, dry_run: bool
) -> tuple[list[Any], int]:
    """Redact one batch of `table`'s rows after key `after`: (the keys read, rows changed)."""
    columns = list(table.columns) + (list(_VERSION_COLUMNS) if table.versioned else [])
    where = f"WHERE {table.key} > :after " if after is not None else ""
    select = (
        f"SELECT {table.key}, {', '.join(columns)} FROM {table.name} {where}"
        f"ORDER BY {table.key} LIMIT :limit FOR UPDATE"
    )
    rows = (await session.execute(text(select), {"after": after, "limit": limit})).all()
    changed = 0
    for row in rows:
        new: dict[str, Any] = {}
        for column, (redact, _cast) in table.columns.items():
            old = getattr(row, column)
            value = redact(old)
            if value != old:
                new[column] = value
        if not new:
            continue
        changed += 1
        if dry_run:
            continue
        sets = [f"{column} = CAST(:{column} AS {table.columns[column][1]})" for column in new]
        params = {
            column: json.dumps(value) if table.columns[column][1] == "jsonb" else value
            for column, value in new.items()
        }
        if table.versioned:
            await _keep_version(session, row, new)
            sets += _NEW_VERSION
            params["updated_by"] = REDACTION_WRITER
        await session.execute(
            text(
                f"UPDATE {table.name} SET {', '.join(dict.fromkeys(sets))} WHERE {table.key} = :key"
            ),
            {**params, "key": getattr(row, table.key)},
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
    params = {
        "id": row.id,
        "project": row.project_path,
        "version": row.version,
        "value": json.dumps(new.get("value", row.value)),
        "by": writer,
        "at": row.updated_at,
    }
    await session.execute(_KEEP_VERSION, params)


_CHUNKS = text(
    "SELECT id, content, search_terms FROM memory_chunks WHERE id > :after "
    "ORDER BY id LIMIT :limit FOR UPDATE"
)
_SET_CHUNK = text(
    "UPDATE memory_chunks SET content = :content, hash = :hash, search_terms = :terms, "
    "embedding = NULL, model = NULL, embed_attempts = 0, embed_error = NULL, "
    "embed_claimed_until = NULL WHERE id = :id"
)


async def _chunk_batch(
    session: AsyncSession, after: Any, limit: int, dry_run: bool
) -> tuple[list[Any], int]:
    rows = (await session.execute(_CHUNKS, {"after": after or 0, "limit": limit})).all()
    changed = 0
    for row in rows:
        # Lines kept: a file chunk's start and end lines still point at its text.
        content = redact_secrets_lines(row.content)
        if content == row.content:
            continue
        changed += 1
        if not dry_run:
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
