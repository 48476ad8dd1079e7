"""An incremental Server-Sent Events reader for the relayed stream.

The proxy relays every byte as it arrives; a copy goes through this reader, which yields each
complete event's data once its terminating blank line has been seen, however the network split it.
"""

from __future__ import annotations

import json
import re
from typing import Any

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE_END = re.compile(rb"\r\n|\n|\r")


class SseReader:
    """Feed raw bytes; get back the decoded JSON payloads of the events completed so far."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self.malformed = 0

    def feed(self, chunk: bytes) -> list[Any]:
        self._pending += chunk
        payloads: list[Any] = []
        start = 0
        for match in _EVENT_END.finditer(self._pending):
            # A lone "\r" at the end may be the first half of "\r\n"; wait for the next chunk.
            if match.group() == b"\r\r" and match.end() == len(self._pending):
                break
            self._take(bytes(self._pending[start : match.start()]), payloads)
            start = match.end()
        del self._pending[:start]
        return payloads

    def close(self) -> list[Any]:
        """Whatever complete event the stream ended with, even without its final blank line."""
        payloads: list[Any] = []
        if self._pending.strip():
            self._take(bytes(self._pending), payloads)
        self._pending.clear()
        return payloads

    def _take(self, event: bytes, payloads: list[Any]) -> None:
        data = [
            line[5:].removeprefix(b" ")
            for line in _LINE_END.split(event)
            if line.startswith(b"data:")
        ]
        if not data:
            return
        try:
            payloads.append(json.loads(b"\n".join(data)))
        except ValueError:
            self.malformed += 1


class EventHolder:
    """Holds back an SSE stream's unfinished event: what `take` returns ends with whole events
    (the relay sends an event's start only with its end)."""

    def __init__(self) -> None:
        self.held = bytearray()

    def take(self, chunk: bytes) -> bytes:
        # The held bytes were scanned already and hold no whole separator, so one can only
        # start in their last 3 bytes ("\r\n\r\n" split after its first byte). Rescanning from
        # byte 0 on every read was quadratic: one 10 MB event in 16 KiB reads took 58 s of the
        # event loop.
        unscanned = max(0, len(self.held) - 3)
        self.held += chunk
        end = events_end(self.held, unscanned)
        ready = bytes(self.held[:end])
        del self.held[:end]
        return ready


def events_end(data: bytes | bytearray, start: int = 0) -> int:
    """Where the last whole event in `data` ends (0 for none), as `SseReader` reads them; no
    separator is looked for before `start`."""
    end = 0
    for match in _EVENT_END.finditer(data, start):
        if match.group() == b"\r\r" and match.end() == len(data):
            break  # maybe the first half of "\r\n": the next chunk says
        end = match.end()
    return end


def parse_json_array_stream(body: bytes) -> list[Any] | None:
    """`streamGenerateContent` without `alt=sse` answers one JSON array of responses (and
    `generateContent` one response); None when the body is not JSON."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if isinstance(parsed, list):
        return parsed
    return [parsed]
