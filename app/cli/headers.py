"""The bounds `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py) puts on a request's headers,
a chunked body's trailers counted with them.

httptools bounds neither the count nor the size of headers (100,000 of them, or one of 100 MiB,
were buffered and parsed). Past MAX_HEADERS lines or MAX_HEADER_BYTES of names and values a
request is a 431, each line counted once whole (`on_header`); the parser buffers a line of any
size until then, so the head as it comes (request line and headers) is cut past MAX_HEAD_BYTES,
counted on the reads after its first. A chunked body's trailers come to `on_header` after the
header block's end, where they were appended to the headers the app had been given and neither
bound looked at them: they count with the headers, line by line, and the bytes of a last
chunk's trailers as a head's. They are not the app's (uvicorn's ASGI has no request trailers;
its h11 protocol drops them).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.cli.refusals import Refused, error_body
from app.cli.stalls import StallBoundProtocol
from app.errors import RequestHeaderFieldsTooLarge

# 64 KiB and 100 are above what any client of this service sends (a browser's cookies stay
# under 8 KiB; Apache allows 100 fields of 8 KiB, nginx 32 KiB in all). The head as it comes may
# add a URL of 64 KiB, the parser's own bound: past both, a block that never ends is cut as it
# grows.
MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024
MAX_HEAD_BYTES = 2 * MAX_HEADER_BYTES
HEADERS_DETAIL = (
    "the request's headers (with a chunked body's trailers) are over 64 KiB or 100 headers (or "
    "its request line and headers, or its trailers, over 128 KiB): send large data in a "
    "request's body"
)


class HeaderBoundProtocol(StallBoundProtocol):
    """uvicorn's httptools protocol with its headers and trailers bounded (the module's
    docstring), its Host headers counted as they come. A head past a bound raises (from a
    callback) or returns (`head_received`) a 431 `Refused`: the protocol over it answers it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_bytes = 0  # bytes read in the reads after the first of a head not complete
        self.header_bytes = 0  # the message's header lines, names and values, trailers too
        self.hosts = 0  # its Host headers
        self.trailers = 0  # ... and its trailers
        self.chunk_at = -1  # the body's bytes at a chunk's header, until the chunk is complete
        self.chunked_cycle: object = None  # the last request whose body came chunked

    def in_head(self) -> bool:
        """Whether a head, or a last chunk's trailers (a chunk's header came, none of its data),
        is coming: its reads are counted (`head_received`)."""
        return self.in_headers or self.chunk_at == self.body_received

    def head_received(self, data: bytes) -> Refused | None:
        """Feed a read that came `in_head`, counted first (a message begun in it counts from
        zero): its 431 once past MAX_HEAD_BYTES with the head still not complete. A header line
        is counted only once whole (`on_header`), and the parser buffers one of any size until
        then."""
        self.head_bytes += len(data)
        super().data_received(data)
        if self.head_bytes > MAX_HEAD_BYTES and self.in_head():
            return self.headers_too_large(dispatched=not self.in_headers)
        return None

    def headers_too_large(self, *, dispatched: bool = False) -> Refused:
        body = error_body(RequestHeaderFieldsTooLarge(HEADERS_DETAIL))
        cause = "refused a request whose headers are over 64 KiB or 100 headers (431)"
        status = b"431 Request Header Fields Too Large"
        return Refused(status, body, [], cause, dispatched=dispatched)

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)  # by name: the hot path's (app/cli/wire.py)
        self.head_bytes = self.header_bytes = self.hosts = self.trailers = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's (a lowercase name, `Expect: 100-continue` noted), each line counted as it
        # comes, and a trailer only counted.
        size = self.header_bytes = self.header_bytes + len(name) + len(value)
        headers = self.headers
        if self.in_headers:
            if size > MAX_HEADER_BYTES or len(headers) >= MAX_HEADERS:
                raise self.headers_too_large()
            name = name.lower()
            if name == b"host":
                self.hosts += 1
            elif name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            headers.append((name, value))
            return
        self.trailers += 1
        if size > MAX_HEADER_BYTES or len(headers) + self.trailers > MAX_HEADERS:
            raise self.headers_too_large(dispatched=True)

    def on_chunk_header(self) -> None:
        self.chunk_at = self.body_received
        self.chunked_cycle = self.cycle  # the request whose body is chunked (app/cli/wire.py)
        self.head_bytes = 0

    def on_chunk_complete(self) -> None:
        self.chunk_at = -1
