"""memory_chunks.created_at: when the row's text happened, not when it was indexed

Search's `since` and `until` compare `created_at`, which held the time a row was written: an
observation's when the worker compressed it (an observation sent two hours late was found by
`since: 1h ago`), a file's chunk when a sync read the file. Each source now writes the time of
what it holds (docs/search.md, "Time filters"); this revision sets that time on stored rows:

- an observation's row: the observation's `observed_at`;
- a session summary's: the session's end (`ended_at`, else its `last_activity_at`);
- a key/value memory's: the memory's `updated_at`;
- a memory file's chunk: the file's recorded mtime;
- a transcript's chunk: its first message's time, which only the file holds: the file's `rules`
  is set NULL, so the next sync reads it again (as 0012 does) and writes again each chunk whose
  stored time is not its message's (`ChunkWriter._keep_unchanged`); the rows keep the old time
  until then.

A row within a second of its time is left alone: an observation indexed moments after it was
seen, a memory indexed in the transaction that wrote it, need no new row version. Each row that
changes is rewritten (not a HOT update: chunk rows fill their page), with an entry in each of the
table's indexes, HNSW included: on a big table this is one pass over `memory_chunks` at about
the cost of writing each changed row again. The downgrade keeps the times: the old code reads
them as it reads its own.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FAR = "abs(extract(epoch FROM c.created_at - t.at)) >= 1"

_SET_TIMES = (
    "UPDATE memory_chunks AS c SET created_at = t.at "
    "FROM (SELECT id, observed_at AS at FROM observations) AS t "
    f"WHERE c.source = 'observation' AND c.observation_id = t.id AND {_FAR}",
    "UPDATE memory_chunks AS c SET created_at = t.at "
    "FROM (SELECT id, coalesce(ended_at, last_activity_at) AS at FROM sessions) AS t "
    f"WHERE c.source = 'summary' AND c.session_id = t.id AND {_FAR}",
    "UPDATE memory_chunks AS c SET created_at = t.at "
    "FROM (SELECT id, updated_at AS at FROM memories) AS t "
    f"WHERE c.source = 'kv' AND c.memory_id = t.id AND {_FAR}",
    "UPDATE memory_chunks AS c SET created_at = t.at "
    "FROM (SELECT id, to_timestamp(mtime) AS at FROM memory_files WHERE source = 'memory') AS t "
    f"WHERE c.source = 'memory' AND c.file_id = t.id AND {_FAR}",
    "UPDATE memory_files SET rules = NULL WHERE source = 'sessions'",
)


def upgrade() -> None:
    for statement in _SET_TIMES:
        op.execute(sa.text(statement))


def downgrade() -> None:
    pass
