"""The cursor of a memory listing: where the next page starts, as an opaque token.

A listing is ordered by key (code point order, as Python sorts the page), then by specificity
(session, project, the project's shared, shared, global), then by id: one key may be listed in
several scopes, and a page may end between them. The cursor holds that position, not a row to
look up, so the next page starts right after it even when the memory it names was deleted or
expired in between (sessions' `beforeId` names a session, which a listing must find again).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass

from app.errors import ValidationFailed

# The specificity ranks `service.SPECIFICITY` gives (0: session … 4: global).
_RANKS = range(5)


@dataclass(frozen=True)
class Cursor:
    """The position of the last memory of a page: the next page lists what sorts after it."""

    key: str
    specificity: int
    id: uuid.UUID

    def encode(self) -> str:
        """URL-safe base64 of `[key, specificity, id]`, without padding."""
        raw = json.dumps([self.key, self.specificity, str(self.id)], ensure_ascii=False)
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """The cursor a page answered as `nextCursor`; ValidationFailed (422) for other text."""
        refused = ValidationFailed(f"cursor: {token[:40]!r} is not a nextCursor a listing answered")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            key, specificity, memory_id = json.loads(raw.decode())
            # `type(...) is int`: JSON's `true` is a Python int, which Postgres then refused to
            # compare with a rank (a 500).
            if not (isinstance(key, str) and type(specificity) is int):
                raise refused
            key.encode()  # a lone surrogate (`"\ud800"`) reached the database's encoder: a 500
            if specificity not in _RANKS or not isinstance(memory_id, str):
                raise refused
            return cls(key, specificity, uuid.UUID(memory_id))
        # RecursionError: thousands of nested brackets decoded (a 500 as well).
        except (binascii.Error, ValueError, TypeError, RecursionError):
            raise refused from None
