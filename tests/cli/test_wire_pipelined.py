"""Valid requests followed on one connection by one `agmem serve`'s protocol (app/cli/wire.py)
refuses: every request before the refused one is answered in full, in order, then the refusal,
then the close, however the bytes fall into reads. The app holds each request until the reads
have come (or the service stops reading, as a pipelined request makes it): the valid requests
are still in it when the refused one is read. The transport refuses a write after its close as
uvloop's does (RuntimeError, "the handler is closed"): an answer lost that way is seen."""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.cli.wire import JsonErrorsProtocol
from tests.cli.test_wire_lines import _Written

HOST = b"Host: 127.0.0.1\r\n"
GET = b"GET /health HTTP/1.1\r\n" + HOST + b"\r\n"
POST = b"POST /api/nope HTTP/1.1\r\n" + HOST + b"Content-Length: 11\r\n\r\nhello world"
CHUNKED = (
    b"POST /api/nope HTTP/1.1\r\n"
    + HOST
    + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
)
VALID = {"GET": GET, "a sized POST": POST, "a chunked POST": CHUNKED}
CHUNKED_HEAD = b"POST /api/nope HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
# Each refused request, its status and its error's name.
REFUSED = {
    "a bad chunk size": (CHUNKED_HEAD + b"zz\r\nab\r\n0\r\n\r\n", 400, "BadRequest"),
    "a bad chunk after a good one": (
        CHUNKED_HEAD + b"2\r\nab\r\n-1\r\nx\r\n0\r\n\r\n",
        400,
        "BadRequest",
    ),
    "101 headers": (
        b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(101)) + b"\r\n",
        431,
        "RequestHeaderFieldsTooLarge",
    ),
    "a 70 KB header": (
        b"GET /health HTTP/1.1\r\n" + HOST + b"X: " + b"y" * 70_000 + b"\r\n\r\n",
        431,
        "RequestHeaderFieldsTooLarge",
    ),
    "a bad request line": (b"GET bad target HTTP/1.1\r\n" + HOST + b"\r\n", 400, "BadRequest"),
    "an unknown method": (b"FOO / HTTP/1.1\r\n" + HOST + b"\r\n", 501, "NotImplemented"),
    "HTTP/2.0": (b"GET /health HTTP/2.0\r\n" + HOST + b"\r\n", 505, "HTTPVersionNotSupported"),
    "a length past the parser's count": (
        b"POST /api/nope HTTP/1.1\r\n" + HOST + b"Content-Length: 99999999999999999999999\r\n\r\n",
        400,
        "BadRequest",
    ),
}


class _Strict(_Written):
    """What the protocol writes, and a write after the close refused as uvloop refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.after_close: list[bytes] = []

    def write(self, data: bytes) -> None:
        if self.ended:
            self.after_close.append(data)
            raise RuntimeError(
                "unable to perform operation on the transport; the handler is closed"
            )
        super().write(data)


async def _held(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, waits for the test's gate, answers 200 with its body's size."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await scope["state"]["gate"].wait()
    body = json.dumps({"size": size}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _unread(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 200 at once, its body unread (as a route that refuses a request does)."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


@functools.cache
def _config(app: Any = _held) -> Config:
    config = Config(app, http=JsonErrorsProtocol, log_level="critical", access_log=False)
    config.load()
    return config


async def _settle() -> None:
    for _ in range(12):
        await asyncio.sleep(0)


async def _written(reads: Sequence[bytes], app: Any = _held) -> tuple[bytes, list[bytes], bool]:
    """What a connection writes for these reads, the app holding its answers until they have
    come (or the service stops reading: the transport then delivers nothing until it resumes);
    what it tried to write after its close; whether it closed."""
    gate = asyncio.Event()
    protocol = JsonErrorsProtocol(
        config=_config(app), server_state=ServerState(), app_state={"gate": gate}
    )
    transport = _Strict()
    protocol.connection_made(transport)
    try:
        for data in reads:
            if protocol.flow.read_paused and not transport.ended:
                gate.set()
                for _ in range(50):
                    await _settle()
                    if not protocol.flow.read_paused or transport.ended:
                        break
            if transport.ended:
                break
            protocol.data_received(data)
            await _settle()
        gate.set()
        for _ in range(10):
            await _settle()
    finally:
        protocol.idle_timer.cancel()
        closed = transport.ended
        protocol.connection_lost(None)
    return transport.written, transport.after_close, closed


def _parsed(written: bytes) -> list[tuple[int, dict[str, Any]]]:
    answers = []
    while written:
        head, _, rest = written.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answers.append((int(head.split(b" ", 2)[1]), json.loads(rest[:length])))
        written = rest[length:]
    return answers


def _each(
    cases: Iterable[Sequence[bytes]], app: Any = _held
) -> Iterator[tuple[list[tuple[int, dict[str, Any]]], list[bytes], bool]]:
    async def go() -> list[tuple[bytes, list[bytes], bool]]:
        return [await _written(reads, app) for reads in cases]

    for written, after_close, closed in asyncio.run(go()):
        yield _parsed(written), after_close, closed


def _assert_answered(
    answered: tuple[list[tuple[int, dict[str, Any]]], list[bytes], bool],
    valid: Sequence[bytes],
    status: int,
    error: str,
    where: object,
) -> None:
    answers, after_close, closed = answered
    sizes = [len(request.partition(b"\r\n\r\n")[2]) for request in valid]
    assert answers[:-1] == [(200, {"size": 11 if size else 0}) for size in sizes], where
    assert answers[-1][0] == status, where
    assert answers[-1][1]["error"] == error, where
    assert after_close == [], where
    assert closed, where


@pytest.mark.parametrize("refused", list(REFUSED), ids=list(REFUSED))
@pytest.mark.parametrize("valid", list(VALID), ids=list(VALID))
def test_a_request_before_a_refused_one_in_the_same_read_is_answered_first(
    valid: str, refused: str
) -> None:
    # A valid request, then one with a bad chunked body in the same read: the 400 was written
    # at once and the connection closed, and the valid request's 200, still in the app, was
    # lost with a RuntimeError logged (rev-whole23).
    request, status, error = REFUSED[refused]
    [answered] = _each([(VALID[valid] + request,)])

    _assert_answered(answered, [VALID[valid]], status, error, None)


@pytest.mark.parametrize("refused", list(REFUSED), ids=list(REFUSED))
def test_requests_before_a_refused_one_are_answered_at_every_cut(refused: str) -> None:
    request, status, error = REFUSED[refused]
    valid = [GET, POST, CHUNKED]
    stream = b"".join(valid) + request
    # Every cut in the valid requests and the refused one's first 400 bytes (the rest of a
    # 70 KB header is more of the same), then a few past them.
    cuts = sorted({*range(1, min(len(stream), len(stream) - len(request) + 400)), len(stream) - 1})
    for cut, answered in zip(
        cuts, _each((stream[:cut], stream[cut:]) for cut in cuts), strict=True
    ):
        _assert_answered(answered, valid, status, error, cut)


def test_a_refused_request_alone_with_a_bad_chunk_is_answered_without_a_lost_write() -> None:
    # The body's 400 was written while its request was still in the app, which then wrote its
    # own answer to the closed transport. An app that reads the body first (`_held`) reads a
    # disconnect either way: this one answers without reading it, as a refusing route does.
    [(answers, after_close, closed)] = _each([(REFUSED["a bad chunk size"][0],)], _unread)

    assert [status for status, _ in answers] == [400]
    assert after_close == []
    assert closed


def test_requests_before_a_refused_one_are_answered_in_any_reads() -> None:
    # Differential: one to three valid requests of any kind, a refused one of any kind, the
    # stream cut into up to five reads anywhere; each valid request answers as it does alone.
    chooser = random.Random(24)
    cases = []
    for _ in range(300):
        valid = [VALID[name] for name in chooser.choices(list(VALID), k=chooser.randint(1, 3))]
        refused = REFUSED[chooser.choice(list(REFUSED))]
        stream = b"".join(valid) + refused[0]
        cuts = sorted(chooser.sample(range(1, len(stream)), chooser.randint(0, 4)))
        reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        cases.append((valid, refused, reads))
    answered = _each(reads for _, _, reads in cases)
    for (valid, (_, status, error), reads), answers in zip(cases, answered, strict=True):
        _assert_answered(answers, valid, status, error, [len(read) for read in reads])
