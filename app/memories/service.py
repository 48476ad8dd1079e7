"""Key/value memories: write with version history, read by key or pattern, list, delete, purge.

Where a memory lives is its identity (scope, project_path, session_id, key), with "" for "none":
- `global`: ("", "") - visible from everywhere;
- `project`: (projectPath, "") - visible to readers naming that project;
- `session`: (projectPath or "", sessionId) - visible only to readers naming that session;
- `shared`: (projectPath or "", "") - shared between agents; a project-less shared memory is
  visible everywhere, a project's shared memory to readers naming that project.

A read without `scope` sees every memory visible to its projectPath/sessionId; an exact key
present in several scopes answers with the most specific (session, project, shared, global).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import structlog
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    delete,
    false,
    func,
    literal,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app import exactjson
from app.db.models import MemoryRow, MemoryVersionRow
from app.errors import Conflict, NotFound, ValidationFailed
from app.index.writer import replace_index_text
from app.memories.paging import Cursor
from app.memories.patterns import LIKE_ESCAPE, pattern_to_like
from app.memories.schemas import Memory, MemoryWrite, Scope, not_one_line
from app.privacy import sanitize_text
from app.projects import refuse_excluded

if TYPE_CHECKING:
    from app.config import Settings
    from app.memories.reads import ReadRow

log = structlog.get_logger(__name__)

# The index holds a memory's text for search; a huge value is cut here rather than in tsvector.
INDEX_TEXT_LIMIT = 4000
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000
# `If-Match: *` as an expected version: any current version, so only a key that exists. Never a
# real version (those start at 1; 0 means "must not exist yet").
ANY_VERSION = -1
# The versions a list of tags in `If-Match` names, any of which may match (RFC 9110 13.1.1);
# empty when it held only weak tags, which a write's strong comparison never matches.
Expected: TypeAlias = int | frozenset[int]


def _unexpected(expected: Expected | None, version: int) -> bool:
    """True when `version` is not what the write or delete expected."""
    if isinstance(expected, frozenset):
        return version not in expected
    return expected not in (None, ANY_VERSION, version)


def _named(expected: Expected) -> str:
    if not isinstance(expected, frozenset):
        return str(expected)
    if not expected:
        return "a version named by a strong tag (a weak If-Match tag matches none)"
    return "one of " + ", ".join(str(v) for v in sorted(expected))


class MemoryNotFound(NotFound):
    pass


class VersionConflict(Conflict):
    pass


class ScopeTargetMissing(ValidationFailed):
    pass


class InvalidKey(ValidationFailed):
    pass


def check_written_key(key: str) -> None:
    """Refuse a key the privacy rules would change: a value is sanitized, but a key is the
    memory's name, stored, logged, listed, indexed and sent in the resume prompt as written.
    Reads and deletes take any key, so one stored before this check can still be removed.

    Nor may a key hold a control character: it is printed as one line (`agmem memory list`'s
    `key<TAB>scope<TAB>value`, the context block's facts), which a line break in it split;
    U+2028 and U+2029 break a line too. A bidi override or isolate made the key show in
    another order than it is written (an RLO: `project.a\u202egnp.exe` listed as
    `project.aexe.png`)."""
    if (why := not_one_line(key)) is not None:
        raise InvalidKey(f"the key {why}: a key is a name of one line")
    if sanitize_text(key) != key:
        raise InvalidKey(
            "the key holds a <private> span or a secret (an API key, a token, a password); "
            "a key is stored and shown as written, so name the secret and put it in the value, "
            "whose secrets are redacted"
        )


@dataclass(frozen=True, slots=True)
class Visibility:
    """Who is reading: the scope asked for (None = all) and the project/session they name."""

    scope: Scope | None = None
    project_path: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.scope == "project" and not self.project_path:
            raise ScopeTargetMissing("scope 'project' needs projectPath")
        if self.scope == "session" and not self.session_id:
            raise ScopeTargetMissing("scope 'session' needs sessionId")

    def clause(self) -> ColumnElement[bool]:
        """The rows this reader may see."""
        return visible_to(
            self.scope,
            literal(self.project_path) if self.project_path else None,
            literal(self.session_id) if self.session_id else None,
        )

    @property
    def shape(self) -> tuple[Scope | None, bool, bool]:
        return self.scope, bool(self.project_path), bool(self.session_id)

    def describe(self) -> str:
        """Who reads, for a "not visible here" message."""
        return _where_text(self)

    def params(self) -> dict[str, str | None]:
        """Values of the `vis_project`/`vis_session` parameters of a statement built by shape."""
        return {"vis_project": self.project_path or None, "vis_session": self.session_id or None}


def visible_to(
    scope: Scope | None, project: ColumnElement[str] | None, session: ColumnElement[str] | None
) -> ColumnElement[bool]:
    """Visibility for a reader naming `project`/`session` (values or bound parameters).

    Every visible row lives under the empty project or the reader's project, except a session's
    rows read by session id alone. Saying so up front lets the exact-key read use the
    (project_path, key) index with two probes, however many projects the table holds.
    """
    by_scope: dict[Scope, ColumnElement[bool]] = {
        "global": MemoryRow.scope == "global",
        "shared": MemoryRow.scope == "shared",
        "project": MemoryRow.scope == "project" if project is not None else false(),
        "session": (
            and_(MemoryRow.scope == "session", MemoryRow.session_id == session)
            if session is not None
            else false()
        ),
    }
    chosen = by_scope[scope] if scope is not None else or_(*by_scope.values())
    if project is None and session is not None:
        # Session rows of any project, or global and project-less shared rows.
        return and_(chosen, or_(MemoryRow.scope == "session", MemoryRow.project_path == ""))
    projects = [literal(""), *([project] if project is not None else [])]
    return and_(MemoryRow.project_path.in_(projects), chosen)


# Most specific first: a session's value shadows the project's, which shadows shared and global.
SPECIFICITY = case(
    (MemoryRow.scope == "session", 0),
    (MemoryRow.scope == "project", 1),
    (and_(MemoryRow.scope == "shared", MemoryRow.project_path != ""), 2),
    (MemoryRow.scope == "shared", 3),
    else_=4,
)

# Counting makes every read a write. Its commit need not wait for the WAL flush (about 5 ms on
# the test machine): a crash may lose the last few access counts, never a memory.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"

# A memory as reads return it: an ORM row, or a row of the exact-key read (app.memories.reads).
MemoryRecord: TypeAlias = "MemoryRow | ReadRow"

# Rounds of insert-or-lock a write makes while other clients create and delete its key.
WRITE_ATTEMPTS = 8

LIVE = or_(MemoryRow.expires_at.is_(None), MemoryRow.expires_at > func.now())


def identity_of(data: MemoryWrite) -> tuple[str, str]:
    """The (project_path, session_id) a write is stored under, "" meaning none."""
    if data.scope == "global":
        return "", ""
    if data.scope == "project":
        if not data.project_path:
            raise ScopeTargetMissing("scope 'project' needs projectPath (or use scope 'global')")
        return data.project_path, ""
    if data.scope == "session":
        if not data.session_id:
            raise ScopeTargetMissing("scope 'session' needs sessionId")
        return data.project_path or "", data.session_id
    return data.project_path or "", ""


async def write_memory(
    session: AsyncSession,
    *,
    key: str,
    data: MemoryWrite,
    settings: Settings,
    if_version: Expected | None = None,
) -> tuple[MemoryRow, bool]:
    """Create or update a memory; an update keeps the previous value in `memory_versions`.

    A key the privacy rules would change is InvalidKey, a project AGMEM_CAPTURE_EXCLUDE_PROJECTS
    excludes ProjectExcluded (both 422), and nothing is stored.

    `if_version` (optimistic concurrency) must equal the stored version, be 0 for "must not
    exist yet" or ANY_VERSION for "must exist"; otherwise VersionConflict (409) and nothing
    changes. Returns (row, created).
    """
    check_written_key(key)
    project_path, session_id = identity_of(data)
    refuse_excluded(project_path, settings, "its memories", session_id=session_id)
    where = (
        MemoryRow.scope == data.scope,
        MemoryRow.project_path == project_path,
        MemoryRow.session_id == session_id,
        MemoryRow.key == key,
    )
    # An expired memory is gone even if the purge has not reached it yet.
    await session.execute(
        delete(MemoryRow)
        .where(*where, MemoryRow.expires_at <= func.now())
        .execution_options(synchronize_session=False)
    )
    current = await _locked(session, where)
    attempts = 0
    while current is None:
        if if_version == ANY_VERSION:
            raise VersionConflict(f"memory {key!r} does not exist, but If-Match: * requires it")
        if if_version is not None and if_version != 0:
            raise VersionConflict(
                f"memory {key!r} does not exist, but version {_named(if_version)} was expected"
            )
        created_id = await _insert(session, key=key, data=data, identity=(project_path, session_id))
        if created_id is not None:
            row = await _reload(session, created_id)
            await _index(session, row)
            log.info("memory.created", key=key, scope=data.scope, project=project_path)
            return row, True
        # Another writer created it between our SELECT and INSERT: update theirs instead.
        current = await _locked(session, where)
        if current is not None and if_version == 0:
            raise VersionConflict(f"memory {key!r} was created concurrently (version 1)")
        # Gone again (a DELETE committed between our INSERT and SELECT): a write that set no
        # precondition creates it afresh rather than answer 409 (it did, racing deletes).
        attempts += 1
        if current is None and attempts >= WRITE_ATTEMPTS:
            raise VersionConflict(f"memory {key!r} changed concurrently; retry the write")
    if if_version is not None and _unexpected(if_version, current.version):
        raise VersionConflict(
            f"memory {key!r} is at version {current.version}, not {_named(if_version)}; "
            "read it again and retry"
        )
    row = await _update(session, current=current, data=data)
    await _index(session, row)
    log.info("memory.updated", key=key, scope=data.scope, version=row.version)
    return row, False


async def _locked(
    session: AsyncSession, where: tuple[ColumnElement[bool], ...]
) -> MemoryRow | None:
    statement = select(MemoryRow).where(*where).with_for_update()
    result = await session.scalars(statement, execution_options={"populate_existing": True})
    return result.one_or_none()


async def _reload(session: AsyncSession, memory_id: uuid.UUID) -> MemoryRow:
    statement = select(MemoryRow).where(MemoryRow.id == memory_id)
    result = await session.scalars(statement, execution_options={"populate_existing": True})
    return result.one()


def _expiry(ttl: int | None) -> Any:
    return None if ttl is None else func.now() + timedelta(seconds=ttl)


async def _insert(
    session: AsyncSession, *, key: str, data: MemoryWrite, identity: tuple[str, str]
) -> uuid.UUID | None:
    statement = (
        pg_insert(MemoryRow)
        .values(
            scope=data.scope,
            project_path=identity[0],
            session_id=identity[1],
            key=key,
            value=data.value,
            created_by=data.created_by,
            updated_by=data.created_by,
            tags=data.tags or [],
            ttl=data.ttl,
            expires_at=_expiry(data.ttl),
        )
        .on_conflict_do_nothing(index_elements=["scope", "project_path", "session_id", "key"])
        .returning(MemoryRow.id)
    )
    created: uuid.UUID | None = (await session.execute(statement)).scalar_one_or_none()
    return created


_KEEP_VERSION = text(
    "INSERT INTO memory_versions (memory_id, project_path, version, value, written_by, "
    "written_at) SELECT id, project_path, version, value, "
    "coalesce(nullif(updated_by, ''), created_by), "
    "updated_at FROM memories WHERE id = :id"
)


async def _update(session: AsyncSession, *, current: MemoryRow, data: MemoryWrite) -> MemoryRow:
    # Copied in SQL, not from `current.value`: read into Python, a jsonb number such as `1.50`,
    # `1e-400` or a decimal of 1,000 digits became a float, and the history kept that instead.
    await session.execute(_KEEP_VERSION, {"id": current.id})
    given = data.model_fields_set
    ttl = data.ttl if "ttl" in given else current.ttl
    tags = (data.tags or []) if "tags" in given else current.tags
    statement = (
        update(MemoryRow)
        .where(MemoryRow.id == current.id)
        .values(
            value=data.value,
            tags=tags,
            ttl=ttl,
            # A write restarts the TTL: it counts from the last write.
            expires_at=_expiry(ttl),
            updated_by=data.created_by,
            version=MemoryRow.version + 1,
            updated_at=func.now(),
        )
        .returning(MemoryRow)
        .execution_options(synchronize_session=False)
    )
    result = await session.scalars(statement, execution_options={"populate_existing": True})
    return result.one()


def index_text(key: str, value: Any) -> str:
    """The searchable text of a memory: `key: value`, the value as text rather than JSON."""
    text = value if isinstance(value, str) else exactjson.dumps(value, ensure_ascii=False)
    return f"{key}: {text}"[:INDEX_TEXT_LIMIT]


async def _index(session: AsyncSession, row: MemoryRow) -> None:
    # A session's memories are that session's alone, and search and the context block have no
    # reader session to check: indexed under their project, they were served to every caller
    # naming it (and injected into other agents' prompts). They get no index rows.
    texts = [] if row.scope == "session" else [index_text(row.key, row.value)]
    # Of its latest value: what search's time filters compare (a row written later, as a
    # re-index, is still the value of that write).
    await replace_index_text(
        session,
        project_path=row.project_path,
        source="kv",
        texts=texts,
        memory_id=row.id,
        created_at=row.updated_at,
    )


async def purge_expired(session: AsyncSession, *, where: ColumnElement[bool] | None = None) -> int:
    """Delete expired memories (all, or those matching `where`); their index rows cascade."""
    statement = delete(MemoryRow).where(MemoryRow.expires_at <= func.now())
    if where is not None:
        statement = statement.where(where)
    result = await session.execute(statement.execution_options(synchronize_session=False))
    purged = int(getattr(result, "rowcount", 0) or 0)
    if purged:
        log.info("memory.purged", count=purged)
    return purged


async def find_memories(
    session: AsyncSession,
    *,
    visibility: Visibility,
    pattern: str | None = None,
    tags: list[str] | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
    count_access: bool = True,
    after: Cursor | None = None,
) -> list[MemoryRow]:
    """Visible memories matching a `*` pattern and carrying all `tags`, by key (those after
    the cursor `after`: see `find_memory_page`).

    Access is counted unless `count_access` is off (for callers that keep only some of them and
    count those with `count_access_of`)."""
    conditions = _listed(visibility, pattern, tags)
    ids = _in_order(conditions, after).limit(limit).scalar_subquery()
    if count_access:
        rows = await _touch(session, MemoryRow.id.in_(ids), purge=and_(*conditions))
    else:
        await purge_expired(session, where=and_(*conditions))
        result = await session.scalars(select(MemoryRow).where(MemoryRow.id.in_(ids)))
        rows = list(result.all())
    return sorted(rows, key=lambda row: (row.key, _specificity(row), row.id))


@dataclass(frozen=True)
class MemoryPage:
    """A page of a listing; `next_cursor` is where the next one starts (None: none is left)."""

    rows: list[MemoryRow]
    next_cursor: Cursor | None


async def find_memory_page(
    session: AsyncSession,
    *,
    visibility: Visibility,
    pattern: str | None = None,
    tags: list[str] | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
    after: Cursor | None = None,
) -> MemoryPage:
    """`find_memories`, and whether more follow: a listing stopped at `limit` without a word,
    and at most 1000 memories of a project could be read at all."""
    rows = await find_memories(
        session, visibility=visibility, pattern=pattern, tags=tags, limit=limit, after=after
    )
    if len(rows) < limit:
        return MemoryPage(rows, None)
    last = rows[-1]
    position = Cursor(last.key, _specificity(last), last.id)
    beyond = _in_order(_listed(visibility, pattern, tags), position).limit(1)
    more = await session.scalar(select(beyond.exists()))
    return MemoryPage(rows, position if more else None)


def _listed(
    visibility: Visibility, pattern: str | None, tags: list[str] | None
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [visibility.clause()]
    if pattern:
        conditions.append(MemoryRow.key.like(pattern_to_like(pattern), escape=LIKE_ESCAPE))
    if tags:
        conditions.append(MemoryRow.tags.contains(tags))
    return conditions


# Keys in code point order (`C`), as Python sorts a page: under the database's collation the
# rows a page kept and the last one it showed could disagree, and a cursor skip or repeat rows.
_KEY_ORDER = MemoryRow.key.collate("C")


def _in_order(conditions: list[ColumnElement[bool]], after: Cursor | None) -> Select[Any]:
    """The live listed memories' ids in listing order, from just after `after`."""
    chosen = select(MemoryRow.id).where(*conditions, LIVE)
    if after is not None:
        position = tuple_(
            literal(after.key).collate("C"), literal(after.specificity), literal(after.id)
        )
        chosen = chosen.where(tuple_(_KEY_ORDER, SPECIFICITY, MemoryRow.id) > position)
    return chosen.order_by(_KEY_ORDER, SPECIFICITY, MemoryRow.id)


async def count_access_of(session: AsyncSession, *, memory_ids: list[uuid.UUID]) -> None:
    """Count a read of these memories (accessedAt, accessCount)."""
    if memory_ids:
        await _touch(session, MemoryRow.id.in_(memory_ids))


def _specificity(row: MemoryRow) -> int:
    order = {"session": 0, "project": 1, "shared": 2 if row.project_path else 3}
    return order.get(row.scope, 4)


async def _touch(
    session: AsyncSession, where: ColumnElement[bool], *, purge: ColumnElement[bool] | None = None
) -> list[MemoryRow]:
    """Count a read: bump accessedAt and accessCount of the rows read, returning them.

    With `purge`, the expired memories matching it are deleted by the same statement (a
    data-modifying CTE), so a read stays one round trip. Its snapshot predates the delete, which
    is why readers filter on LIVE as well.
    """
    await session.execute(text(ASYNC_COMMIT))
    statement = (
        update(MemoryRow)
        .where(where)
        .values(accessed_at=func.now(), access_count=MemoryRow.access_count + 1)
        .returning(MemoryRow)
        .execution_options(synchronize_session=False)
    )
    if purge is not None:
        purged = (
            delete(MemoryRow)
            .where(MemoryRow.expires_at <= func.now(), purge)
            .returning(MemoryRow.id)
            .cte("purged")
        )
        statement = statement.add_cte(purged)
    result = await session.scalars(statement, execution_options={"populate_existing": True})
    return list(result.all())


async def delete_memory(
    session: AsyncSession,
    *,
    key: str,
    visibility: Visibility,
    if_version: Expected | None = None,
) -> bool:
    """Delete the memory a read of `key` would return (the most specific live visible one).

    With `if_version`, only if that memory is at this version (any, for ANY_VERSION: `{deleted:
    false}` when there is none, as for any version); otherwise VersionConflict (409)
    and nothing changes, as for a write: an agent deleting what it read must not delete the value
    another agent wrote since (its history goes with it)."""
    visible = and_(MemoryRow.key == key, visibility.clause())
    pick = select(MemoryRow.id).where(visible, LIVE).order_by(SPECIFICITY).limit(1)
    target: Any = pick.scalar_subquery()
    if if_version is not None:
        found = (
            await session.execute(pick.add_columns(MemoryRow.version).with_for_update())
        ).first()
        if found is None:
            return False
        if _unexpected(if_version, found.version):
            raise VersionConflict(
                f"memory {key!r} is at version {found.version}, not {_named(if_version)}; "
                "read it again and retry"
            )
        target = found.id  # locked above: the row checked is the row deleted
    result = await session.execute(
        delete(MemoryRow)
        .where(MemoryRow.id == target)
        .returning(MemoryRow.id)
        .execution_options(synchronize_session=False)
    )
    deleted = result.scalar_one_or_none()
    if deleted is None:
        return False
    log.info("memory.deleted", key=key, memory_id=str(deleted))
    return True


async def memory_history(session: AsyncSession, *, memory_id: uuid.UUID) -> list[MemoryVersionRow]:
    """Every earlier value of a memory, newest first."""
    statement = (
        select(MemoryVersionRow)
        .where(MemoryVersionRow.memory_id == memory_id)
        .order_by(MemoryVersionRow.version.desc())
    )
    return list((await session.scalars(statement)).all())


def to_schema(row: MemoryRecord) -> Memory:
    return Memory(
        id=row.id,
        key=row.key,
        value=row.value,
        scope=cast(Scope, row.scope),
        project_path=row.project_path or None,
        session_id=row.session_id or None,
        created_by=row.created_by,
        updated_by=row.updated_by,
        tags=list(row.tags),
        ttl=row.ttl,
        expires_at=row.expires_at,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        accessed_at=row.accessed_at,
        access_count=row.access_count,
    )


def _where_text(visibility: Visibility) -> str:
    parts = [
        f"{name} {value!r}"
        for name, value in (
            ("scope", visibility.scope),
            ("projectPath", visibility.project_path),
            ("sessionId", visibility.session_id),
        )
        if value
    ]
    return (
        f" ({', '.join(parts)})"
        if parts
        else " (only global and shared memories without projectPath)"
    )
