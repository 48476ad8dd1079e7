"""memories.key: stored NFC, as keys are now written and read

A key was stored as sent, so `project.café` typed (NFC) and sent by a macOS tool (NFD) were two
memories that look the same. Keys are now made NFC on every write and read
(`app.memories.schemas.check_key`); this revision brings the stored ones to that form:

- a key not in NFC is renamed to its NFC form when no memory of the same scope, project and
  session holds that form (of several such spellings of one key, the one updated last);
- one that has such an NFC twin keeps its value under `<NFC key> (duplicate spelling)`, so
  both values stay readable and either can be deleted by its key (read by its old spelling, it
  would now find the twin); when that name is taken too, or over the key's bounds (500
  characters, 800 bytes), it is left as it was.

The index rows of renamed memories (`memory_chunks`, source `kv`) keep their text: search
finds a word in either spelling, and a citation reads the key from the memory. The downgrade
leaves keys as they are: NFC keys are valid keys before this revision too.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DUPLICATE_SUFFIX = " (duplicate spelling)"
# The key's bounds as they are at this revision (app.memories.schemas.MAX_KEY_LENGTH,
# app.api.limits.KEY_MAX_BYTES): a longer name could not be read or deleted by its key.
MAX_KEY_LENGTH = 500
KEY_MAX_BYTES = 800

# The same memory's place: scope, project and session (its unique constraint, with the key).
_SAME_PLACE = (
    "t.scope = m.scope AND t.project_path = m.project_path AND t.session_id = m.session_id"
)


def _rename(new_key: str, condition: str = "true") -> str:
    """Rename each memory whose key is not NFC to `new_key` (SQL over `key`), when `condition`
    holds and no memory in its place has that key: of several spellings of one NFC key, only
    the one updated last."""
    return f"""
WITH ranked AS (
    SELECT id, {new_key} AS renamed, row_number() OVER (
        PARTITION BY scope, project_path, session_id, normalize(key, NFC)
        ORDER BY updated_at DESC, id
    ) AS rank
    FROM memories WHERE key IS NOT NFC NORMALIZED
)
UPDATE memories m SET key = ranked.renamed
FROM ranked
WHERE m.id = ranked.id AND ranked.rank = 1 AND {condition}
  AND NOT EXISTS (SELECT 1 FROM memories t WHERE {_SAME_PLACE} AND t.key = ranked.renamed)
"""


def upgrade() -> None:
    op.execute(sa.text(_rename("normalize(key, NFC)")))
    # Those left have an NFC twin: their value is kept under a name of its own.
    bounded = "char_length(ranked.renamed) <= :chars AND octet_length(ranked.renamed) <= :bytes"
    twin = sa.text(_rename("normalize(key, NFC) || :suffix", bounded))
    op.execute(twin.bindparams(suffix=DUPLICATE_SUFFIX, chars=MAX_KEY_LENGTH, bytes=KEY_MAX_BYTES))


def downgrade() -> None:
    pass
