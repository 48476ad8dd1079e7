"""`agmem serve`'s HTTP/1.1 protocol: uvicorn's, with its refusals in the service's error shape,
a bound on a client that stops sending, and one Host per request.

uvicorn answers what it cannot parse itself, before the app sees anything, with a plain-text
`400 Invalid HTTP request received.`: a malformed request line, header or chunk, a bad,
negative or conflicting `Content-Length`, both `Content-Length` and `Transfer-Encoding`, a URL
over 64 KiB (a long `prompt` on `GET /api/context`). A client that reads every error as
`{"error", "detail"}` failed to parse that one; the protocol below sends the same 400 in the
shared shape and still closes the connection, as uvicorn does (the parser's state is lost).

uvicorn times a connection out only between requests (its keep-alive, 5 s), and any byte
cancels that timer until the next answer completes. A client that sent half a header block, or
headers and part of the body it announced (a `Content-Length` not reached, a chunked body that
stops), held its connection, and with a body its request task, for as long as it kept the socket
open; so did one that sent a blank line after an answer, or a byte of a body the answer did not
read (a 404, 401 or 421 answered before the body came). Here every state of a connection is
bounded by the idle timeout (AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS):
- within a request's body, each byte starts the clock again; past it, 408 and close. Its
  headers must come whole within the timeout of their first byte (a byte at a time held the
  connection for as long as bytes came); a body must also average MIN_BODY_RATE past its first
  timeout (a byte each timeout held it for ever), a rate no working link falls below;
- between requests (from the connection's start or an answer's end to the next request's first
  byte), bytes that begin no request do not count: past it, the connection is closed;
- while the app works, or the service itself stops reading (a request queued behind another, a
  body the app has not read yet, an `Expect: 100-continue` not answered yet), no clock runs: a
  request stalled behind another's answer gets its 408 only once that answer is sent;
- while the client reads none of an answer the transport still holds (a large one fills the
  socket, and uvicorn waits for writing to resume, a close for the bytes to be sent): past it,
  the connection is dropped with them.

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
has no headers, so that is no request of any version. Headers past MAX_HEADERS or
MAX_HEADER_BYTES are a 431 (httptools bounds neither). A refusal pipelined behind a request
still in the app waits for that one's answer.

uvicorn's `data_received` logs `Invalid HTTP request received.` for every parser error, which
named neither a 503 at the limit nor a Host refusal. It stays uvicorn's: the parser it feeds
(`RefusingParser`) answers a refusal of the callbacks here, logging its cause, one line per cause
at most every REFUSAL_LOG_SECONDS and the count of the rest when that window ends.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import json
import logging
import socket
import struct
import sys
from array import array
from collections.abc import Iterable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.middleware import allowed_host_names, names_this_machine

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
NO_VERSION_DETAIL = (
    "the request line has no HTTP version (HTTP/0.9's shape, `GET /health` alone), which this "
    "service does not serve: send `GET /health HTTP/1.1` with the address it is for, e.g. "
    "`Host: 127.0.0.1:37777`"
)
# httptools bounds neither the count nor the size of headers (100,000 of them, or one of
# 100 MiB, were buffered and parsed). 64 KiB and 100 are above what any client of this service
# sends (a browser's cookies stay under 8 KiB; Apache allows 100 fields of 8 KiB, nginx 32 KiB
# in all). The head as it comes (request line and headers) may add a URL of 64 KiB, the
# parser's own bound: past both, a block that never ends is cut as it grows.
MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024
MAX_HEAD_BYTES = 2 * MAX_HEADER_BYTES
HEADERS_DETAIL = (
    "the request's headers are over 64 KiB or 100 headers (or its request line and headers "
    "over 128 KiB): send large data in a request's body"
)
# A body's bytes, on average, from its start (or the service's last hold on it) past one idle
# timeout: else a byte each timeout held the connection and the request's task for ever.
# 1 KiB/s (8 kbit/s) is below any link still carrying traffic (2G GPRS: 20 to 40 kbit/s) and
# twice Apache's mod_reqtimeout default (500 B/s); a body of 8 MiB (AGMEM_MAX_BODY_BYTES) at it
# takes 2.3 h, the most a body can hold a connection.
MIN_BODY_RATE = 1024
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
DEFAULT_IDLE_TIMEOUT_SECONDS = 60.0  # as Settings.request_idle_timeout_seconds
REFUSAL_LOG_SECONDS = 10.0
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, drops what is unsent
_SIOCOUTQ = 0x5411  # Linux: the bytes of a TCP socket's send queue the peer has not acknowledged

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Header = tuple[bytes, bytes]


def _error_body(error: str, detail: str) -> bytes:
    return json.dumps({"error": error, "detail": detail}).encode()


def _as_compared(network: Network) -> Network:
    """`::ffff:10.0.0.1` as `10.0.0.1`: an IPv4 peer of a service bound to `::` is compared as
    IPv4, so an IPv4-mapped entry never matched."""
    if isinstance(network, ipaddress.IPv4Network) or network.prefixlen < 96:
        return network
    mapped = network.network_address.ipv4_mapped
    return network if mapped is None else ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")


class Refused(httptools.HttpParserError):
    """A request refused from a parser callback, which stops the parser: its answer, and the
    cause the log names."""

    def __init__(self, status: bytes, body: bytes, headers: list[Header], cause: str) -> None:
        super().__init__(cause)
        self.status = status
        self.body = body
        self.headers = headers
        self.cause = cause


class RefusingParser(httptools.HttpRequestParser):
    """httptools' parser, answering a `Refused` of the protocol's callbacks itself: uvicorn's
    `data_received` logs "Invalid HTTP request received." for any parser error, which names
    none of these causes. It sees a refusal only as the parser's `HttpParserCallbackError`,
    with the callback's exception as its context."""

    def __init__(self, protocol: JsonErrorsProtocol) -> None:
        super().__init__(protocol)
        self.protocol = protocol

    def feed_data(self, data: bytes | bytearray | memoryview | array[int]) -> None:
        try:
            super().feed_data(data)
        except httptools.HttpParserCallbackError as error:
            refused = error.__context__
            if not isinstance(refused, Refused):
                raise
            self.protocol.refuse(refused)


class RefusalLog:
    """One log line per cause at most every REFUSAL_LOG_SECONDS (shared by the connections): a
    flood of refusals is a count. The count is logged when its window ends, by one timer per
    cause (not per connection), or when the server stops (`flush`); the window it closes begins
    the next, so a steady flood is one line per window."""

    def __init__(self) -> None:
        self.window_began: dict[str, float] = {}
        self.quiet: dict[str, int] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.logger = logging.getLogger("uvicorn.error")

    def note(self, logger: logging.Logger, loop: asyncio.AbstractEventLoop, cause: str) -> None:
        now = loop.time()
        began = self.window_began.get(cause)
        if began is None or now - began >= REFUSAL_LOG_SECONDS:
            self.window_began[cause] = now
            logger.warning("%s", cause)
            return
        self.quiet[cause] = self.quiet.get(cause, 0) + 1
        if cause not in self.timers:
            self.logger = logger
            ends = began + REFUSAL_LOG_SECONDS - now
            self.timers[cause] = loop.call_later(ends, self.window_ended, cause, loop)

    def window_ended(self, cause: str, loop: asyncio.AbstractEventLoop) -> None:
        self.timers.pop(cause, None)
        self.window_began[cause] = loop.time()
        self.log_count(cause)

    def log_count(self, cause: str) -> None:
        quiet = self.quiet.pop(cause, 0)
        if quiet:
            self.logger.warning("%s: %d more since the line before", cause, quiet)

    def flush(self) -> None:
        """The counts not logged yet, as the server stops."""
        for cause, timer in list(self.timers.items()):
            timer.cancel()
            del self.timers[cause]
            self.log_count(cause)


class JsonErrorsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol as `agmem serve` ran it (httptools, which uvicorn[standard]
    installs, is what its "auto" picks), with its 400 as JSON, a 408 for a stalled request, a
    bound on every idle state, a 503 in the shape past the connection limit, a 400 for two Host
    headers and a trusted proxy's `X-Forwarded-Host`. `configured` makes the class with the
    settings."""

    idle_timeout = DEFAULT_IDLE_TIMEOUT_SECONDS
    trusted_proxies: tuple[Network, ...] = ()
    allowed_hosts: frozenset[str] = frozenset()
    refusals = RefusalLog()

    @classmethod
    def configured(
        cls,
        *,
        idle_timeout: float,
        trusted_proxies: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
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
            "refusals": RefusalLog(),
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
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn sets it
        self.in_headers = False  # a request's first bytes came, its headers are not complete
        self.head_bytes = 0  # bytes read in the reads after the first of a head not complete
        self.body_began = 0.0  # when the body's rate is counted from
        self.body_received = 0  # ... and its bytes since
        # A byte received stamps the time; the one timer per connection, armed when it is made,
        # checks the stamps when it fires: nothing per request but these attributes' writes.
        self.last_data = 0.0
        self.message_began = 0.0  # the first byte of the request whose headers are coming
        self.waiting_since = 0.0  # the connection's start or the last answer's end
        # The answer's bytes the service still held (transport and kernel) when last seen to
        # shrink, and when.
        self.write_mark: tuple[float, int] | None = None
        self.behind_proxy = False  # the peer is a trusted proxy
        self.loopback_proxy = False  # ... on this machine, where a browser connects from too
        self.idle_timer: asyncio.TimerHandle | None = None
        # A refusal pipelined behind a request still in the app, sent once its answer is.
        self.held_error: tuple[bytes, bytes, list[Header]] | None = None

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

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        if self.held_error is not None:
            return  # behind a refused request: the parser lost its place, nothing more is read
        if self.in_headers:
            self.head_bytes += len(data)
        super().data_received(data)
        # Counted on the reads after the first, the head is bounded as it comes: its headers'
        # own check comes only once they are all there.
        if self.in_headers and self.head_bytes > MAX_HEAD_BYTES:
            if self.held_error is None and not self.transport.is_closing():
                self.refuse(self.headers_too_large())

    def headers_too_large(self) -> Refused:
        body = _error_body("RequestHeaderFieldsTooLarge", HEADERS_DETAIL)
        cause = "refused a request whose headers are over 64 KiB or 100 headers (431)"
        return Refused(b"431 Request Header Fields Too Large", body, [], cause)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_headers = True
        self.head_bytes = 0
        self.message_began = self.last_data

    def on_headers_complete(self) -> None:
        self.in_headers = False
        hosts = size = 0
        for name, value in self.headers:
            hosts += name == b"host"
            size += len(name) + len(value)
        if size > MAX_HEADER_BYTES or len(self.headers) > MAX_HEADERS:
            raise self.headers_too_large()
        version = self.parser.get_http_version()
        if version == "0.9":  # llhttp's name for a request line without a version
            # HTTP/0.9 has no headers: with a Host it was served as HTTP/1.x.
            body = _error_body("BadRequest", NO_VERSION_DETAIL)
            cause = "refused a request line without an HTTP version (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
        if hosts > 1:
            body = _error_body("BadRequest", TWO_HOSTS_DETAIL)
            cause = "refused a request with two Host headers (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
        if not hosts and version != "1.0":
            body = _error_body("BadRequest", NO_HOST_DETAIL)
            cause = "refused an HTTP/1.1 request without a Host header (400)"
            raise Refused(b"400 Bad Request", body, [], cause)
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
            body = _error_body("ServiceUnavailable", detail)
            raise Refused(b"503 Service Unavailable", body, [(b"retry-after", b"1")], cause)
        self.body_began = self.last_data
        self.body_received = 0
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.body_received += len(body)
        super().on_body(body)

    def on_response_complete(self) -> None:
        self.waiting_since = self.loop.time()
        held = self.held_error
        if held is not None and not self.transport.is_closing() and not self.pipeline:
            self.server_state.total_requests += 1  # as uvicorn's own, which is not called
            self.send_error(*held)
            self.transport.close()
            return
        super().on_response_complete()

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

    def pause_writing(self) -> None:
        self.write_mark = (self.loop.time(), self.unsent(self.transport.get_write_buffer_size()))
        super().pause_writing()

    def unsent(self, buffered: int) -> int:
        """The answer's bytes the client has not taken: the transport's and the kernel's. The
        transport's buffer moves only when the kernel's send queue (which grows to megabytes)
        has drained by about a third, so a client reading slowly but steadily left it still for
        longer than the timeout; the kernel's queue shrinks with every read."""
        if sys.platform != "linux":
            return buffered  # no SIOCOUTQ: the transport's buffer is all there is to watch
        connection = self.transport.get_extra_info("socket")
        if connection is None:
            return buffered
        try:
            queued = array("i", [0])
            fcntl.ioctl(connection.fileno(), _SIOCOUTQ, queued)
        except OSError:
            return buffered
        return buffered + queued[0]

    def idle_check(self) -> None:
        now = self.loop.time()
        if self.write_stalled(now):
            return
        if self.transport.is_closing():
            return
        cycle = self.cycle
        busy = cycle is not None and not cycle.response_complete
        rated = None  # in a body: when its bytes fall short of MIN_BODY_RATE
        if self.in_headers and not busy:
            # The whole header block within the timeout of its first byte: a byte each time short
            # of it held the connection for ever. One pipelined behind another's answer counts
            # from that answer's end.
            since = max(self.message_began, self.waiting_since)
        elif self.in_headers:
            since = None  # its turn comes after the answer before it, which the app works on
        elif cycle is None or cycle.response_complete:
            since = self.waiting_since  # between requests: a byte that begins none not counted
        elif cycle.more_body and not self.flow.read_paused and not cycle.waiting_for_100_continue:
            since = self.last_data  # its body
            rated = self.body_began + self.idle_timeout + self.body_received / MIN_BODY_RATE
        else:
            since = None  # the app works on a request, or the service holds the client back
        if since is None:
            # A body held back counts its rate from here: bytes that wait in the kernel's
            # buffers meanwhile come at once when the hold ends.
            self.body_began, self.body_received = now, 0
            self.idle_timer = self.loop.call_later(self.idle_timeout, self.idle_check)
            return
        wait = self.idle_timeout - (now - since)
        if rated is not None and cycle is not None:
            if rated <= now:
                self.send_slow_body_408(cycle.response_started)
                self.idle_timer = self.loop.call_later(self.idle_timeout, self.idle_check)
                return
            wait = min(wait, rated - now)
        if wait > 0 and not self.over_limit():
            self.idle_timer = self.loop.call_later(wait, self.idle_check)
            return
        if self.in_headers:
            self.send_408(
                self.stopped_coming(f"its headers did not all come within {self.idle_timeout:g} s")
            )
        elif cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            self.send_408(
                self.stopped_coming(f"no byte of its body came for {self.idle_timeout:g} s"),
                cycle_started=cycle.response_started,
            )
        # An answer the client has not read yet keeps a closed transport open: watched still.
        self.idle_timer = self.loop.call_later(self.idle_timeout, self.idle_check)

    def write_stalled(self, now: float) -> bool:
        """Whether the service waits on the client to read its answer, watching it (the timer
        is armed again): past the idle timeout without the client reading any, the connection
        is dropped with the bytes. Else a client that stopped reading a large answer held the
        connection for good (uvicorn waits for writing to resume, a close for the bytes to be
        sent), and a streamed answer's task with it.

        Only while writing is paused or the transport closing: then nothing is added to the
        buffer, so fewer bytes unsent (`unsent`) is the client reading. Otherwise a stream the
        client reads as fast as it comes can hold bytes at every look, refilled in between."""
        buffered = self.transport.get_write_buffer_size()
        if not buffered or not (self.flow.write_paused or self.transport.is_closing()):
            self.write_mark = None
            return False
        unsent = self.unsent(buffered)
        mark = self.write_mark
        if mark is None or unsent < mark[1]:
            mark = self.write_mark = (now, unsent)
        elif now - mark[0] >= self.idle_timeout:
            cause = (
                f"closed connections whose client stopped reading its answer for "
                f"{self.idle_timeout:g} s (AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS)"
            )
            self.refusals.note(self.logger, self.loop, cause)
            # Reset, not closed: the kernel would otherwise keep the socket, and the bytes it
            # holds, sending them to a window that stays shut.
            connection = self.transport.get_extra_info("socket")
            if connection is not None:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self.transport.abort()
            return True
        self.idle_timer = self.loop.call_later(mark[0] + self.idle_timeout - now, self.idle_check)
        return True

    def over_limit(self) -> bool:
        limit = self.limit_concurrency
        return limit is not None and self.cycle is None and len(self.connections) >= limit

    def send_slow_body_408(self, cycle_started: bool) -> None:
        cause = "refused a request whose body came slower than 1 KiB/s (408)"
        self.refusals.note(self.logger, self.loop, cause)
        detail = (
            "the request's body came slower than 1 KiB/s on average past its first "
            f"{self.idle_timeout:g} s (AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS); the connection is "
            "closed"
        )
        self.send_408(detail, cycle_started=cycle_started)

    def send_408(self, detail: str, *, cycle_started: bool = False) -> None:
        """Answer 408 (unless the app's answer has begun) and close; the request's task then
        reads a disconnect and its answer goes nowhere."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if not cycle_started:
            self.send_error(b"408 Request Timeout", _error_body("RequestTimeout", detail))
        self.transport.close()

    def stopped_coming(self, why: str) -> str:
        return (
            f"the request stopped coming: {why} (AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS); the "
            "connection is closed"
        )

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
            body = _error_body("ServiceUnavailable", STOPPING_DETAIL)
            self.send_error(b"503 Service Unavailable", body, [_STOPPING_RETRY_AFTER])
        self.transport.close()

    def refuse(self, refused: Refused) -> None:
        """Answer a request refused by a callback (`RefusingParser`), log its cause and close."""
        self.refusals.note(self.logger, self.loop, refused.cause)
        self.answer_and_close(refused.status, refused.body, refused.headers)

    def send_400_response(self, msg: str) -> None:
        # What the parser itself refused (uvicorn has logged it): its 400 in the shape. A
        # broken body is the request in hand's own; broken headers are a request's behind it.
        if self.in_headers:
            self.answer_and_close(
                b"400 Bad Request", _error_body("BadRequest", BAD_REQUEST_DETAIL), []
            )
            return
        self.send_error(b"400 Bad Request", _error_body("BadRequest", BAD_REQUEST_DETAIL))
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

    def send_error(self, status: bytes, body: bytes, headers: Iterable[Header] = ()) -> None:
        head = [b"HTTP/1.1 " + status + b"\r\n"]
        defaults = self.server_state.default_headers  # date and server, as uvicorn sends them
        head += [name + b": " + value + b"\r\n" for name, value in (*defaults, *headers)]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
