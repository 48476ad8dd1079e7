"""memory_chunks.search_terms: an identifier's parts keep their combining marks

`app.index.terms.search_terms` split a token's parts at every character that is not a letter or
a digit, combining marks and zero-width joiners included, while Postgres's parser and the keyword
query keep them in their word: `getCafé` (a decomposed é) stored `get Cafe`, which the query
`café` did not find, and a Devanagari word with a vowel sign inside stored its bare letters,
which other words matched. The stored terms of the rows holding such a character are made again:

- an indexed file's chunks: the file's `rules` is set NULL, so the next sync reads it again, as
  it reads a file indexed before `rules` was recorded, and rewrites the rows whose terms come out
  otherwise (`ChunkWriter._keep_unchanged` compares them; the others stay as they are). Their
  terms also hold the titles of the chunk's sections, which only the file has;
- the other rows (memories, observations, session summaries, which no sync reads again): their
  terms are made here from their content, with the app's `search_terms`, not a frozen copy: what
  these rows must hold is what the app writes, and a later change of it comes with its own
  revision.

Rows whose content and terms are ASCII alone are not read (no mark, no joiner); a file
chunk's ASCII content under a marked section title is (its terms hold the title). The downgrade keeps the new terms:
the old code reads them as it reads its own.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.index.terms import search_terms

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH_ROWS = 2000
_NON_ASCII = (
    "SELECT id, file_id, content, search_terms FROM memory_chunks "
    "WHERE id > :after AND (content ~ '[^\\x01-\\x7f]' OR search_terms ~ '[^\\x01-\\x7f]') "
    "ORDER BY id LIMIT :limit"
)
_JOINERS = frozenset("\u200c\u200d")


def _holds_mark(text: str) -> bool:
    return any(char in _JOINERS or unicodedata.category(char)[0] == "M" for char in text)


def upgrade() -> None:
    bind = op.get_bind()
    after = 0
    files: set[int] = set()
    while rows := bind.execute(sa.text(_NON_ASCII), {"after": after, "limit": BATCH_ROWS}).all():
        after = rows[-1].id
        changed = []
        for row in rows:
            # A file chunk's terms also hold its sections' titles: ASCII code under a Hindi
            # heading had the heading's letters split off in its terms alone.
            if not (_holds_mark(row.content) or _holds_mark(row.search_terms or "")):
                continue
            if row.file_id is not None:
                files.add(row.file_id)
            elif (terms := search_terms(row.content)) != (row.search_terms or ""):
                changed.append({"id": row.id, "terms": terms})
        if changed:
            bind.execute(
                sa.text("UPDATE memory_chunks SET search_terms = :terms WHERE id = :id"), changed
            )
    if files:
        bind.execute(
            sa.text("UPDATE memory_files SET rules = NULL WHERE id = ANY(:ids)"),
            {"ids": sorted(files)},
        )


def downgrade() -> None:
    pass
