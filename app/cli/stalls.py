"""The bounds `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py) puts on a client that stalls:
the idle timer, a body's minimum rate and a reader that stops reading.

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
  body the app has not read yet, an `Expect: 100-continue` not answered yet, a refused
  request's body, never read, while its refusal waits for the answers before it), no clock runs:
  a request stalled behind another's answer gets its 408 only once that answer is sent;
- while the client reads none of an answer the transport still holds (a large one fills the
  socket, and uvicorn waits for writing to resume, a close for the bytes to be sent): past it,
  the connection is dropped with them;
- after a refusal, while the client may still be sending the refused request (a body it
  announced, the rest of a header block), or after an answer sent before the body came when the
  client asked for the close (`ClosingAfterBody`): a close with its bytes unread sends an RST,
  and the client's write failed before it read the answer (50 of 50 tries of each shape; urllib
  gave up there, 30 of 30, docs/architecture.md). As nginx's lingering close does, the answer is
  followed by a FIN and what still comes is read and dropped until the client closes,
  `linger_quiet_seconds` (AGMEM_LINGER_QUIET_SECONDS, or the idle timeout if shorter) pass
  without a byte, LINGER_SECONDS in all, or a newcomer finds the connection limit reached (the
  oldest lingering connections make way); past the bytes a refused request can still hold
  (`linger_bytes`), at LINGER_RATE. A 408 is not followed so: its client stalled or trickles
  its bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import sys
from array import array
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.cli.refusals import Header, RefusalLog, error_body
from app.config import Settings
from app.errors import RequestTimeout

# A body's bytes, on average, from its start (or the service's last hold on it) past one idle
# timeout: else a byte each timeout held the connection and the request's task for ever.
# 1 KiB/s (8 kbit/s) is below any link still carrying traffic (2G GPRS: 20 to 40 kbit/s) and
# twice Apache's mod_reqtimeout default (500 B/s); a body of 8 MiB (AGMEM_MAX_BODY_BYTES) at it
# takes 2.3 h, the most a body can hold a connection.
MIN_BODY_RATE = 1024
DEFAULT_IDLE_TIMEOUT_SECONDS: float = Settings.model_fields["request_idle_timeout_seconds"].default
# Apache's wait for a refused client's next byte (its lingering close; AGMEM_LINGER_QUIET_SECONDS),
# and nginx's and Apache's bound on the whole of it, within which an 8 MiB body
# (AGMEM_MAX_BODY_BYTES) still comes whole at 280 KiB/s.
LINGER_QUIET_SECONDS: float = Settings.model_fields["linger_quiet_seconds"].default
LINGER_SECONDS = 30.0
# And the bytes read and dropped: a refused request's rest is at most a body the service takes
# (AGMEM_MAX_BODY_BYTES, its default here) and a head's bound (128 KiB, app/cli/headers.py);
# without one a client sending at full speed had the service read and drop ~12 GiB in 12 s
# (rev-wire25: /health 9-18 ms -> 72-106 ms meanwhile).
DEFAULT_LINGER_BYTES: int = Settings.model_fields["max_body_bytes"].default + 128 * 1024
# Past those bytes, reading goes on at this rate at most, not closed: closed with bytes unread,
# the connection was reset under a client still sending (a 20 MiB upload's 413 was never read,
# its write failed first). At half the body limit a second the rest of such an upload comes
# within LINGER_SECONDS (~128 MiB in all), and a client sending without end costs the service
# what a new request each two seconds would (~12 GiB in 12 s unbounded, rev-wire25).
LINGER_RATE = 4 * 1024 * 1024
# The kernel's receive buffer of a lingering connection (it books twice this): while its reading
# is paused for LINGER_RATE, a client sending at full speed filled an autotuned buffer of ~4.4 MiB
# for up to LINGER_SECONDS (60 such clients: 261 MiB of kernel TCP memory). At 64 KiB a loopback
# client still sends at ~GB/s, and one 50 ms away at ~1.3 MiB/s: a 20 MiB upload's rest in 15 s.
LINGER_RECEIVE_BUFFER = 64 * 1024
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, drops what is unsent
_SIOCOUTQ = 0x5411  # Linux: the bytes of a TCP socket's send queue the peer has not acknowledged


class ClosingAfterBody(asyncio.Transport):
    """The transport a request's answer is written to when its client asked for the close
    (`Connection: close`, HTTP/1.0) and sends a body: uvicorn closes once the answer is complete,
    and an answer sent before the body came (a 404, or a 413 for a `Content-Length` past the
    limit) was reset with the body unread (urllib raised `Connection reset by peer` for 30 of 30
    such 404s). Its close lingers then (`close_lingering`)."""

    def __init__(self, protocol: StallBoundProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.transport: asyncio.Transport = protocol.transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.protocol.finished()

    def close(self) -> None:
        if self.protocol.body_coming():
            self.protocol.close_lingering()
        else:
            self.transport.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)


class StallBoundProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with every state of a connection bounded by `idle_timeout`
    (the module's docstring); the protocol over it stamps the times (`last_data`,
    `message_began`, `waiting_since`, `in_headers`) as requests come, and arms `idle_timer`."""

    idle_timeout = DEFAULT_IDLE_TIMEOUT_SECONDS
    linger_bytes = DEFAULT_LINGER_BYTES
    linger_quiet_seconds = LINGER_QUIET_SECONDS
    refusals = RefusalLog()
    # A refusal pipelined behind a request still in the app, sent once its answer is (set by
    # the protocol over it): its request's body, never to be read, is not timed as one.
    held_error: tuple[bytes, bytes, list[Header]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_headers = False  # a request's first bytes came, its headers are not complete
        self.body_began = 0.0  # when the body's rate is counted from
        self.body_received = 0  # the message's body bytes (rated from `body_began`)
        # A byte received stamps the time; the one timer per connection, armed when it is made,
        # checks the stamps when it fires: nothing per request but these attributes' writes.
        self.last_data = 0.0
        self.message_began = 0.0  # the first byte of the request whose headers are coming
        self.waiting_since = 0.0  # the connection's start or the last answer's end
        # The answer's bytes the service still held (transport and kernel) when last seen to
        # shrink, and when.
        self.write_mark: tuple[float, int] | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        # When the connection's last answer was followed by its FIN (`close_lingering`): what
        # comes after it is read and dropped.
        self.lingering_since: float | None = None
        self.dropped = 0  # the bytes read and dropped since

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        super().connection_lost(exc)

    def on_body(self, body: bytes) -> None:
        self.body_received += len(body)
        HttpToolsProtocol.on_body(self, body)  # by name: the hot path's (app/cli/wire.py)

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

    def body_coming(self) -> bool:
        """Whether a message's body is still coming (the protocol over it says)."""
        return False

    def finished(self) -> bool:
        """Whether the connection answers nothing more: closed, or lingering after its last."""
        return self.lingering_since is not None or self.transport.is_closing()

    def close_lingering(self) -> None:
        """Close after a refusal, the answer written: its FIN first, and the client's bytes that
        still come read and dropped for a while (the module's docstring), so that it reads the
        answer rather than an RST."""
        transport = self.transport
        if self.finished():
            return
        cycle = self.cycle
        if cycle is not None:
            # A request dispatched before its refusal reads a disconnect; the `100 Continue` its
            # first read of the body writes would come after the FIN.
            cycle.waiting_for_100_continue = False
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        connection = transport.get_extra_info("socket")
        if connection is not None:
            with contextlib.suppress(OSError):  # a smaller buffer is a saving, not a need
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LINGER_RECEIVE_BUFFER)
        self.lingering_since = self.loop.time()
        self.flow.resume_reading()  # held back behind an answer, the client's bytes wait too
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = self.loop.call_later(self.linger_quiet(), self.idle_check)

    def drop(self, data: bytes) -> None:
        """A lingering connection's read, dropped: past `linger_bytes`, read at LINGER_RATE at
        most, its reading paused for as long as the bytes read are ahead of that rate."""
        self.dropped += len(data)
        since = self.lingering_since
        if since is None or self.dropped <= self.linger_bytes:
            return
        allowed = self.linger_bytes + LINGER_RATE * (self.loop.time() - since)
        if self.dropped > allowed and not self.flow.read_paused:
            self.flow.pause_reading()
            self.loop.call_later((self.dropped - allowed) / LINGER_RATE, self.resume_lingering)

    def resume_lingering(self) -> None:
        if self.transport.is_closing():
            return
        # The client's quiet is counted from here: while paused, nothing it sent was read.
        self.last_data = self.loop.time()
        self.flow.resume_reading()

    def linger_quiet(self) -> float:
        return min(self.linger_quiet_seconds, self.idle_timeout)

    def release_lingering(self) -> None:
        """At the connection limit, this one included, close lingering connections, the oldest
        first, until it is within it: else a newcomer got its 503 while clients a refusal had
        closed on still sent (their quiet timers are the next look at the limit: 28 s of 503s
        for 10 clients trickling a byte each 1.5 s at AGMEM_MAX_CONNECTIONS=10)."""
        limit = self.limit_concurrency
        if limit is None:
            return
        excess = len(self.connections) - limit + 1
        if excess <= 0:
            return
        lingering = sorted(
            (
                (connection.lingering_since, id(connection), connection)
                for connection in self.connections
                if isinstance(connection, StallBoundProtocol)
                and connection.lingering_since is not None
                and not connection.transport.is_closing()
            ),
            key=lambda entry: (entry[0], entry[1]),
        )
        for _, _, connection in lingering[:excess]:
            connection.transport.close()
            # Out of the count at once: uvloop reports the close (`connection_lost`) only after
            # the loop's next reads, the newcomer's request among them, which got its 503.
            self.connections.discard(connection)

    def linger_check(self, now: float, since: float) -> None:
        """Close a lingering connection once its client has been quiet for `linger_quiet`, it
        has lingered LINGER_SECONDS, or the service has its limit of connections open (a
        newcomer at the limit closes lingering ones at once: `release_lingering`)."""
        ends = min(self.last_data + self.linger_quiet(), since + LINGER_SECONDS)
        limit = self.limit_concurrency
        if now < ends and (limit is None or len(self.connections) < limit):
            self.idle_timer = self.loop.call_later(ends - now, self.idle_check)
            return
        self.transport.close()
        self.idle_timer = self.loop.call_later(self.idle_timeout, self.idle_check)  # as closed

    def shutdown(self) -> None:
        # uvicorn's graceful stop waits for every connection to close: a lingering one at once.
        if self.lingering_since is not None:
            self.transport.close()
            return
        HttpToolsProtocol.shutdown(self)

    def idle_check(self) -> None:
        now = self.loop.time()
        if self.write_stalled(now):
            return
        if self.transport.is_closing():
            return
        lingering = self.lingering_since
        if lingering is not None:
            self.linger_check(now, lingering)
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
        elif (
            cycle.more_body
            and not self.flow.read_paused
            and not cycle.waiting_for_100_continue
            and self.held_error is None
        ):
            since = self.last_data  # its body
            rated = self.body_began + self.idle_timeout + self.body_received / MIN_BODY_RATE
        else:
            # The app works on a request, or the service holds the client back, or a refusal
            # waits for the answers before it: the refused request was read as a body that
            # stopped coming, a 408 sent in their midst and those answers lost. A client that
            # reads none of them is still bounded (`write_stalled`).
            since = None
        if since is None:
            # A body held back counts its rate from here: bytes that wait in the kernel's
            # buffers meanwhile come at once when the hold ends.
            # (`body_received` stays the message's count: where its body ends is read from it.)
            self.body_began = now - self.body_received / MIN_BODY_RATE
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
            self.send_error(b"408 Request Timeout", error_body(RequestTimeout(detail)))
        # Closed at once, not lingering (`close_lingering`): the client stalled or trickles its
        # bytes, which a linger would read for up to LINGER_SECONDS more.
        self.transport.close()

    def stopped_coming(self, why: str) -> str:
        return (
            f"the request stopped coming: {why} (AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS); the "
            "connection is closed"
        )

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
