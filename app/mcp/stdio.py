"""The client's lines for `agmem mcp`, read by a daemon thread so that a signal ends it at once.

The SDK's stdio transport reads stdin with `readline` in an AnyIO worker thread, which is not a
daemon thread: after SIGTERM (how a client stops the server it launched) the process waited in
the interpreter's exit for that read, that is until the client closed the pipe, and only then
stopped the embedded PostgreSQL. A daemon thread's pending read does not hold the exit up.

SIGTERM (or Ctrl-C) ends the input as its end does (`sigterm_ends_input`): the SDK then ends
the server its own way, from the event loop.

At the end of the input the calls already read are answered before the server ends (`Calls`),
within a bound: the SDK cancelled them, and `agmem mcp < calls.jsonl` (or a client that writes
its requests and closes the pipe) had every call answered "Connection closed".
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import math
import os
import re
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Self

import anyio
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp.types import (
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from app.entry import end_at_once, end_by_deadline, signalled
from app.mcp.refusals import refusal, refused_id, too_large
from app.mcp.wire import MESSAGE_TEXT, surrogates_cleaned

# How long the calls read before the end of the input may take to be answered; then the SDK
# cancels what is left ("Connection closed"). After SIGTERM, shorter: the SDK's own client
# kills the server 2 s after its SIGTERM (the MCP spec's stdio shutdown: close the input, wait,
# SIGTERM, wait, SIGKILL), and the embedded PostgreSQL is still to be stopped.
ANSWER_AT_END_SECONDS = 10.0
ANSWER_AFTER_SIGTERM_SECONDS = 0.5

Received = SessionMessage | Exception

# What a line may hold beyond a call's arguments (AGMEM_MAX_BODY_BYTES): the JSON-RPC envelope.
FRAMING_SLACK_BYTES = 64 * 1024
# The size of the pieces a line over the bound is read and dropped in.
DISCARD_PIECE_BYTES = 64 * 1024
# The head of a line over the bound kept to find its id in.
HEAD_BYTES = 4096
# The id of a message whose members before it are plain strings ("jsonrpc", "method"), as
# clients write them: found in the head without parsing the line. An id after `params` is not
# looked for (a key "id" in the arguments is no message's id): the refusal then has none.
_LEADING_ID = re.compile(
    rb'\A\s*\{\s*(?:"[A-Za-z]+"\s*:\s*"[^"\\]*"\s*,\s*)*"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")\s*[,}]'
)


@dataclass(frozen=True)
class TooLong:
    """A line over the bound, read in pieces and dropped: its size and its id, if found."""

    size: int
    id: int | str | None


def leading_id(head: bytes) -> int | str | None:
    """The JSON-RPC id at the start of a message's text `head`, or None."""
    found = _LEADING_ID.match(head)
    if found is None:
        return None
    value = json.loads(found.group(1))
    return value if isinstance(value, int | str) else None


def read_line(stream: Any, limit: int) -> bytes | TooLong:
    """The next line of `stream` (b"" at its end), or, for one over `limit` bytes, the `TooLong`
    it was, the rest of it read in pieces and dropped up to its newline."""
    line: bytes = stream.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    size = len(line)
    head = line[:HEAD_BYTES]
    del line
    while piece := stream.readline(DISCARD_PIECE_BYTES):
        size += len(piece)
        if piece.endswith(b"\n"):
            break
    return TooLong(size, leading_id(head))


@dataclass
class Calls:
    """The client's requests that the server has read and not yet answered."""

    handed: int = 0  # lines handed to the SDK's transport
    taken: int = 0  # messages (or unreadable lines) the SDK's dispatcher has taken
    unanswered: set[Any] = field(default_factory=set)
    # When the wait for them ends at the latest (time.monotonic()): set at the end of the input,
    # brought in by a signal, even one that comes during that wait.
    give_up_at: float = math.inf
    # The SDK's stream of answers, once it is open: a line refused before the SDK reads it is
    # answered there.
    writer: WriteStream[SessionMessage] | None = None
    writer_set: anyio.Event = field(default_factory=anyio.Event)

    def took(self, item: Received) -> None:
        self.taken += 1
        if not isinstance(item, SessionMessage):
            return
        message = item.message
        if isinstance(message, JSONRPCRequest):
            self.unanswered.add(message.id)
        elif (
            isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled"
        ):
            # The SDK answers no call its client cancelled (as the spec says).
            request = (message.params or {}).get("requestId")
            if isinstance(request, int | str):
                self.unanswered.discard(request)

    def answered(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.unanswered.discard(message.id)

    async def refuse(self, line: TooLong, limit: int) -> None:
        """Answer a line over the bound with a JSON-RPC error (its id, if found, else null),
        on the SDK's stream of answers."""
        await self.send_error(line.id, too_large(line.size, limit))

    async def send_error(self, request_id: int | str | None, error: ErrorData) -> None:
        """Send a JSON-RPC error on the SDK's stream of answers."""
        await self.writer_set.wait()
        assert self.writer is not None
        answer = SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
        try:
            await self.writer.send(answer)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The SDK's writer has ended: on the client's closed stdout (its BrokenPipeError
            # ends the server as `mcp.stdio.client_gone`), or with the server. Nobody is left
            # to answer; raised here, it ended `agmem mcp` with exit 1 and a traceback.
            return

    def answer_within(self, seconds: float) -> None:
        self.give_up_at = min(self.give_up_at, time.monotonic() + seconds)

    async def all_answered(self) -> None:
        """Return once every call read is answered, or at `give_up_at`."""
        # Polled, and only at the end: counting here costs the calls nothing.
        while (self.taken < self.handed or self.unanswered) and time.monotonic() < self.give_up_at:
            await anyio.sleep(0.005)

    def requests(self, stream: ReadStream[Received]) -> ReadStream[Received]:
        return _Requests(stream, self)

    def answers(self, stream: WriteStream[SessionMessage]) -> WriteStream[SessionMessage]:
        self.writer = _Answers(stream, self)
        self.writer_set.set()
        return self.writer


class _Wrapping:
    """A stream of the SDK's, wrapped: closing it closes the SDK's."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Requests(_Wrapping):
    """The SDK's stream of the client's messages, each noted in `Calls` as the dispatcher takes
    it."""

    def __init__(self, inner: ReadStream[Received], calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    @property
    def last_context(self) -> object:
        # The dispatcher runs each call in the context its sender had, found here by name.
        return getattr(self.inner, "last_context", None)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def receive(self) -> Received:
        item = await self.inner.receive()
        self.calls.took(item)
        if isinstance(item, Exception):
            # A line the SDK could not parse, which it only logs: JSON-RPC answers it (with its
            # id where one can be read, else null).
            await self.calls.send_error(refused_id(item), refusal(item))
        return item

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Received:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _Answers(_Wrapping):
    """The SDK's stream of messages to the client, each answer noted in `Calls` once the writer
    has it (it writes what it has taken before it ends)."""

    def __init__(self, inner: WriteStream[SessionMessage], calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    async def send(self, item: SessionMessage, /) -> None:
        await self.inner.send(item)
        self.calls.answered(item)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def client_lines(calls: Calls, limit: int) -> AsyncIterator[AsyncIterator[str]]:
    """The lines on stdin, as the SDK's transport reads them (UTF-8, undecodable bytes replaced),
    with their lone surrogate escapes cleaned as over HTTP; SIGTERM ends them. Each line handed
    over is counted in `calls`, and once they end the calls read are let answer.

    A line over `limit` bytes is not read whole: it is dropped as it is read, and answered with
    a JSON-RPC error (`Calls.refuse`). Read whole, a 60 MB line took the server to ~792 MB of
    memory before the arguments' own bound refused the call.

    While they are read, fd 0 is the null device, as the SDK arranges it, so that nothing else
    in the process or its children reads the protocol; it is given back at the end."""
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    loop = asyncio.get_running_loop()
    handed: asyncio.Queue[str | TooLong | None] = asyncio.Queue()
    # One line at a time: a client writing faster than the server answers waits, as before.
    taken = threading.Semaphore(1)

    def hand_over(line: str | TooLong | None) -> bool:
        try:
            loop.call_soon_threadsafe(handed.put_nowait, line)
        except RuntimeError:  # the server has ended, its loop with it
            return False
        return True

    def read() -> None:
        # Never closed: this thread may still be blocked on it when the process exits.
        with open(wire, "rb", closefd=False) as stream:
            while got := read_line(stream, limit):
                # A lone surrogate's escape made the SDK drop the line: the call had no answer.
                line = (
                    surrogates_cleaned(got).decode("utf-8", errors="replace")
                    if isinstance(got, bytes)
                    else got
                )
                taken.acquire()
                if not hand_over(line):
                    return
        hand_over(None)

    async def lines() -> AsyncIterator[str]:
        while (line := await handed.get()) is not None:
            taken.release()
            if isinstance(line, TooLong):
                await calls.refuse(line, limit)
                continue
            if not line.strip():
                # No message, so no answer: the Parse error of an unparseable line is not
                # for the blank line a client may write between messages.
                continue
            calls.handed += 1
            # In the SDK's reader's context, which each call it sends is run in.
            MESSAGE_TEXT.set(line)
            yield line
        calls.answer_within(ANSWER_AT_END_SECONDS)
        await calls.all_answered()

    def end_by_signal() -> None:
        # A SIGTERM during the wait at the end of the input cuts it too: the spec's client sends
        # it 2 s after closing the input, and its SIGKILL 2 s later, before a 10 s wait ended.
        calls.answer_within(ANSWER_AFTER_SIGTERM_SECONDS)
        handed.put_nowait(None)

    threading.Thread(target=read, name="mcp-stdin", daemon=True).start()
    try:
        with sigterm_ends_input(end_by_signal):
            yield lines()
    finally:
        os.dup2(wire, 0)


@contextmanager
def sigterm_ends_input(end_input: Callable[[], None]) -> Iterator[None]:
    """While serving, SIGTERM or Ctrl-C calls `end_input` from the event loop; a second ends at
    once.

    SIGTERM raised `Terminated` wherever the main thread was. Where that was a finalizer (the
    connection pool's reset of a connection a cancelled call left, run by the garbage
    collector), Python only printed it ("Exception during reset or similar") and the server
    went on answering its client's calls, at full CPU under a flood of them, until the exit
    deadline (2 of 15 SIGTERMs during a flood); raised in a tool's task, it left the SDK's task
    groups to unwind it, exit 1 with their ExceptionGroup's traceback. Ctrl-C cancelled
    asyncio's main task, which the SDK's tasks unwound with BrokenResourceError: exit 1 and that
    traceback, 6 of 6 during a flood.

    Python runs the handler in the main thread when that thread next runs Python code. A signal
    that landed as the event loop went to sleep in epoll_wait (after its last look at the
    signals, before the system call) woke nothing: with an external database nothing else wakes
    the loop, and the server slept on until its client closed stdin (a CI flake of round 17; 2
    of 45,000 signals in a bare asyncio loop). The signal's number written to a socket the loop
    watches (`signal.set_wakeup_fd`, by the C-level handler, whichever thread takes the signal)
    wakes it, and the handler then runs."""
    loop = asyncio.get_running_loop()
    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            end_at_once(signum)
        stopping = True
        signalled()  # one more while the embedded server stops at exit stops it at once
        end_by_deadline(signum)
        loop.call_soon_threadsafe(end_input)

    woken, wake = socket.socketpair()
    woken.setblocking(False)
    wake.setblocking(False)
    loop.add_reader(woken, _drain, woken)
    previous = {signum: signal.signal(signum, on_signal) for signum in _ENDING}
    # The wake-up fd after our handlers and back before theirs: a handler put back can raise
    # (the exit deadline's Terminated), at once if a signal lands then, and must not leave
    # Python writing each later signal to a socket closed here, whose number the next open
    # file takes. Until the fd is set the main thread is running Python, so nothing sleeps.
    previous_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        loop.remove_reader(woken)
        woken.close()
        wake.close()
        if not stopping:  # else a second signal still ends at once
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _drain(woken: socket.socket) -> None:
    # The bytes only woke the loop: the handlers of the signals they name run on their own.
    with suppress(BlockingIOError):
        while woken.recv(4096):
            pass


_ENDING = (signal.SIGTERM, signal.SIGINT)
