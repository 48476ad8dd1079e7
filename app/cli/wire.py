"""`agmem serve`'s HTTP/1.1 protocol: uvicorn's, with its refusals in the service's error shape,
bounds on a client that stops sending (app/cli/stalls.py) and on headers (app/cli/headers.py), and
one Host per request. Its parts by concern are in app/cli/http1/: the answers' texts, a chunked
body's framing, the request line and the trusted proxies.

uvicorn answers what it cannot parse itself, before the app sees anything, with a plain-text
`400 Invalid HTTP request received.`: a malformed request line, header or chunk, a bad,
negative or conflicting `Content-Length`, both `Content-Length` and `Transfer-Encoding`, a URL
over 64 KiB (a long `prompt` on `GET /api/context`). A client that reads every error as
`{"error", "detail"}` failed to parse that one; the protocol below sends the same 400 in the
shared shape and still closes the connection, as uvicorn does (the parser's state is lost).

Connections are bounded (AGMEM_MAX_CONNECTIONS, and never more than the process's file
descriptors leave room for): each is a descriptor, and at the process's limit the service could
open neither a database connection nor a file, and took its embedded Postgres for dead ("Too many
open files"). uvicorn's `limit_concurrency`, which answers past its bound, sends a plain-text 503;
the request is answered here first, the same way, in the error shape with `Retry-After`.

Behind a reverse proxy that sends its upstream's address as `Host` (nginx's default
`proxy_set_header Host $proxy_host`), the service's own `/docs` page, at the proxy's public name,
counted as a foreign origin. From a peer in AGMEM_TRUSTED_PROXIES (none by default: a header any
client can send is never believed blindly) the first name in `X-Forwarded-Host` becomes the
request's `Host`, which the Host and origin rules then judge. A loopback peer may be a browser on
this machine as well as a local proxy: a page rebound to 127.0.0.1 (DNS rebinding) sends its own
domain as `Host` and may add any `X-Forwarded-Host` (same-origin: no preflight). From a loopback
peer the header is believed only when the real `Host` passes the Host rule itself, as the
upstream's address a local proxy sends does (`127.0.0.1:37777`).

Two `Host` headers are refused (RFC 9112, 3.2): the Host rule read the first and the origin rule
the last, so `Host: 127.0.0.1` then `Host: evil.example` passed the one as this machine and the
other as the page's own origin. So is an HTTP/1.1 request without one (RFC 9112, 3.2: a server
MUST); an HTTP/1.0 one is served (HTTP/1.0 has no such rule; HAProxy's health check sends none).
A request line without a version (HTTP/0.9's shape) is refused, with a Host or without: HTTP/0.9
has no headers, so that is no request of any version. One that names another version than 1.x
(`HTTP/2.0`, which llhttp passes, the h2c preface `PRI * HTTP/2.0`, `HTTP/3.0`, `HTTP/0.9` named,
which llhttp reads as a line without one) is a 505 (RFC 9110, 15.6.6), as nginx answers: HTTP/2.0
was served as HTTP/1.x. `HTTP/1.2` to `HTTP/1.9` are served as 1.1 (RFC 9110, 2.5; nginx does
too), where llhttp refused them as malformed. llhttp takes `RTSP/` and `ICE/` for `HTTP/` (with
their methods, GET among them): another protocol's name is a 400 naming it, read, like the rest,
from the request line itself (`find_line_tail`), where its message begins: httptools does not say
where that is, so the protocol counts it (`head_start`, `read_after_body`), and no line in a body
is read as a request's. The method's refusal comes before any other of the head, then the
request line's, then the rest, the 431 of headers past their bounds (app/cli/headers.py) too. A
refusal pipelined behind a request still in the app waits for that one's answer.

The service serves no WebSocket: an `Upgrade` is ignored (RFC 9110, 7.8) and the request served
as HTTP/1.1, in the shape; uvicorn's WebSocket protocol answered it in plain text.
CONNECT, which llhttp reads as an upgrade too, is a 501 (a method this service supports for no
resource, RFC 9110, 15.6.2) whatever else its head holds, once its line is whole, and closes the
connection: what follows it is a tunnel's bytes, which were read as the next request. So is a
PRI that is not HTTP/2's preface (llhttp knows the method only there, and waited for the rest of
it), and a method the service does not know (`FOO`, RTSP's `DESCRIBE`: RFC 9110, 15.6.2), read
from the message's start since llhttp stops in it; such a word at a read's end waits 0.5 s for
its rest, not the idle timeout, while a prefix of a method a route answers (`GE`) waits as any
head does. Other methods a route does not take are its 405 (with `Allow`) or 404.

uvicorn's `data_received` logs `Invalid HTTP request received.` for every parser error, which
named neither a 503 at the limit nor a Host refusal. It stays uvicorn's: the parser it feeds
(`RefusingParser`) answers a refusal of the callbacks here, logging its cause, one line per cause
at most every AGMEM_REFUSAL_LOG_SECONDS and the count of the rest when that window ends.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Iterable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.api.abort import ABORT_EXTENSION
from app.api.middleware import allowed_host_names
from app.cli.headers import MAX_HEAD_BYTES, HeaderBoundProtocol
from app.cli.http1 import proxies
from app.cli.http1.answers import (
    BAD_REQUEST_DETAIL,
    NO_HOST_DETAIL,
    STOPPING_DETAIL,
    STOPPING_RETRY_AFTER,
    TWO_HOSTS_DETAIL,
    UPGRADE_BODY_DETAIL,
    connect_refusal,
    version_not_supported,
)
from app.cli.http1.framing import CHUNKS_BEGIN, ChunkState, blank_line_ends, scan_chunks
from app.cli.http1.lines import (
    ANSWERED_AT_THE_LINE,
    LINE_BOUND,
    METHOD_WAIT_SECONDS,
    SPACES,
    UNSERVED_METHODS,
    LineReadingProtocol,
    read_version,
)
from app.cli.refusals import REFUSAL_LOG_SECONDS as REFUSAL_LOG_SECONDS
from app.cli.refusals import Header, RefusalLog, Refused, error_body
from app.cli.stalls import LINGER_QUIET_SECONDS, ClosingAfterBody
from app.config import Settings
from app.errors import BadRequest, ServiceUnavailable

# Connections past the limit: how many more are let in at once, and how long each may take to
# send the request that is answered 503 (`agmem serve` keeps 128 descriptors in reserve).
OVERFLOW = 32
OVER_LIMIT_WAIT_SECONDS = 1.0
DEFAULT_MAX_BODY_BYTES: int = Settings.model_fields["max_body_bytes"].default


# The hot path calls its bases by name: on Python 3.11 `super()` costs 0.15 us a call more, and
# a request passed through seven of them (bench/wire.py).
_feed_data = httptools.HttpRequestParser.feed_data


class RefusingParser(httptools.HttpRequestParser):
    """httptools' parser, answering a `Refused` of the protocol's callbacks itself: uvicorn's
    `data_received` logs "Invalid HTTP request received." for any parser error, which names
    none of these causes. It sees a refusal only as the parser's `HttpParserCallbackError`,
    with the callback's exception as its context."""

    def __init__(self, protocol: JsonErrorsProtocol) -> None:
        super().__init__(protocol)
        self.protocol = protocol
        self.version = "1.1"

    def get_http_version(self) -> str:
        """The version the protocol's `on_headers_complete` read (`read_version`) for the header
        block just complete: uvicorn asks only from its own, which comes after."""
        return self.version

    def feed_data(self, data: bytes | bytearray | memoryview | array[int]) -> None:
        while True:
            try:
                _feed_data(self, data)
            except httptools.HttpParserCallbackError as error:
                refused = error.__context__
                if not isinstance(refused, Refused):
                    raise
                self.protocol.refuse(refused)  # a refusal's: rare
            except httptools.HttpParserUpgrade as upgrade:
                # llhttp stops after a request that asks for an upgrade (the protocol ignores
                # it): what follows it in the read is the next request's.
                data = memoryview(data)[upgrade.args[0] :]
                if data:
                    continue
            return


class JsonErrorsProtocol(LineReadingProtocol):
    """uvicorn's HTTP/1.1 protocol as `agmem serve` ran it (httptools, which uvicorn[standard]
    installs, is what its "auto" picks), with its 400 as JSON, a 408 for a stalled request, a
    bound on every idle state, a 503 in the shape past the connection limit, a 400 for two Host
    headers and a trusted proxy's `X-Forwarded-Host`. `configured` makes the class with the
    settings."""

    parser: RefusingParser
    trusted_proxies: tuple[proxies.Network, ...] = ()
    allowed_hosts: frozenset[str] = frozenset()
    max_body_bytes = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def configured(
        cls,
        *,
        idle_timeout: float,
        trusted_proxies: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        refusal_log_seconds: float = REFUSAL_LOG_SECONDS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        linger_quiet_seconds: float = LINGER_QUIET_SECONDS,
    ) -> type[JsonErrorsProtocol]:
        """The protocol with these settings (uvicorn makes one instance per connection).
        `trusted_proxies`: addresses or networks (`10.0.0.0/8`); `allowed_hosts`:
        AGMEM_ALLOWED_HOSTS, which a loopback proxy's real `Host` may name; `max_body_bytes`:
        AGMEM_MAX_BODY_BYTES, with a head's bound what a refused request's rest can hold;
        `linger_quiet_seconds`: AGMEM_LINGER_QUIET_SECONDS."""
        attributes = {
            "idle_timeout": idle_timeout,
            "trusted_proxies": proxies.trusted_networks(trusted_proxies),
            "allowed_hosts": allowed_host_names(allowed_hosts),
            "refusals": RefusalLog(refusal_log_seconds),
            "max_body_bytes": max_body_bytes,
            "linger_bytes": max_body_bytes + MAX_HEAD_BYTES,
            "linger_quiet_seconds": linger_quiet_seconds,
        }
        return type(cls.__name__, (cls,), attributes)

    @classmethod
    def trusts(cls, peer: str) -> tuple[bool, bool]:
        """Whether the peer at this address is a trusted proxy, and whether it is loopback."""
        return proxies.trusts(cls.trusted_proxies, peer)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parser = RefusingParser(self)
        # Data after close as uvicorn sets it; any one-digit version, which llhttp refuses but
        # for 0.9, 1.0, 1.1 and 2.0 (and names in the same error as a malformed line): HTTP/1.2
        # and up are served as 1.1 (RFC 9110, 2.5), the rest refused, each by name
        # (`line_refused`). llhttp takes `RTSP/` and `ICE/` for `HTTP/` (with their methods,
        # GET and SOURCE among them), strict or not: the name is read from the line itself.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True, lenient_version=True)
        self.behind_proxy = False  # the peer is a trusted proxy
        self.loopback_proxy = False  # ... on this machine, where a browser connects from too
        self.held_error = None  # declared on StallBoundProtocol, whose idle check reads it
        # A message's body is coming (from its header block's end to the message's end): a read
        # that begins in it holds the next message after the body's end, not at its start.
        self.body_open = False
        # Where a chunked body that spans reads stands at the last read's end (`scan_chunks`):
        # None until its head's read is scanned, False once not tracked (what llhttp refuses).
        self.chunks: ChunkState | bool | None = None
        # A head's text ends in a word no method a route answers starts with: its 501 once its
        # rest has had time to come (`wait_for_method`).
        self.method_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.last_data = self.waiting_since = self.loop.time()
        if self.trusted_proxies and self.client is not None:
            self.behind_proxy, loopback = self.trusts(self.client[0])
            self.loopback_proxy = self.behind_proxy and loopback
        wait = self.idle_timeout
        limit = self.limit_concurrency
        if limit is not None and len(self.connections) >= limit:
            self.release_lingering()
        if limit is not None and len(self.connections) >= limit:
            # Past the limit a connection is still a descriptor: it gets a moment to send its
            # request, answered 503, and one past the overflow is closed at once.
            if len(self.connections) >= limit + OVERFLOW:
                transport.close()
            wait = min(wait, OVER_LIMIT_WAIT_SECONDS)
        self.idle_timer = self.loop.call_later(wait, self.idle_check)

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        if self.held_error is not None or self.lingering_since is not None:
            # Behind a refused request: the parser lost its place, nothing more is read.
            if self.lingering_since is not None:
                self.drop(data)
            return
        self.read = data
        self.line_from = self.head_at = 0
        if self.body_open:
            self.read_after_body(data)
        # `in_head`, inline (a call a read saved); tests/cli/test_wire_layers.py holds them alike.
        elif not (self.in_headers or self.chunk_at == self.body_received):
            HttpToolsProtocol.data_received(self, data)
            if self.in_headers:
                self.keep_line()
        else:
            self.head_data(data)
        if self.body_open:
            if self.chunks is None:
                self.begin_chunks()
            if self.body_received > self.max_body_bytes:
                self.chunked_past_bound()
        self.read = b""  # a long-idle connection holds no read

    def head_data(self, data: bytes) -> None:
        """Feed a read (or its part) that comes in a head, or a last chunk's trailers."""
        if self.method_timer is not None:  # the word's rest may be this read
            self.method_timer.cancel()
            self.method_timer = None
        if self.method_pending:  # llhttp refused the method: the read goes on with its word
            self.send_400_response("")
            return
        if self.in_headers:
            self.head_at = -1  # it began in a read before
        refused = self.head_received(data)
        if refused is not None and self.held_error is None and not self.finished():
            self.refuse(refused)
        if self.in_headers:
            self.keep_line()

    def feed(self, data: bytes) -> None:
        if self.in_head():
            self.head_data(data)
            return
        HttpToolsProtocol.data_received(self, data)
        if self.in_headers:
            self.keep_line()

    def read_after_body(self, data: bytes) -> None:
        """Feed a read that begins in a message's body, the next message's head known to begin
        where that body ends (`head_at`): a sized body's end is counted, and a chunked one's
        read from its framing (`scan_chunks`); only one llhttp refuses, or whose head's read
        was not scanned, is fed up to each place it may end (after a blank line) until the
        parser says it has."""
        if not any(name == b"transfer-encoding" for name, _ in self.headers):
            length = next((v for k, v in self.headers if k == b"content-length"), b"0")
            self.head_at = min(len(data), int(length) - self.body_received)
            self.feed(data)
            return
        chunks = self.chunks
        if not isinstance(chunks, bool) and chunks is not None:
            try:
                self.chunks, self.head_at = scan_chunks(chunks, data, 0)
            except ValueError:
                self.chunks = False
            else:
                if self.head_at < 0:
                    self.head_at = len(data)
                self.feed(data)
                return
        fed = 0
        for end in blank_line_ends(data):
            self.feed(data[fed:end])
            fed = end
            if self.held_error is not None or self.finished():
                return
            if not self.body_open:
                self.head_at = end
                break
        if fed < len(data):
            self.feed(data[fed:])

    def keep_line(self) -> None:
        """At the end of a read inside a head: its request line's tail, if the line is whole
        (a method refused whatever follows it is answered then: PRI waits for HTTP/2's preface),
        or else the head's text from its line's start for the reads that complete it."""
        read = self.read
        try:
            if self.line_tail is not None or self.method_pending:  # found, or a method refused
                return
            parser = self.parser
            if read_version(parser) != "0.0":  # llhttp has read past the line
                method = parser.get_method()
                self.find_line_tail(method)
                if (
                    self.line_tail is not None
                    and method in ANSWERED_AT_THE_LINE
                    and self.held_error is None
                    and not self.finished()
                ):
                    refused = self.head_refused()
                    if refused is not None:
                        self.refuse(refused)
                        return
            if self.line_tail is None:
                kept = self.line_text + read if self.line_text else read[self.head_start() :]
                if b"  " in kept:  # llhttp takes any run of spaces between the line's parts
                    kept = SPACES.sub(b" ", kept)
                self.line_text = kept[:LINE_BOUND]
                if not self.url:
                    self.wait_for_method()
        finally:
            # Only once the line is looked for: `head_start` reads the last bytes of the reads
            # before this one, where a head's end begun in them is.
            self.head_tail = (self.head_tail + read[-3:])[-3:]

    def begin_chunks(self) -> None:
        """At the end of the read a head came in, its body still coming: where a chunked body
        stands (`scan_chunks`), its framing read from the header block's end."""
        if not any(name == b"transfer-encoding" for name, _ in self.headers):
            self.chunks = False
            return
        read = self.read
        tail = self.head_tail
        line_from = self.line_from
        at = (tail + read).find(b"\r\n\r\n", line_from + len(tail) - 2 if line_from else 0)
        if at < 0:
            self.chunks = False
            return
        try:
            self.chunks, _ = scan_chunks(CHUNKS_BEGIN, read, at + 4 - len(tail))
        except ValueError:
            self.chunks = False

    def _should_upgrade(self) -> bool:
        # The service serves no WebSocket (`agmem serve` runs uvicorn with `ws="none"`): an
        # `Upgrade` is ignored (RFC 9110, 7.8: a server MAY) and the request is served as
        # HTTP/1.1. uvicorn's WebSocket protocol answered it in plain text (`403 Forbidden`,
        # empty; HTTP/1.0's `400 Failed to open a WebSocket connection`).
        return False

    def on_message_begin(self) -> None:
        HeaderBoundProtocol.on_message_begin(self)
        self.in_headers = True
        self.line_tail = None
        self.message_began = self.last_data

    def on_headers_complete(self) -> None:
        self.in_headers = False
        parser = self.parser
        method = parser.get_method()
        if method in UNSERVED_METHODS:
            raise self.method_refused() or connect_refusal()
        tail = self.line_tail
        if tail is None:
            tail = self.find_line_tail(method)
        parser.version = version = read_version(parser)
        if tail != b"HTTP/1.1":
            refused = self.line_refused(method)
            if refused is not None:
                raise refused
            if version[0] != "1":  # llhttp passes any version of one digit
                raise version_not_supported(version)
            if version != "1.0":
                parser.version = "1.1"  # RFC 9110, 2.5: a higher 1.x is served as 1.1
        hosts = self.hosts
        if hosts > 1:
            body = error_body(BadRequest(TWO_HOSTS_DETAIL))
            cause = "refused a request with two Host headers (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
        if not hosts and version != "1.0":
            body = error_body(BadRequest(NO_HOST_DETAIL))
            cause = "refused an HTTP/1.1 request without a Host header (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
        if parser.should_upgrade():
            self.refuse_upgrade()
        if self.behind_proxy:
            self.take_forwarded_host()
        limit = self.limit_concurrency  # uvicorn's own check, the same, comes after this one
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            detail = (
                f"the service has its limit of {limit - 1} connections open "
                "(AGMEM_MAX_CONNECTIONS); retry shortly"
            )
            cause = (
                f"connection limit reached: {limit - 1} open (AGMEM_MAX_CONNECTIONS), answered 503"
            )
            body = error_body(ServiceUnavailable(detail))
            raise Refused(b"503 Service Unavailable", body, [(b"retry-after", b"1")], cause)
        self.body_began = self.last_data
        self.body_received = 0
        self.chunks = None
        HttpToolsProtocol.on_headers_complete(self)  # raises for a URL past 64 KiB: no body
        self.body_open = True
        cycle = self.cycle
        # Each request's scope offers the app the cut of its answer (app/api/abort.py), bound to
        # its own cycle: one pipelined behind it replaces `self.cycle` before its answer ends.
        # Set before its app task first runs (it was only created).
        self.scope["extensions"] = {
            ABORT_EXTENSION: {"abort": lambda _scope: self.abort_answer(cycle)}
        }
        if cycle.keep_alive and self.announced_past_linger():
            # Kept alive, the body of an answer sent before it came (a 413) is read to its end
            # and dropped: 7,380 MiB in 4 s of a `Content-Length: 2^40`. So the answer says
            # `Connection: close` and its close lingers, bounded as every refusal's is.
            cycle.keep_alive = False
        if not cycle.keep_alive and self.has_body():
            cycle.transport = ClosingAfterBody(self)

    def chunked_past_bound(self) -> None:
        """At a read's end in a body past AGMEM_MAX_BODY_BYTES: if it is chunked, no route takes
        it and it announced no length (`announced_past_linger`), so kept alive its answer (the
        413, or one sent before the body came) left the connection open and the rest was read
        and dropped without end. The answer not begun says `Connection: close` now (the app runs
        only after the read); either way the close lingers, bounded as every refusal's is.
        Looked at once a read, not in `on_body`: a chunk each cost 14% of a body of 1-byte
        chunks (bench/wire.py)."""
        cycle = self.cycle
        if self.chunked_cycle is not cycle or not cycle.keep_alive or self.finished():
            return  # not chunked, or closing already (lingering after the answer)
        cycle.keep_alive = False
        if not cycle.response_complete:
            cycle.transport = ClosingAfterBody(self)
            return
        if self.timeout_keep_alive_task is not None:  # its close would reset the client
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.close_lingering()

    def abort_answer(self, cycle: RequestResponseCycle) -> None:
        """Close the connection after what was written of `cycle`'s answer, without its end
        (app/api/abort.py): the client reads an incomplete transfer. Its request is taken for
        ended (`disconnected`), so uvicorn does not log the app's return as a fault."""
        cycle.disconnected = True
        self.transport.close()

    def on_message_complete(self) -> None:
        self.body_open = False
        HttpToolsProtocol.on_message_complete(self)

    def body_coming(self) -> bool:
        return self.body_open

    def refuse_upgrade(self) -> None:
        """Refuse a request llhttp reads as an upgrade (it stops after it) that the protocol
        cannot serve as HTTP/1.1: one with a body (a CONNECT is refused first). httptools tells
        llhttp to skip the body of such a request: the app would get an empty body, and the
        body's bytes would be read as the next request. `curl --http2` on http:// asks for an
        upgrade on every call."""
        if self.has_body():
            cause = "refused a request asking for an Upgrade with a body (400)"
            raise Refused(
                b"400 Bad Request", error_body(BadRequest(UPGRADE_BODY_DETAIL)), [], cause
            )

    def announced_past_linger(self) -> bool:
        """Whether the request's `Content-Length` is past what a refusal's linger reads at full
        speed (`linger_bytes`): a body no route takes (AGMEM_MAX_BODY_BYTES is less)."""
        for name, value in self.headers:
            if name == b"content-length":
                length = value.strip(b" \t")
                return length.isdigit() and int(length) > self.linger_bytes
        return False

    def has_body(self) -> bool:
        for name, value in self.headers:
            if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t0")):
                return True
        return False

    def on_response_complete(self) -> None:
        self.waiting_since = self.loop.time()
        if self.lingering_since is not None:  # the answer's close lingers (`ClosingAfterBody`)
            self.server_state.total_requests += 1  # as uvicorn's own, which is not called
            return
        held = self.held_error
        if held is not None and not self.finished() and not self.pipeline:
            self.server_state.total_requests += 1  # as uvicorn's own, which is not called
            self.send_error(*held)
            self.close_lingering()
            return
        HttpToolsProtocol.on_response_complete(self)

    def take_forwarded_host(self) -> None:
        proxies.take_forwarded_host(
            self.headers, loopback=self.loopback_proxy, allowed_hosts=self.allowed_hosts
        )

    def cut_short(self) -> None:
        """Answer the request in hand 503 (unless the app's answer has begun) and close, before
        its task is cancelled: the app's later answer, if any, goes nowhere."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.lingering_since is not None:
            self.transport.close()  # answered, or refused
            return
        cycle.disconnected = True
        cycle.message_event.set()
        if not cycle.response_started:
            body = error_body(ServiceUnavailable(STOPPING_DETAIL))
            self.send_error(b"503 Service Unavailable", body, [STOPPING_RETRY_AFTER])
        self.transport.close()

    def refuse(self, refused: Refused) -> None:
        """Answer a request refused by a callback (`RefusingParser`) or its head's bound, log its
        cause and close."""
        if self.in_headers:
            # A refusal before the header block's end is its bounds' 431: the method's and the
            # request line's come first (a 101st header made it a 431).
            refused = self.head_refused() or refused
        self.refusals.note(self.logger, self.loop, refused.cause)
        if refused.dispatched:
            self.refuse_dispatched(refused)
        else:
            self.answer_and_close(refused.status, refused.body, refused.headers)

    def refuse_dispatched(self, refused: Refused) -> None:
        """Refuse a request for its body or its trailers (a bad chunk, too many trailers): it
        was dispatched with its headers. Queued behind another's answer, it never starts, and
        its refusal waits for that answer (`held_error`). In the app, it reads a disconnect and
        is answered unless its answer has begun; then, or once answered, the connection is only
        closed."""
        cycle = self.cycle
        if self.pipeline and self.pipeline[0][0] is cycle:
            self.pipeline.popleft()
            self.answer_and_close(refused.status, refused.body, refused.headers)
            return
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if not cycle.response_started:
                self.send_error(refused.status, refused.body, refused.headers)
        self.close_lingering()

    def send_400_response(self, msg: str) -> None:
        # What the parser itself refused (uvicorn has logged it): its 400 in the shape. A
        # broken body is the request in hand's own; broken headers are a request's behind it.
        # The head's method and line are refused first (`head_refused`): llhttp refuses a
        # method it does not take (a 501), a CONNECT's line or PRI's but in HTTP/2's preface
        # (each a 501 too), and pauses on that preface (`PRI * HTTP/2.0`, the line's 505). A
        # method it stopped in at a read's end is named once its word ends (`method_goes_on`):
        # a word no answered method starts with waits METHOD_WAIT_SECONDS for its rest
        # (`wait_for_method`), a prefix of one the idle timeout, as any head does.
        if self.in_headers:
            self.method_pending = self.method_goes_on()
            if self.method_pending:
                self.wait_for_method()
                return
            refused = self.head_refused()
            if refused is not None:
                self.refuse(refused)
                return
            self.answer_and_close(
                b"400 Bad Request", error_body(BadRequest(BAD_REQUEST_DETAIL)), []
            )
            return
        # A broken body: its request was dispatched with its headers, maybe queued behind
        # requests of the same read still in the app. Written at once, the 400 overtook their
        # answers, lost with the connection (the app's later write raised "the handler is
        # closed"): it is refused as a dispatched request is. Answered already (a 404 sent
        # before its body came), it got a second answer, the 400: the connection is only
        # closed (`refuse_dispatched`). A head uvicorn refuses once whole (a URL over 64 KiB,
        # which it cannot split) opens no body and dispatches nothing: it is refused as a head
        # is, after the answers before it (the request in the app was cut off by it).
        body = error_body(BadRequest(BAD_REQUEST_DETAIL))
        if not self.body_open:
            self.answer_and_close(b"400 Bad Request", body, [])
            return
        self.refuse_dispatched(Refused(b"400 Bad Request", body, [], msg, dispatched=True))

    def wait_for_method(self) -> None:
        """At a read's end in a head's first word: if no method a route answers starts with it
        (`word_refused`), its 501 is certain, but only its rest can name it whole (`FO`, then
        `O /`): it waits METHOD_WAIT_SECONDS for that, not the idle timeout (a `FOO` sent alone,
        the connection left open, waited for the 408). A prefix of such a method (`GE`) waits
        for the rest of its head as any head does."""
        if self.method_timer is None and self.word_refused() is not None:
            wait = min(METHOD_WAIT_SECONDS, self.idle_timeout)
            self.method_timer = self.loop.call_later(wait, self.method_waited)

    def method_waited(self) -> None:
        self.method_timer = None
        if self.held_error is not None or self.finished():
            return
        refused = self.word_refused()
        if refused is not None:
            self.refusals.note(self.logger, self.loop, refused.cause)
            self.answer_and_close(refused.status, refused.body, refused.headers)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.method_timer is not None:
            self.method_timer.cancel()
        super().connection_lost(exc)

    def answer_and_close(self, status: bytes, body: bytes, headers: list[Header]) -> None:
        """Answer a request refused before it reached the app, and close: at once, or, pipelined
        behind requests still in the app, once their answers are sent (`on_response_complete`).
        Written at once, it overtook them, and their answers were lost with the connection."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self.held_error = (status, body, headers)
            return
        self.send_error(status, body, headers)
        self.close_lingering()
