"""What both transports do to a message before the SDK's JSON parser reads it."""

from __future__ import annotations

import json
import re

from app.privacy import lone_surrogates_replaced_everywhere

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
        value = json.loads(message)
        # Nested deeper than the cleaning's recursion reaches (json.loads takes ~950 levels):
        # the RecursionError ended the stdio reader (no later call answered, end of input
        # ignored) and was a 500 over /mcp.
        return json.dumps(lone_surrogates_replaced_everywhere(value), ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        return message
