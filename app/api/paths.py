"""`{name:any}`: a path parameter like Starlette's `path` that also matches newlines.

Starlette's `path` convertor is `.*`, and `.` stops at a newline, so an id that holds one (a
session id or an observation id a client chose, a memory key) made its own URL a bare 404: the
session existed, but `GET /api/sessions/a%0Ab` matched no route. Route modules import this before
declaring their paths, since Starlette compiles a route's pattern when it is declared.
"""

from __future__ import annotations

from starlette.convertors import CONVERTOR_TYPES, Convertor, register_url_convertor

ANY = "any"


class AnyTextConvertor(Convertor[str]):
    """Any text, slashes and newlines included (the `s` flag is scoped to this group)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


if ANY not in CONVERTOR_TYPES:
    register_url_convertor(ANY, AnyTextConvertor())
