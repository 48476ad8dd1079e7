"""A proxied request's body: parsed once, and our memory block put in by splicing its bytes.

A 7.6 MB request held the event loop, and every other request, for up to 290 ms: it was parsed
twice (`json.loads` for the prompt and capture, `exactjson.loads` to inject with its numbers
exact) and encoded again whole, though injection edits only the system instruction. Here the
top-level members are parsed one by one, which gives each value's place in the text, and an
injected body is the caller's text with the system instruction's value replaced (or added
first): the conversation goes upstream as sent, byte for byte, its numbers exact, and only the
system instruction is parsed again (exactly) and encoded.

A body this cannot read so (not UTF-8, not an object, a key given twice) is read as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app import exactjson
from app.proxy.inject import inject_memory, system_key

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class RequestBody:
    """The parsed body, and where each top-level value sits in `text` (None: not spliceable)."""

    parsed: dict[str, Any]
    text: str | None = None
    opening: int = 0  # the index just past the object's `{`
    spans: dict[str, tuple[int, int]] | None = None


def parse_body(raw: bytes) -> RequestBody | None:
    """The request as JSON, or None: what we cannot read goes upstream as is, for it to judge."""
    try:
        text = raw.decode("utf-8")
        spliceable = _members(text)
    except (ValueError, RecursionError):
        spliceable = None
    if spliceable is not None:
        return spliceable
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return RequestBody(body) if isinstance(body, dict) else None


def _members(text: str) -> RequestBody | None:
    """`text` parsed as `json.loads` parses it, each top-level value's span noted; None if it
    is no object or repeats a key (`json.loads` keeps the last; a splice would keep both).
    Raises ValueError (or RecursionError) for text that is not JSON."""
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        return None
    opening = at + 1
    at = _skip_space(text, opening)
    parsed: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    if not text.startswith("}", at):
        while True:
            if not text.startswith('"', at):
                raise ValueError("expected a key")
            key, at = _DECODER.raw_decode(text, at)
            at = _skip_space(text, at)
            if not text.startswith(":", at):
                raise ValueError("expected ':'")
            start = _skip_space(text, at + 1)
            value, at = _DECODER.raw_decode(text, start)
            if key in parsed:
                return None
            parsed[key], spans[key] = value, (start, at)
            at = _skip_space(text, at)
            if text.startswith(",", at):
                at = _skip_space(text, at + 1)
                continue
            if not text.startswith("}", at):
                raise ValueError("expected ',' or '}'")
            break
    if _skip_space(text, at + 1) != len(text):
        raise ValueError("extra data")
    return RequestBody(parsed, text, opening, spans)


def _skip_space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


def injected(body: RequestBody, raw: bytes, block: str) -> bytes:
    """The body to forward with `block` as its memory block (and no older one)."""
    key = system_key(body.parsed)
    if body.text is None or body.spans is None:
        return _encode(inject_memory(exactjson.loads(raw), block))
    span = body.spans.get(key)
    # Parsed again with its numbers exact (app/exactjson.py): re-encoded from `parsed`, the
    # caller's `1.50` went upstream as 1.5, `1e-400` as 0.0 and `1e400` as `Infinity`.
    system = {} if span is None else {key: exactjson.loads(body.text[span[0] : span[1]])}
    updated = inject_memory(system, block)
    if key not in updated:  # the system instruction held only an older block: it goes
        return _encode(inject_memory(exactjson.loads(raw), block))
    value = _encode(updated[key]).decode("utf-8")
    text = body.text
    if span is None:
        rest = "," if body.spans else ""
        spliced = f"{text[: body.opening]}{json.dumps(key)}:{value}{rest}{text[body.opening :]}"
    else:
        spliced = text[: span[0]] + value + text[span[1] :]
    return spliced.encode("utf-8")


def _encode(value: Any) -> bytes:
    try:
        return exactjson.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # A lone surrogate the caller sent as an escape: send it back escaped, as it came.
        return exactjson.dumps(value).encode()
