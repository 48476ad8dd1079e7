"""Length bounds of the client values Postgres keeps in a btree index, checked before it sees them.

A btree index row holds at most 2704 bytes, and a longer value was refused by Postgres itself, in
its words: `index row size 2712 exceeds btree version 4 maximum 2704 for index "ix_..."` (a 422
that named an index, not the field; `app.api.errors.refused_value` still words any such refusal a
bound here misses). The bounds are in UTF-8 bytes, what the limit counts, and keep every
combination within it: the memories' unique index holds a project path, a session id (200
characters, up to 800 bytes) and a key together, and the largest of each, in characters that do
not compress, fit in one row (tests/api/test_index_bounds.py). A real client never comes near
them: a project folder's path is rarely over 200 bytes, and keys and tags are short names.

Not bounded here: the path of a file a sync finds on disk, which is no client field. It shares a
unique index with its project's path, and only Postgres's own limit applies to the two together
(Postgres compresses a long value first): a sync skips a file it refuses, and says so.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, StringConstraints

from app.projects import canonical_project

# Project paths are the key of every table: sessions, observations, memories, sync runs, chunks.
PROJECT_PATH_MAX_BYTES = 1024
# Any path a client sends, before it is folded to its key.
PATH_MAX_CHARS = 4096
# A memory key (in URLs, at most 500 characters) beside a project path and a session id.
KEY_MAX_BYTES = 800
# A tag is a GIN index entry of its own (Postgres's limit there is about the same).
TAG_MAX_CHARS = 200


def utf8_size(text: str) -> int:
    """How many bytes `text` takes in UTF-8; an ASCII text is not encoded to know."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_utf8_size(text: str, max_bytes: int) -> str:
    """`text` if it takes at most `max_bytes` in UTF-8; else a ValueError saying by how much."""
    # Characters are never fewer than bytes: a longer text is over without encoding it.
    if len(text) > max_bytes or utf8_size(text) > max_bytes:
        raise ValueError(
            f"String should have at most {max_bytes} bytes in UTF-8, not {utf8_size(text)} "
            "(the database indexes it)"
        )
    return text


def stored_project_path(text: str) -> str:
    """The project key a path is stored under (canonical: app/projects.py), if it fits the
    bound; else a ValueError saying by how much.

    Checked on the key, not on the text as sent: NFC can make a path longer (U+0958, 3 bytes,
    becomes two characters of 6) and `/p/./././...` is far shorter stored than sent. Each route
    still cleans it (a NUL is removed, as the key's is), which can only make it shorter."""
    return check_utf8_size(canonical_project(text), PROJECT_PATH_MAX_BYTES)


def storable_spelling(text: str) -> str:
    """`text` as sent (but for NULs, which no folder name holds: removed, as from its key), if
    the key it is stored under fits the bound: a folder the service reads (`POST /api/sync`),
    opened as the client spells it (a macOS name is NFD, a key NFC)."""
    stored_project_path(text)
    return text.replace("\x00", "")


# A project path a request stores, as its key. `max_length` refuses a text no path is before any
# work on it (the bound on every path field); the stored key's bytes are checked after.
StoredProjectPath = Annotated[
    str, StringConstraints(max_length=PATH_MAX_CHARS), AfterValidator(stored_project_path)
]
# A project folder the service reads, kept as sent; its key is taken when it is stored.
SpelledProjectPath = Annotated[
    str, StringConstraints(max_length=PATH_MAX_CHARS), AfterValidator(storable_spelling)
]
