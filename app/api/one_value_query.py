"""One value per query parameter: a one-value name sent twice with two values is a 422.

A raw ASGI middleware, as the others (app/api/middleware.py), that reads the query string by one
regex before routing, so that every `/api/` route is covered and none parses the query for it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.middleware import send_app_error
from app.errors import ValidationFailed

# The one-value query parameters the API's routes read (the project and session spellings
# are compared by what they mean, by their own dependency, `app.api.spellings.one_value`, and
# `tags` takes several). A name no route reads is ignored, repeated or not, as it is once.
# tests/api/test_both_spellings.py holds this set to the names the routes declare.
ONE_VALUE_QUERY_NAMES = frozenset(
    {
        "scope",
        "pattern",
        "limit",
        "cursor",
        "history",
        "status",
        "before",
        "prompt",
        "budget",
        "format",
    }
)


def _as_sent(name: str) -> bytes:
    """A pattern for `name` in a query as a client may send it: each letter itself or escaped."""
    return b"".join(
        b"(?:%s|%%%X[%s])"
        % (letter.encode(), ord(letter) >> 4, b"%x%X" % ((ord(letter) & 15,) * 2))
        for letter in name
    )


# A piece of a query (`&` before it, its value up to the next `&`) that names one of those.
# The regex engine finds them in one pass and skips every other name without a Python step: the
# whole query was parsed before, by every /api/ route (22-50 ms in process, hostile 127 KiB).
_ONE_VALUE_PIECE = re.compile(
    rb"&(?=[%"
    + bytes(sorted({ord(name[0]) for name in ONE_VALUE_QUERY_NAMES}))
    + rb"])("
    + b"|".join(_as_sent(name) for name in sorted(ONE_VALUE_QUERY_NAMES))
    + rb")"
    rb"(?:=([^&]*))?(?=&|$)"
)


def _query_text(raw: bytes) -> bytes:
    """`raw` (a name or value of a query) as the routes read it: `+` a space, escapes decoded."""
    return unquote_to_bytes(raw.replace(b"+", b" ")) if b"%" in raw or b"+" in raw else raw


def repeated_query_name(raw: bytes) -> str | None:
    """The first one-value name `raw` (a query string) gives two different values."""
    if b"&" not in raw:
        return None
    first: dict[bytes, tuple[bytes, bytes]] = {}
    # Each (name, value) pair once, in the query's order: a value repeated costs nothing more.
    for sent_name, value in dict.fromkeys(_ONE_VALUE_PIECE.findall(b"&" + raw)):
        name = _query_text(sent_name)
        if name not in first:
            first[name] = (value, _query_text(value))
        elif first[name][0] != value and first[name][1] != _query_text(value):
            return name.decode()
    return None


class OneValuePerQueryNameMiddleware:
    """Refuse an `/api/` query that gives a one-value parameter two different values (422).

    FastAPI keeps the last one: `DELETE /api/memories/k?scope=global&scope=project` deleted the
    project's memory though the client named the global one first, and `?budget=60&budget=3000`
    built a block of 3,000 tokens. The same value repeated passes, and one spelt apart that
    decodes alike. Only the names in `ONE_VALUE_QUERY_NAMES` are checked.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/api/"):
            name = repeated_query_name(scope.get("query_string", b""))
            if name is not None:
                detail = f"query: '{name}' was sent more than once with different values; send one"
                await send_app_error(send, ValidationFailed(detail))
                return
        await self.app(scope, receive, send)
