"""Text Postgres can store: no NUL, no lone surrogate."""

from __future__ import annotations

import re
from typing import Any

# A Python str decoded from JSON holds valid pairs as one code point, so any surrogate left in it
# is a lone one, which UTF-8 (and therefore Postgres) cannot store.
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(s: str) -> str:
    """Remove NUL characters and replace lone surrogates with U+FFFD."""
    if "\x00" in s:
        s = s.replace("\x00", "")
    return _without_surrogates(s)


def _without_surrogates(s: str) -> str:
    if not s.isascii():
        # Encoding is a C loop that fails only on a surrogate; far cheaper than a regex scan.
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = _SURROGATE.sub("\ufffd", s)
    return s


def surrogates_replaced(data: Any) -> Any:
    """A JSON object as parsed, its strings and its arrays' strings with each lone surrogate
    replaced by U+FFFD, as `clean_text` replaces them; anything else as it is.

    For request bodies before validation: pydantic refuses a string holding a lone surrogate
    where a field has a length bound ("Input should be a valid string"), so a JSON `"\\ud800"`
    in an id or a path was a 422 where the same escape in stored text is cleaned. NUL characters
    are left to each field's own rule. Nested values (tool arguments, memory values) are
    sanitized whole by their owners."""
    if not isinstance(data, dict):
        return data
    return {name: _strings_replaced(value) for name, value in data.items()}


def lone_surrogates_replaced_everywhere(value: Any) -> Any:
    """A parsed JSON value with every lone surrogate replaced by U+FFFD, in keys and strings at
    any depth (`surrogates_replaced` does a body's own fields only)."""
    if isinstance(value, str):
        return _without_surrogates(value)
    if isinstance(value, list):
        return [lone_surrogates_replaced_everywhere(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_surrogates(key): lone_surrogates_replaced_everywhere(item)
            for key, item in value.items()
        }
    return value


def _strings_replaced(value: Any) -> Any:
    if isinstance(value, str):
        return _without_surrogates(value)
    if isinstance(value, list):
        return [_without_surrogates(item) if isinstance(item, str) else item for item in value]
    return value
