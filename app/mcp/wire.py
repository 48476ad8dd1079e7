"""What both transports do to a message before the SDK's JSON parser reads it."""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Any

from app import exactjson
from app.privacy import lone_surrogates_replaced_everywhere

# The message being served as its transport read it (after `surrogates_cleaned`): set by the
# transport's reader, it reaches the tool through the context the SDK runs each call in (the
# sender's). The SDK makes floats of a call's numbers; the tool reads them again from this.
MESSAGE_TEXT: ContextVar[bytes | str | None] = ContextVar("mcp_message_text", default=None)

# A JSON escape of a UTF-16 surrogate, which only a message holding one (lone or in a pair) has.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def surrogates_cleaned(message: bytes) -> bytes:
    """`message` (JSON) with its lone surrogate escapes replaced by U+FFFD, as the HTTP API
    cleans them (docs/capture.md, "Text in ids and names"): the SDK's JSON parser refused the
    whole message. One without such an escape is given back as it came; one that `json` cannot
    read either is left to the SDK's error."""
    if not _SURROGATE_ESCAPE.search(message):
        return message
    try:
        # Numbers kept as written (`json` made 0.0 of `1e-400` in such a message).
        value = exactjson.loads(message)
        # Nested deeper than the cleaning's recursion reaches (json.loads takes ~950 levels):
        # the RecursionError ended the stdio reader (no later call answered, end of input
        # ignored) and was a 500 over /mcp.
        cleaned = lone_surrogates_replaced_everywhere(value)
        return exactjson.dumps(cleaned, ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        return message


def exact_arguments(text: bytes | str | None, request_id: Any, tool: str) -> dict[str, Any] | None:
    """The arguments of the `tools/call` of `tool` with id `request_id` in the JSON-RPC message
    `text`, read with `exactjson` (`1e-400` and `1.50` as written), or None when `text` holds
    no such call (or is not JSON `exactjson` reads)."""
    if text is None:
        return None
    try:
        message = exactjson.loads(text)
    except (ValueError, RecursionError):
        return None
    # One message per call: the SDK refuses a batch (a JSON array) before any tool runs.
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    found = message.get("id")
    # 1 and "1" are two ids (JSON-RPC), and True is no 1.
    if type(found) is not type(request_id) or found != request_id:
        return None
    params = message.get("params")
    if not isinstance(params, dict) or params.get("name") != tool:
        return None
    arguments = params.get("arguments")
    return arguments if isinstance(arguments, dict) else None
