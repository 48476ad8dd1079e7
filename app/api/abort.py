"""Cutting an answer short: the connection closed without the answer's end, so that the client
reads an incomplete transfer (curl's exit 18, httpx's `RemoteProtocolError`), never a cut
answer that looks whole.

ASGI has no message for it. Its way is an app that returns before its answer's end (or raises):
uvicorn then closes the connection, but logs the app as broken (`ASGI callable returned without
completing response.`, or the exception's traceback). `agmem serve`'s protocol (app/cli/wire.py)
offers the cut in each request's scope, as the extension named ABORT_EXTENSION (a dict, as ASGI
has them): its `abort`, a callable taking the scope, closes the connection after what was written
and takes the answer for ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import Scope

ABORT_EXTENSION = "agmem.abort"
Abort = Callable[[Scope], None]


def abort_answer(scope: Scope) -> None:
    """Close the answer in progress without its end, through the server's extension when it has
    one; otherwise the caller's return (the answer not ended) has the server close it."""
    extensions: dict[str, dict[str, Any]] = scope.get("extensions") or {}
    abort: Abort | None = extensions.get(ABORT_EXTENSION, {}).get("abort")
    if abort is not None:
        abort(scope)
