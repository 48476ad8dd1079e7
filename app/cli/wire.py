"""`agmem serve`'s HTTP/1.1 protocol: uvicorn's, with its refusals in the service's error shape,
bounds on a client that stops sending (app/cli/stalls.py) and on headers (app/cli/headers.py), and
one Host per request.

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
from the message's start since llhttp stops in it. Other methods a route does not take are its
405 (with `Allow`) or 404.

uvicorn's `data_received` logs `Invalid HTTP request received.` for every parser error, which
named neither a 503 at the limit nor a Host refusal. It stays uvicorn's: the parser it feeds
(`RefusingParser`) answers a refusal of the callbacks here, logging its cause, one line per cause
at most every AGMEM_REFUSAL_LOG_SECONDS and the count of the rest when that window ends.
"""

from __future__ import annotations

import ipaddress
import re
from array import array
from collections.abc import Iterable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.middleware import allowed_host_names, names_this_machine
from app.cli.headers import HeaderBoundProtocol
from app.cli.refusals import REFUSAL_LOG_SECONDS as REFUSAL_LOG_SECONDS
from app.cli.refusals import Header, RefusalLog, Refused, error_body

BAD_REQUEST_DETAIL = (
    "the request is not valid HTTP/1.1 (a malformed request line, header or chunked body, a bad "
    "or conflicting Content-Length, or a URL over 64 KiB: send a long context prompt with "
    "POST /api/context)"
)
TWO_HOSTS_DETAIL = "the request has more than one Host header"
NO_HOST_DETAIL = (
    "the request has no Host header, which HTTP/1.1 requires (RFC 9112, 3.2): send the address "
    "it is for, e.g. `Host: 127.0.0.1:37777`"
)
UPGRADE_BODY_DETAIL = (
    "the request asks for an Upgrade and carries a body: this service speaks HTTP/1.1 only and "
    "its parser skips the body of such a request; send it without `Upgrade` (curl: --http1.1)"
)
NO_VERSION_DETAIL = (
    "the request line has no HTTP version (HTTP/0.9's shape, `GET /health` alone), which this "
    "service does not serve: send `GET /health HTTP/1.1` with the address it is for, e.g. "
    "`Host: 127.0.0.1:37777`"
)
VERSION_DETAIL = (
    "the request line names HTTP/{version}; this service speaks HTTP/1.1 (and 1.0) on this "
    "port: send `GET /health HTTP/1.1` with the address it is for, e.g. `Host: 127.0.0.1:37777`"
)
CONNECT_DETAIL = (
    "CONNECT asks for a tunnel through a proxy, and this service is no proxy: it serves its "
    "routes directly (a client whose HTTP_PROXY or HTTPS_PROXY names this address sends it)"
)
PRI_DETAIL = (
    "the PRI method is only HTTP/2's connection preface (`PRI * HTTP/2.0`), and this service "
    "speaks HTTP/1.1 (and 1.0) on this port: send `GET /health HTTP/1.1`"
)
PROTOCOL_DETAIL = (
    "the request line names {protocol}, not HTTP; this service speaks HTTP/1.1 (and 1.0) on this "
    "port: send `GET /health HTTP/1.1` with the address it is for, e.g. `Host: 127.0.0.1:37777`"
)
METHOD_DETAIL = (
    "the request's method `{method}` is none this service knows (RFC 9110, 15.6.2); its routes "
    "take HTTP/1.1's (GET, POST, PUT, DELETE...): send `GET /health HTTP/1.1` with the address it "
    "is for, e.g. `Host: 127.0.0.1:37777`"
)
# What of a read is kept for a head's request line not yet whole at the read's end, from the
# line's start, runs of spaces as one: a URL of up to 64 KiB (a long `prompt` on
# `GET /api/context`), its method and its version.
LINE_BOUND = 64 * 1024 + 64
_SPACES = re.compile(rb" +")
_SPACES_AT = re.compile(rb" *")
_BLANK_LINES = re.compile(rb"[\r\n]*")  # before a request line: llhttp skips them
# A method's characters (RFC 9110, 5.6.2: a token): a word of them that llhttp does not take is a
# method this service does not know (501), anything else no request at all (400).
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
METHOD_SHOWN = 64  # a method's characters read, and shown in its 501
# llhttp's methods of RTSP alone: it takes them with `RTSP/`, and refuses them with `HTTP/`.
RTSP_METHODS = frozenset(
    b"DESCRIBE ANNOUNCE SETUP PLAY PAUSE TEARDOWN GET_PARAMETER SET_PARAMETER REDIRECT RECORD "
    b"FLUSH".split()
)
# Methods refused whatever else the head holds: CONNECT asks for a tunnel, the rest are RTSP's.
# PRI too, unless its line is HTTP/2's preface (llhttp takes it nowhere else).
UNSERVED_METHODS = RTSP_METHODS | {b"CONNECT"}
ANSWERED_AT_THE_LINE = UNSERVED_METHODS | {b"PRI"}
# A request still open when a second signal hurries the stop: retry after about what a restart
# takes.
_STOPPING_RETRY_AFTER: Header = (b"retry-after", b"5")
STOPPING_DETAIL = (
    "the service is stopping (a second Ctrl-C or SIGTERM) and cut the request short before "
    "answering it; retry it once the service is back"
)
# Connections past the limit: how many more are let in at once, and how long each may take to
# send the request that is answered 503 (`agmem serve` keeps 128 descriptors in reserve).
OVERFLOW = 32
OVER_LIMIT_WAIT_SECONDS = 1.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _as_compared(network: Network) -> Network:
    """`::ffff:10.0.0.1` as `10.0.0.1`: an IPv4 peer of a service bound to `::` is compared as
    IPv4, so an IPv4-mapped entry never matched."""
    if isinstance(network, ipaddress.IPv4Network) or network.prefixlen < 96:
        return network
    mapped = network.network_address.ipv4_mapped
    return network if mapped is None else ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")


def _blank_line_ends(data: bytes) -> Iterable[int]:
    """Where in a read a chunked body may end: after each blank line (CRLF CRLF), one begun in
    the read before included."""
    for end, start in ((1, b"\n"), (2, b"\r\n"), (3, b"\n\r\n")):
        if data.startswith(start):
            yield end
    at = data.find(b"\r\n\r\n")
    while at >= 0:
        yield at + 4
        at = data.find(b"\r\n\r\n", at + 1)


def _chunked_end(read: bytes, at: int) -> int:
    """Where a chunked body that begins at `at` ends, in a read that holds it whole (llhttp has
    parsed it): after its last chunk's trailers; the read's end for what llhttp did not take."""
    try:
        _, end = scan_chunks(CHUNKS_BEGIN, read, at)
    except ValueError:
        return len(read)
    return len(read) if end < 0 else end


# Where a chunked body that spans reads stands at a read's end (`scan_chunks`): in a chunk's size
# line (its bytes so far), in a chunk's data (the bytes left, its CRLF included), or in the last
# chunk's trailers (the section's last bytes, from a line's start: b"\n" as it begins).
_SIZE, _DATA, _TRAILERS = 0, 1, 2
ChunkState = tuple[int, int, bytes]
CHUNKS_BEGIN: ChunkState = (_SIZE, 0, b"")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
# A size line with its extensions: past it, llhttp's state is not tracked (the old way).
_SIZE_LINE_BOUND = 64 * 1024


def scan_chunks(state: ChunkState, data: bytes, at: int) -> tuple[ChunkState, int]:
    """A chunked body's framing from `state` over `data[at:]`, which llhttp parses too: the state
    at the data's end, and where in it the body ends (after its trailers), or -1. Each chunk's
    data is skipped by its size: a body of blank lines costs its chunks, not its lines. A
    ValueError for what is not a size line (llhttp refuses it)."""
    kind, left, kept = state
    end = len(data)
    while at < end:
        if kind == _SIZE:
            line_end = data.find(b"\n", at)
            line = kept + data[at : end if line_end < 0 else line_end]
            if len(line) > _SIZE_LINE_BOUND:
                raise ValueError("a chunk's size line past its bound")
            if line_end < 0:
                return (_SIZE, 0, line), -1
            digits = line.split(b";", 1)[0].strip(b" \t\r")
            if _HEX.fullmatch(digits) is None:  # int() takes signs and underscores too
                raise ValueError("no chunk size")
            size = int(digits, 16)
            at = line_end + 1
            kind, left, kept = (_DATA, size + 2, b"") if size else (_TRAILERS, 0, b"\n")
        elif kind == _DATA:
            if at + left > end:
                return (_DATA, left - (end - at), b""), -1
            at += left
            kind = _SIZE
        else:
            text = kept + data[at:]
            found = text.find(b"\n\r\n")
            if found < 0:
                return (_TRAILERS, 0, text[-2:]), -1
            return CHUNKS_BEGIN, at + found + 3 - len(kept)
    return (kind, left, kept), -1


# The hot path calls its bases by name: on Python 3.11 `super()` costs 0.15 us a call more, and
# a request passed through seven of them (bench/wire.py).
_feed_data = httptools.HttpRequestParser.feed_data
# llhttp's version, a string formatted at each call (0.45 us): read once a request.
read_version = httptools.HttpRequestParser.get_http_version


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


class JsonErrorsProtocol(HeaderBoundProtocol):
    """uvicorn's HTTP/1.1 protocol as `agmem serve` ran it (httptools, which uvicorn[standard]
    installs, is what its "auto" picks), with its 400 as JSON, a 408 for a stalled request, a
    bound on every idle state, a 503 in the shape past the connection limit, a 400 for two Host
    headers and a trusted proxy's `X-Forwarded-Host`. `configured` makes the class with the
    settings."""

    parser: RefusingParser
    trusted_proxies: tuple[Network, ...] = ()
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def configured(
        cls,
        *,
        idle_timeout: float,
        trusted_proxies: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        refusal_log_seconds: float = REFUSAL_LOG_SECONDS,
    ) -> type[JsonErrorsProtocol]:
        """The protocol with these settings (uvicorn makes one instance per connection).
        `trusted_proxies`: addresses or networks (`10.0.0.0/8`); `allowed_hosts`:
        AGMEM_ALLOWED_HOSTS, which a loopback proxy's real `Host` may name."""
        networks = tuple(
            _as_compared(ipaddress.ip_network(entry, strict=False)) for entry in trusted_proxies
        )
        attributes = {
            "idle_timeout": idle_timeout,
            "trusted_proxies": networks,
            "allowed_hosts": allowed_host_names(allowed_hosts),
            "refusals": RefusalLog(refusal_log_seconds),
        }
        return type(cls.__name__, (cls,), attributes)

    @classmethod
    def trusts(cls, peer: str) -> tuple[bool, bool]:
        """Whether the peer at this address is a trusted proxy, and whether it is loopback."""
        address = ipaddress.ip_address(peer)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # an IPv4 client of a service bound to `::`
        return any(address in network for network in cls.trusted_proxies), address.is_loopback

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
        # A refusal pipelined behind a request still in the app, sent once its answer is.
        self.held_error: tuple[bytes, bytes, list[Header]] | None = None
        # The request line's text after its URL (`b"HTTP/1.1"`), once found (`line_tail`); the
        # read in hand while the parser has it; where in it the head in hand begins, when known
        # (`head_at`, else -1), and where the last line found in it ended (`line_from`); the
        # head's text from its line's start while the line is not whole at a read's end (nc,
        # telnet), and the last bytes of the reads a head came in (its end may straddle two).
        self.line_tail: bytes | None = None
        self.read = b""
        self.head_at = 0
        self.line_from = 0
        self.line_text = b""
        self.head_tail = b""
        # A message's body is coming (from its header block's end to the message's end): a read
        # that begins in it holds the next message after the body's end, not at its start.
        self.body_open = False
        # Where a chunked body that spans reads stands at the last read's end (`scan_chunks`):
        # None until its head's read is scanned, False once not tracked (what llhttp refuses).
        self.chunks: ChunkState | bool | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.last_data = self.waiting_since = self.loop.time()
        if self.trusted_proxies and self.client is not None:
            self.behind_proxy, loopback = self.trusts(self.client[0])
            self.loopback_proxy = self.behind_proxy and loopback
        wait = self.idle_timeout
        limit = self.limit_concurrency
        if limit is not None and len(self.connections) >= limit:
            # Past the limit a connection is still a descriptor: it gets a moment to send its
            # request, answered 503, and one past the overflow is closed at once.
            if len(self.connections) >= limit + OVERFLOW:
                transport.close()
            wait = min(wait, OVER_LIMIT_WAIT_SECONDS)
        self.idle_timer = self.loop.call_later(wait, self.idle_check)

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        if self.held_error is not None:
            return  # behind a refused request: the parser lost its place, nothing more is read
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
        if self.body_open and self.chunks is None:
            self.begin_chunks()
        self.read = b""  # a long-idle connection holds no read

    def head_data(self, data: bytes) -> None:
        """Feed a read (or its part) that comes in a head, or a last chunk's trailers."""
        if self.in_headers:
            self.head_at = -1  # it began in a read before
        refused = self.head_received(data)
        if refused is not None and self.held_error is None and not self.transport.is_closing():
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
        for end in _blank_line_ends(data):
            self.feed(data[fed:end])
            fed = end
            if self.held_error is not None or self.transport.is_closing():
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
            if self.line_tail is not None:
                return
            parser = self.parser
            if read_version(parser) != "0.0":  # llhttp has read past the line
                method = parser.get_method()
                self.find_line_tail(method)
                if (
                    self.line_tail is not None
                    and method in ANSWERED_AT_THE_LINE
                    and self.held_error is None
                    and not self.transport.is_closing()
                ):
                    refused = self.head_refused()
                    if refused is not None:
                        self.refuse(refused)
                        return
            if self.line_tail is None:
                kept = self.line_text + read if self.line_text else read[self.head_start() :]
                if b"  " in kept:  # llhttp takes any run of spaces between the line's parts
                    kept = _SPACES.sub(b" ", kept)
                self.line_text = kept[:LINE_BOUND]
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

    def head_start(self) -> int:
        """Where in the read the head in hand begins (leading blank lines, which llhttp skips,
        included): where the read's first message began (`head_at`), or else after the message
        whose line was found last, its header block's end and its body."""
        if self.head_at >= 0:
            return self.head_at
        read = self.read
        # That head's block may end across reads: the last bytes of those it came in lead (a
        # line found in this read ends past them, and the search begins there).
        tail = self.head_tail
        text = tail + read
        line_from = self.line_from  # 0: its line came in a read before, the block's end here
        at = text.find(b"\r\n\r\n", line_from + len(tail) - 2 if line_from else 0)
        if at < 0:
            return len(read)
        start = at + 4 - len(tail)
        if self.chunked_cycle is not None and self.chunked_cycle is self.cycle:
            return _chunked_end(read, start)
        return start + self.body_received

    def find_line_tail(self, method: bytes) -> bytes | None:
        """The text after the URL on the request line of the head in hand, stripped (b"HTTP/1.1",
        b"RTSP/1.0", b"" for none), or None while the line is not whole. It is read where the
        head begins (`head_start`), never searched for: a body may hold any line."""
        read = self.read
        at = self.head_at
        needle = method + b" " + self.url
        if at >= 0 and read.startswith(needle + b" HTTP/1.1\r\n", at):  # the hot path's
            self.line_from = at + len(needle) + 11
            self.head_at = -1
            self.line_tail = tail = b"HTTP/1.1"
            return tail
        if self.line_text:
            text = self.line_text + read
            at = 0
        else:
            text = read
            at = self.head_start()
        at = _BLANK_LINES.match(text, at).end()  # type: ignore[union-attr]
        if not text.startswith(method + b" ", at):
            return None
        end = _SPACES_AT.match(text, at + len(method)).end()  # type: ignore[union-attr]
        url = self.url
        if not (
            text.startswith(url, end)
            and text[end + len(url) : end + len(url) + 1] in (b" ", b"\r", b"\n")
        ):
            return None
        end += len(url)
        line_end = text.find(b"\n", end)
        if line_end < 0:
            return None
        self.line_from = line_end + 1 - (len(text) - len(read))
        self.head_at = -1
        self.line_text = b""
        self.line_tail = tail = text[end:line_end].strip(b" \r")
        return tail

    def head_refused(self) -> Refused | None:
        """The head's refusal that comes before any other: its method's (`method_refused`),
        then its line's (`line_refused`)."""
        return self.method_refused() or self.line_refused()

    def method_refused(self) -> Refused | None:
        """A 501 for a method the service does not serve, whatever else the head holds (RFC
        9110, 15.6.2): CONNECT, a method llhttp does not take (`FOO`, `get`) or takes for RTSP
        alone, and PRI but in HTTP/2's preface (that line's 505). llhttp names no method it
        stopped in: that one is read at the head's start."""
        method = self.parser.get_method()
        name = method
        if not self.url:  # llhttp stopped before the URL, maybe in the method
            if self.line_text:  # the head's line begun in a read before: the method with it
                text, at = self.line_text + self.read[:METHOD_SHOWN], 0
            else:
                text, at = self.read, self.head_start()
            at = _BLANK_LINES.match(text, at).end()  # type: ignore[union-attr]
            word = _TOKEN.match(text, at, at + METHOD_SHOWN)
            if word is None:
                return None  # no method: the parser's 400
            end = word.end()
            if end < len(text) and text[end] != 32 and end - at < METHOD_SHOWN:
                return None  # a word that goes on in other characters is no method either
            name = word.group()
        if name != method or method in RTSP_METHODS:
            shown = name.decode("ascii") + ("..." if len(name) == METHOD_SHOWN else "")
            body = error_body("NotImplemented", METHOD_DETAIL.format(method=shown))
            return Refused(b"501 Not Implemented", body, [], "refused an unknown method (501)")
        if method == b"CONNECT":
            return self.connect_refusal()
        if method == b"PRI":
            tail = self.line_tail
            if tail is None:
                tail = self.find_line_tail(method)
            if tail != b"HTTP/2.0":
                cause = "refused a PRI that is not HTTP/2's preface (501)"
                body = error_body("NotImplemented", PRI_DETAIL)
                return Refused(b"501 Not Implemented", body, [], cause)
        return None

    def line_refused(self, method: bytes | None = None) -> Refused | None:
        """The request line's refusal, which comes before any other of its head: none for
        HTTP/1.x (1.2 to 1.9 are served as 1.1), for a line not whole yet, or for one malformed
        (the parser's own 400); a 400 for another protocol's name (RTSP/1.0) or no version
        (HTTP/0.9's shape), a 505 naming another version of HTTP."""
        parser = self.parser
        tail = self.line_tail
        if tail is None:
            tail = self.find_line_tail(parser.get_method() if method is None else method)
        if tail is None:  # not found: llhttp's version alone, which names no protocol
            self.line_text = b""
            version = read_version(parser)
            if version[0] == "1" or version == "0.0":
                return None
            return self.no_version() if version == "0.9" else self.version_not_supported(version)
        if not tail:
            return self.no_version()  # HTTP/0.9 has no headers: with a Host it was HTTP/1.x's
        name, slash, digits = tail.partition(b"/")
        if not (
            slash
            and name.isalpha()
            and len(digits) == 3
            and digits[1] == 46  # "."
            and digits[0] in b"0123456789"
            and digits[2] in b"0123456789"
        ):
            return None
        if name != b"HTTP":
            protocol = tail.decode("ascii")
            body = error_body("BadRequest", PROTOCOL_DETAIL.format(protocol=protocol))
            return Refused(
                b"400 Bad Request", body, [], f"refused a request line of {protocol} (400)"
            )
        if digits[0] == 49:  # "1"
            return None
        return self.version_not_supported(digits.decode("ascii"))

    def no_version(self) -> Refused:
        body = error_body("BadRequest", NO_VERSION_DETAIL)
        cause = "refused a request line without an HTTP version (400)"
        return Refused(b"400 Bad Request", body, [], cause)

    def version_not_supported(self, version: str) -> Refused:
        body = error_body("HTTPVersionNotSupported", VERSION_DETAIL.format(version=version))
        cause = f"refused a request line of HTTP/{version} (505)"
        return Refused(b"505 HTTP Version Not Supported", body, [], cause)

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
            raise self.method_refused() or self.connect_refusal()
        tail = self.line_tail
        if tail is None:
            tail = self.find_line_tail(method)
        parser.version = version = read_version(parser)
        if tail != b"HTTP/1.1":
            refused = self.line_refused(method)
            if refused is not None:
                raise refused
            if version[0] != "1":  # llhttp passes any version of one digit
                raise self.version_not_supported(version)
            if version != "1.0":
                parser.version = "1.1"  # RFC 9110, 2.5: a higher 1.x is served as 1.1
        hosts = self.hosts
        if hosts > 1:
            body = error_body("BadRequest", TWO_HOSTS_DETAIL)
            cause = "refused a request with two Host headers (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
        if not hosts and version != "1.0":
            body = error_body("BadRequest", NO_HOST_DETAIL)
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
            body = error_body("ServiceUnavailable", detail)
            raise Refused(b"503 Service Unavailable", body, [(b"retry-after", b"1")], cause)
        self.body_began = self.last_data
        self.body_received = 0
        self.body_open = True
        self.chunks = None
        HttpToolsProtocol.on_headers_complete(self)

    def on_message_complete(self) -> None:
        self.body_open = False
        HttpToolsProtocol.on_message_complete(self)

    def connect_refusal(self) -> Refused:
        """A CONNECT's refusal, whatever else its head holds (no Host, a malformed target):
        llhttp reads it as an upgrade, after which come a tunnel's bytes (they were read as the
        next request). RFC 9110, 15.6.2: a method the server supports for no resource is a 501."""
        body = error_body("NotImplemented", CONNECT_DETAIL)
        return Refused(b"501 Not Implemented", body, [], "refused a CONNECT (501)")

    def refuse_upgrade(self) -> None:
        """Refuse a request llhttp reads as an upgrade (it stops after it) that the protocol
        cannot serve as HTTP/1.1: one with a body (a CONNECT is refused first). httptools tells
        llhttp to skip the body of such a request: the app would get an empty body, and the
        body's bytes would be read as the next request. `curl --http2` on http:// asks for an
        upgrade on every call."""
        if self.has_body():
            cause = "refused a request asking for an Upgrade with a body (400)"
            raise Refused(
                b"400 Bad Request", error_body("BadRequest", UPGRADE_BODY_DETAIL), [], cause
            )

    def has_body(self) -> bool:
        for name, value in self.headers:
            if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t0")):
                return True
        return False

    def on_response_complete(self) -> None:
        self.waiting_since = self.loop.time()
        held = self.held_error
        if held is not None and not self.transport.is_closing() and not self.pipeline:
            self.server_state.total_requests += 1  # as uvicorn's own, which is not called
            self.send_error(*held)
            self.transport.close()
            return
        HttpToolsProtocol.on_response_complete(self)

    def take_forwarded_host(self) -> None:
        """The first name of the proxy's `X-Forwarded-Host` as `Host` (the one the client
        asked for, where proxies in a chain append theirs): the proxy must set the header, not
        append to the client's. From a loopback peer, only when the real `Host` passes the Host
        rule: else a rebound page would name this machine there."""
        forwarded = next((v for k, v in self.headers if k == b"x-forwarded-host"), None)
        name = (forwarded or b"").split(b",", 1)[0].strip()
        if not name:
            return
        if self.loopback_proxy:
            host = next((v for k, v in self.headers if k == b"host"), None)
            if host is None or not names_this_machine(host, self.allowed_hosts):
                return
        self.headers[:] = [(k, v) for k, v in self.headers if k != b"host"]
        self.headers.append((b"host", name))

    def cut_short(self) -> None:
        """Answer the request in hand 503 (unless the app's answer has begun) and close, before
        its task is cancelled: the app's later answer, if any, goes nowhere."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
            return
        cycle.disconnected = True
        cycle.message_event.set()
        if not cycle.response_started:
            body = error_body("ServiceUnavailable", STOPPING_DETAIL)
            self.send_error(b"503 Service Unavailable", body, [_STOPPING_RETRY_AFTER])
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
        """Refuse a request for its trailers: it was dispatched with its headers. Queued behind
        another's answer, it never starts, and its refusal waits for that answer. In the app, it
        reads a disconnect and is answered unless its answer has begun; then, or once answered,
        the connection is only closed."""
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
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # What the parser itself refused (uvicorn has logged it): its 400 in the shape. A
        # broken body is the request in hand's own; broken headers are a request's behind it.
        # The head's method and line are refused first (`head_refused`): llhttp refuses a
        # method it does not take (a 501), a CONNECT's line or PRI's but in HTTP/2's preface
        # (each a 501 too), and pauses on that preface (`PRI * HTTP/2.0`, the line's 505).
        if self.in_headers:
            refused = self.head_refused()
            if refused is not None:
                self.refuse(refused)
                return
            self.answer_and_close(
                b"400 Bad Request", error_body("BadRequest", BAD_REQUEST_DETAIL), []
            )
            return
        self.send_error(b"400 Bad Request", error_body("BadRequest", BAD_REQUEST_DETAIL))
        self.transport.close()

    def answer_and_close(self, status: bytes, body: bytes, headers: list[Header]) -> None:
        """Answer a request refused before it reached the app, and close: at once, or, pipelined
        behind requests still in the app, once their answers are sent (`on_response_complete`).
        Written at once, it overtook them, and their answers were lost with the connection."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self.held_error = (status, body, headers)
            return
        self.send_error(status, body, headers)
        self.transport.close()
