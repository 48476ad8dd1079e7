"""memories.key: stored NFC, as keys are now written and read

A key was stored as sent, so `project.café` typed (NFC) and sent by a macOS tool (NFD) were two
memories that look the same. Keys are now made NFC on every write and read
(`app.memories.schemas.check_key`); this revision brings the stored ones to that form:

- a key not in NFC is renamed to its NFC form when no memory of the same scope, project and
  session holds that form (of several such spellings of one key, the one updated last);
- every other spelling keeps its value under `<NFC key> (duplicate spelling)`, then
  `(duplicate spelling 2)`, `3`, ... by its last write (a name already taken is skipped), so
  each value stays readable and can be deleted by its key: a key is read NFC, so one left in
  another form could not be reached, and deleting it would delete its NFC twin instead. When
  such a name would pass the key's bounds (500 characters, 800 bytes), the NFC stem is cut
  short to make room for the suffix.

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

_SPELLINGS = """
SELECT id, scope, project_path, session_id, normalize(key, NFC)
FROM memories WHERE key IS NOT NFC NORMALIZED
ORDER BY updated_at DESC, id
"""
# Keys a new name must not take: the NFC ones (a new name is NFC, so never one of the others).
_TAKEN = "SELECT scope, project_path, session_id, key FROM memories WHERE key IS NFC NORMALIZED"
_RENAME = "UPDATE memories SET key = :key WHERE id = :id"

Place = tuple[str, str, str]


def _duplicate_name(stem: str, number: int) -> str:
    """`stem` with the suffix of its `number`-th extra spelling, the stem cut short (by whole
    characters; a prefix of an NFC key is NFC) when the name would pass the bounds."""
    suffix = DUPLICATE_SUFFIX if number == 1 else f" (duplicate spelling {number})"
    stem = stem[: MAX_KEY_LENGTH - len(suffix)]
    while len((stem + suffix).encode()) > KEY_MAX_BYTES:
        stem = stem[:-1]
    return stem + suffix


def upgrade() -> None:
    connection = op.get_bind()
    taken: dict[Place, set[str]] = {}
    for scope, project_path, session_id, key in connection.execute(sa.text(_TAKEN)):
        taken.setdefault((scope, project_path, session_id), set()).add(key)
    extra_spellings: dict[tuple[Place, str], int] = {}
    for memory_id, scope, project_path, session_id, nfc in connection.execute(
        sa.text(_SPELLINGS)
    ).all():
        place: Place = (scope, project_path, session_id)
        keys = taken.setdefault(place, set())
        name = nfc
        number = extra_spellings.get((place, nfc), 0)
        while name in keys:
            number += 1
            name = _duplicate_name(nfc, number)
        extra_spellings[(place, nfc)] = number
        keys.add(name)
        connection.execute(sa.text(_RENAME), {"key": name, "id": memory_id})


def downgrade() -> None:
    pass
