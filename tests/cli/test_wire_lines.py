"""`agmem serve`'s protocol (app/cli/wire.py) reads each request line where its message begins,
and answers a method it does not serve 501 first: reads fed to `data_received` as they would
come off the socket (each cut where a test needs it), the app a stand-in that answers 200. What
only a socket shows (an answer that never came) is tests/cli/test_serve_wire.py's, on its server."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import httptools
import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.cli import wire
from app.cli.headers import MAX_HEAD_BYTES
from app.cli.http1 import lines
from app.cli.wire import JsonErrorsProtocol
from tests.cli.test_wire_layers import _Transport
from tests.error_names import assert_named_by_its_class


class _Written(_Transport):
    """What the protocol writes; closed, or its write side closed (a refusal's FIN, after which
    the protocol reads and drops what comes: app/cli/stalls.py's lingering close)."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False
        self.eof = False

    @property
    def ended(self) -> bool:
        return self.closed or self.eof

    def write(self, data: bytes) -> None:
        if self.eof:
            raise RuntimeError("Cannot call write() after write_eof()")  # as uvloop's
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_write_buffer_size(self) -> int:
        return 0


async def _ok(scope: object, receive: object, send: object) -> None:
    while (await receive()).get("more_body"):  # type: ignore[operator]
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"{}"})  # type: ignore[operator]


@functools.cache
def _config() -> Config:
    # One config for every connection, as the server has: building one configures logging
    # (dictConfig), which was 40% of the every-cut tests' CPU.
    config = Config(_ok, http=JsonErrorsProtocol, log_level="critical", access_log=False)
    config.load()
    return config


async def _written(reads: Sequence[bytes]) -> bytes:
    """What a fresh connection writes for these reads, each fed as one read once the app has
    answered what came before it."""
    protocol = JsonErrorsProtocol(config=_config(), server_state=ServerState(), app_state={})
    transport = _Written()
    protocol.connection_made(transport)
    try:
        for data in reads:
            if transport.ended:
                break
            protocol.data_received(data)
            for _ in range(8):
                await asyncio.sleep(0)
    finally:
        protocol.connection_lost(None)
    return transport.written


def _fed(*reads: bytes) -> list[tuple[int, dict[str, str]]]:
    """The answers (status, JSON body) to these reads on one connection."""
    return _parsed(asyncio.run(_written(reads)))


def _fed_each(cases: Iterable[Sequence[bytes]]) -> Iterator[list[tuple[int, dict[str, str]]]]:
    """`_fed` for each case, each on its own connection, in one event loop: a loop per case
    was a third of the every-cut tests' CPU."""

    async def go() -> list[bytes]:
        return [await _written(reads) for reads in cases]

    return map(_parsed, asyncio.run(go()))


def _parsed(written: bytes) -> list[tuple[int, dict[str, str]]]:
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


def _statuses(*reads: bytes) -> list[int]:
    return [status for status, _ in _fed(*reads)]


HOST = b"\r\nHost: 127.0.0.1\r\n\r\n"
NEXT = b"GET /health HTTP/1.1" + HOST
RTSP = b"GET /health RTSP/1.0" + HOST
# A body that holds, at a line's start, the next request's method and URL and then another
# protocol's name, or HTTP/1.1 (a cut of 22 or 24 from its end, 29 or 31 from a chunked one's, is
# a read that begins with the line or with the line's start before it).
RTSP_BODY = b"x\r\nGET /health RTSP/1.0\r\n"
HTTP_BODY = b"x\r\nGET /health HTTP/1.1\r\n"


def _sized(body: bytes) -> bytes:
    return b"POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(body)


def _chunked(*chunks: bytes) -> bytes:
    head = b"POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


# Thirty chunks of a byte before the last: their sizes' lines are more bytes than that chunk.
SMALL_CHUNKS = (b"x",) * 30


@pytest.mark.parametrize("cut", [1, 3, 22, 24])
def test_a_request_behind_a_sized_body_that_spans_reads_is_served(cut: int) -> None:
    # rev-mends21: the line was looked for from the read's start, inside the body: the valid
    # request behind it was refused 400 for the body's RTSP/1.0, and the connection closed.
    first = _sized(RTSP_BODY) + RTSP_BODY

    assert _statuses(first[: len(first) - cut], first[-cut:] + NEXT) == [200, 200]


@pytest.mark.parametrize("cut", [1, 3, 22, 24])
def test_a_line_of_another_protocol_behind_a_body_that_spans_reads_is_refused(cut: int) -> None:
    # The other way round: the body's `GET /health HTTP/1.1` was read as the line of the RTSP
    # request behind it, which was served as HTTP/1.0.
    first = _sized(HTTP_BODY) + HTTP_BODY

    answers = _fed(first[: len(first) - cut], first[-cut:] + RTSP)

    assert [status for status, _ in answers] == [200, 400]
    assert "RTSP/1.0" in answers[1][1]["detail"]


@pytest.mark.parametrize("cut", [1, 8, 29, 31])
def test_a_request_behind_a_chunked_body_that_spans_reads_is_served(cut: int) -> None:
    first = _chunked(RTSP_BODY)

    assert _statuses(first[: len(first) - cut], first[-cut:] + NEXT) == [200, 200]


@pytest.mark.parametrize("cut", [1, 8, 29, 31])
def test_a_line_of_another_protocol_behind_a_chunked_body_that_spans_reads_is_refused(
    cut: int,
) -> None:
    first = _chunked(HTTP_BODY)

    answers = _fed(first[: len(first) - cut], first[-cut:] + RTSP)

    assert [status for status, _ in answers] == [200, 400]
    assert "RTSP/1.0" in answers[1][1]["detail"]


def test_a_chunked_body_in_the_same_read_is_no_request_line() -> None:
    # Its chunks' sizes were not counted: the search began inside its body.
    assert _statuses(_chunked(*SMALL_CHUNKS, RTSP_BODY) + NEXT) == [200, 200]


def test_a_line_after_a_chunked_body_in_the_same_read_is_its_own() -> None:
    answers = _fed(_chunked(*SMALL_CHUNKS, HTTP_BODY) + RTSP)

    assert [status for status, _ in answers] == [200, 400]
    assert "RTSP/1.0" in answers[1][1]["detail"]


def test_requests_behind_bodies_in_every_cut_are_each_read_from_their_own_line() -> None:
    # Three requests (a sized body, a chunked one, none) cut at every byte into two reads, each
    # body holding a line of the request behind it, with the other version (and a blank line
    # before the last, which llhttp skips).
    second = b"x\r\nPOST /api/nope RTSP/1.0\r\n"
    stream = _sized(second) + second + _chunked(*SMALL_CHUNKS, HTTP_BODY) + b"\r\n" + RTSP
    cuts = range(1, len(stream))
    for cut, answers in zip(
        cuts, _fed_each((stream[:cut], stream[cut:]) for cut in cuts), strict=True
    ):
        assert [status for status, _ in answers] == [200, 200, 400], cut


@pytest.mark.parametrize("read", [65536, 4096])
def test_a_line_of_another_protocol_with_a_long_run_of_spaces_is_refused(read: int) -> None:
    # `GET` and 70,000 spaces: the head's read kept its last 64 KiB, without the method, and the
    # line was never found: served as HTTP/1.0.
    line = b"GET" + b" " * 70_000 + b"/health RTSP/1.0" + HOST
    reads = [line[at : at + read] for at in range(0, len(line), read)]

    answers = _fed(*reads)

    assert [status for status, _ in answers] == [400]
    assert "RTSP/1.0" in answers[0][1]["detail"]


def test_spaces_after_the_url_over_many_reads_still_name_the_protocol() -> None:
    line = b"GET /health" + b" " * 70_000 + b"RTSP/1.0" + HOST
    reads = [line[at : at + 4096] for at in range(0, len(line), 4096)]

    answers = _fed(*reads)

    assert [status for status, _ in answers] == [400]
    assert "RTSP/1.0" in answers[0][1]["detail"]


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT 127.0.0.1:443 RTSP/1.0" + HOST,
        b"CONNECT 127.0.0.1:443 HTTP/2.0" + HOST,
        b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n"
        + b"".join(b"X-%d: 1\r\n" % n for n in range(120))
        + b"\r\n",
        b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",
    ],
    ids=["another protocol", "HTTP/2.0", "120 headers", "a 70 KB header"],
)
def test_connect_is_its_501_before_its_line_or_headers_are_judged(head: bytes) -> None:
    # It was the line's 400 (RTSP), its 505, or the headers' 431.
    answers = _fed(head)

    assert [status for status, _ in answers] == [501]
    assert answers[0][1]["error"] == "NotImplemented"
    assert "CONNECT" in answers[0][1]["detail"]


def test_connect_is_answered_once_its_line_is_whole() -> None:
    # Its headers need not come: nothing in them changes the answer.
    answers = _fed(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n")

    assert [status for status, _ in answers] == [501]


@pytest.mark.parametrize(
    "reads",
    [
        (b"PRI * HTTP/1.1\r\n\r\n",),
        (b"PRI * HTTP/1.1\r\n",),
        (b"PRI * HTTP/1.1\r", b"\n\r\n"),
        (b"PRI * RTSP/1.0\r\n\r\n",),
    ],
    ids=["an empty head", "the line alone", "split", "another protocol"],
)
def test_a_pri_that_is_not_the_http_2_preface_is_answered_at_once(reads: tuple[bytes, ...]) -> None:
    # llhttp waits for the preface's `SM` after an empty line: the client waited for the idle
    # timeout (a 408).
    answers = _fed(*reads)

    assert [status for status, _ in answers] == [501]
    assert "PRI" in answers[0][1]["detail"]


def test_the_http_2_preface_is_still_its_505() -> None:
    answers = _fed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

    assert [status for status, _ in answers] == [505]


@pytest.mark.parametrize(
    "line",
    [
        b"FOO / HTTP/1.1",
        b"get /health HTTP/1.1",
        b"GETX /health HTTP/1.1",
        b"DESCRIBE /health HTTP/1.1",
        b"FOO / RTSP/1.0",
        b"DESCRIBE /health RTSP/1.0",
        b"BREW /pot HTTP/2.0",
    ],
)
def test_a_method_the_service_does_not_know_is_a_501_that_names_it(line: bytes) -> None:
    # RFC 9110, 15.6.2: each was the generic 400 "not valid HTTP/1.1" (or the line's 400 or 505).
    answers = _fed(line + HOST)

    assert [status for status, _ in answers] == [501]
    error = answers[0][1]
    assert error["error"] == "NotImplemented"
    assert line.split(b" ")[0].decode() in error["detail"]


@pytest.mark.parametrize(
    "reads",
    [
        (b"FO", b"O / HTTP/1.1" + HOST),
        (b"F", b"O", b"O / HTTP/1.1" + HOST),
        (b"\r\nF", b"O", b"O", b" / HTTP/1.1" + HOST),
        tuple(bytes([byte]) for byte in b"FOO / HTTP/1.1" + HOST),
    ],
)
def test_an_unknown_method_split_across_reads_is_a_501_that_names_it_whole(
    reads: tuple[bytes, ...],
) -> None:
    # rev-mends22: llhttp refuses it in the read where it stops knowing the word, and the 501
    # named what had come by then (`FO`).
    answers = _fed(*reads)

    assert [status for status, _ in answers] == [501]
    assert "`FOO`" in answers[0][1]["detail"]


def test_a_long_unknown_method_split_across_reads_is_shown_to_its_bound() -> None:
    answers = _fed(*[b"X" * 10] * 10, b" / HTTP/1.1" + HOST)

    assert [status for status, _ in answers] == [501]
    assert f"`{'X' * 64}...`" in answers[0][1]["detail"]


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_a_word_split_across_reads_that_goes_on_in_other_characters_is_no_method(
    cut: int,
) -> None:
    line = b"FOO\x01 / HTTP/1.1" + HOST

    answers = _fed(line[:cut], line[cut:])

    assert answers == _fed(line)
    assert [(status, error["error"]) for status, error in answers] == [(400, "BadRequest")]


def test_an_unknown_method_refused_in_a_later_read_is_named_whole() -> None:
    # rev-wire22: llhttp takes `F` (RTSP's FLUSH) and refuses the next `O`: the 501 named the
    # last read's piece alone, `F`.
    answers = _fed(b"F", b"OO / HTTP/1.1" + HOST)

    assert [status for status, _ in answers] == [501]
    assert "`FOO`" in answers[0][1]["detail"]


def test_an_unknown_method_pipelined_behind_a_body_is_a_501_after_its_answer() -> None:
    first = _sized(RTSP_BODY) + RTSP_BODY

    assert _statuses(first[:-5], first[-5:] + b"FOO / HTTP/1.1" + HOST) == [200, 501]


@pytest.mark.parametrize(
    "head",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello's start
        b"HTTP/1.1 200 OK" + HOST,
        b"GET bad target HTTP/1.1" + HOST,
        b"/health HTTP/1.1" + HOST,
    ],
    ids=["TLS", "a response", "a malformed target", "no method"],
)
def test_what_is_no_method_stays_the_parsers_400(head: bytes) -> None:
    answers = _fed(head)

    assert [status for status, _ in answers] == [400]
    assert answers[0][1]["error"] == "BadRequest"


def test_a_body_held_back_still_ends_where_its_length_says() -> None:
    # The stall check restarted a held body's rate by zeroing its count, which is also where
    # its end is counted from: the next request was looked for inside the body.
    first = _sized(HTTP_BODY) + HTTP_BODY

    async def go() -> bytes:
        protocol = JsonErrorsProtocol(config=_config(), server_state=ServerState(), app_state={})
        transport = _Written()
        protocol.connection_made(transport)
        try:
            protocol.data_received(first[:-22])
            protocol.flow.read_paused = True  # the service holds the client back
            protocol.idle_timer.cancel()
            protocol.idle_check()
            protocol.flow.read_paused = False
            protocol.data_received(first[-22:] + RTSP)
            for _ in range(20):
                await asyncio.sleep(0)
        finally:
            protocol.connection_lost(None)
        return transport.written

    answers = _parsed(asyncio.run(go()))

    assert [status for status, _ in answers] == [200, 400]
    assert "RTSP/1.0" in answers[1][1]["detail"]


# rev-wire22: the last bytes of the reads a head came in (where its block may end) took in the
# read in hand's before its line was looked for: a head whose blank line began in the read
# before was never seen to end, and the line after it never found.


def test_a_line_behind_a_head_whose_end_spans_three_reads_is_its_own() -> None:
    answers = _fed(
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"\r\nGET /health RTSP/1.0\r\nHost: 127.0",
        b".0.1\r\n\r\n",
    )

    assert [status for status, _ in answers] == [200, 400]
    assert "RTSP/1.0" in answers[1][1]["detail"]


def test_a_pri_behind_a_head_whose_end_spans_reads_is_answered() -> None:
    assert _statuses(NEXT[:-1], NEXT[-1:] + b"\r\nPRI * HTTP/1.1\r\n\r\n") == [200, 501]


def test_a_pri_behind_a_chunked_body_whose_head_spans_three_reads_is_answered() -> None:
    first = _chunked(RTSP_BODY) + b"\r\nPRI * HTTP/1.1\r\n\r\n"

    assert _statuses(first[:20], first[20:40], first[40:]) == [200, 501]


def test_requests_behind_bodies_in_every_two_cuts_are_each_read_from_their_own_line() -> None:
    # Three reads: a head's end, or a body's, split between two reads before the next line's.
    second = b"x\r\nGET /a RTSP/1.0\r\n"
    stream = _sized(second) + second + b"GET /b HTTP/1.1" + HOST + b"\r\n" + RTSP
    cuts = [
        (first, cut) for first in range(1, len(stream) - 1) for cut in range(first + 1, len(stream))
    ]
    reads = ((stream[:first], stream[first:cut], stream[cut:]) for first, cut in cuts)
    for (first, cut), answers in zip(cuts, _fed_each(reads), strict=True):
        assert [status for status, _ in answers] == [200, 200, 400], (first, cut)


def test_a_chunked_body_of_blank_lines_is_fed_once_a_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # rev-wire22: it was fed to llhttp up to each blank line (where a chunked body may end),
    # one feed per 4 bytes: 1 MiB of them in 64 KiB reads took 1.3 s, and every connection
    # waited.
    feeds = []
    feed_data = wire._feed_data

    def counted(parser: object, data: bytes) -> None:
        feeds.append(len(data))
        feed_data(parser, data)

    monkeypatch.setattr(wire, "_feed_data", counted)
    stream = _chunked(b"\r\n" * 32_768, b"\r\n\r\n" * 1000) + RTSP
    reads = [stream[at : at + 4096] for at in range(0, len(stream), 4096)]

    answers = _fed(*reads)

    assert [status for status, _ in answers] == [200, 400]
    assert len(feeds) <= 2 * len(reads)


def test_a_chunked_end_search_ends_on_a_read_without_a_line_end() -> None:
    # A size line with no CRLF after it in the read went back to the read's start (find's -1)
    # and read the same chunk again for ever, under every connection (rev-whole22).
    probe = "from app.cli.http1.framing import chunked_end; print(chunked_end(b'GET\\r\\n15', 5))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "7"


def _written_after(reads: Sequence[bytes], seconds: float) -> tuple[bytes, bool]:
    """What a fresh connection writes for these reads, `seconds` after the last one, the
    connection left open; and whether it closed."""

    async def go() -> tuple[bytes, bool]:
        protocol = JsonErrorsProtocol(config=_config(), server_state=ServerState(), app_state={})
        transport = _Written()
        protocol.connection_made(transport)
        try:
            for data in reads:
                protocol.data_received(data)
                await asyncio.sleep(0)
            await asyncio.sleep(seconds)
            return transport.written, transport.ended
        finally:
            protocol.connection_lost(None)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("reads", "named"),
    [
        ((b"FOO",), "FOO"),
        ((b"\r\nFOO",), "FOO"),
        ((b"F", b"OO"), "FOO"),
        ((b"BREW",), "BREW"),
        ((b"DESC",), "DESC"),
        ((b"get",), "get"),
    ],
)
def test_a_word_no_served_method_starts_with_is_a_501_without_the_idle_timeout(
    reads: tuple[bytes, ...], named: str
) -> None:
    # Alone in its read, the connection left open, it waited for the idle timeout (60 s) and
    # was its 408: whatever follows it, it is a 501 (or the 400 of no method).
    written, closed = _written_after(reads, lines.METHOD_WAIT_SECONDS + 0.3)

    answers = _parsed(written)
    assert [status for status, _ in answers] == [501]
    assert f"`{named}`" in answers[0][1]["detail"]
    assert closed


def test_connect_alone_in_its_read_is_its_501() -> None:
    written, closed = _written_after((b"CONNECT",), lines.METHOD_WAIT_SECONDS + 0.3)

    assert [(status, "CONNECT" in error["detail"]) for status, error in _parsed(written)] == [
        (501, True)
    ]
    assert closed


@pytest.mark.parametrize("word", [b"G", b"GE", b"GET", b"PR", b"PRI", b"M-", b"C", b"\r\nPO"])
def test_a_prefix_of_a_served_method_waits_for_the_rest_of_its_head(word: bytes) -> None:
    written, closed = _written_after((word,), lines.METHOD_WAIT_SECONDS + 0.3)

    assert (written, closed) == (b"", False)


def test_a_word_whose_rest_comes_within_the_wait_is_named_whole() -> None:
    async def go() -> bytes:
        protocol = JsonErrorsProtocol(config=_config(), server_state=ServerState(), app_state={})
        transport = _Written()
        protocol.connection_made(transport)
        try:
            protocol.data_received(b"FO")
            await asyncio.sleep(lines.METHOD_WAIT_SECONDS * 0.6)
            protocol.data_received(b"O")
            await asyncio.sleep(lines.METHOD_WAIT_SECONDS * 0.6)
            protocol.data_received(b"BAR / HTTP/1.1" + HOST)
            for _ in range(8):
                await asyncio.sleep(0)
        finally:
            protocol.connection_lost(None)
        return transport.written

    answers = _parsed(asyncio.run(go()))

    assert [status for status, _ in answers] == [501]
    assert "`FOOBAR`" in answers[0][1]["detail"]


@pytest.mark.parametrize("method", lines.ANSWERED_METHODS)
def test_each_method_a_word_may_wait_for_is_one_llhttp_takes(method: bytes) -> None:
    # A method llhttp takes that the list lacks would be refused 501 before its word ended.
    class Head:
        done = False

        def on_headers_complete(self) -> None:
            self.done = True

    head = Head()
    parser = httptools.HttpRequestParser(head)
    if method == b"PRI":  # taken, then only in HTTP/2's preface
        with pytest.raises(httptools.HttpParserError, match="Preface"):
            parser.feed_data(b"PRI /x HTTP/1.1" + HOST)
        return
    parser.feed_data(method + b" /x HTTP/1.1" + HOST)

    assert (head.done, parser.get_method()) == (True, method)


def test_every_refusal_of_the_protocol_is_named_by_its_class() -> None:
    # The raw layer writes its own bodies: a name written there as a string drifted from the
    # app's (app/errors.py) on a rename.
    heads = [
        b"GET /health HTTP/1.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /health\r\n\r\n",
        RTSP,
        b"\x01\x02 / HTTP/1.1" + HOST,
        b"BREW /health HTTP/1.1" + HOST,
        b"CONNECT example.com:443 HTTP/1.1" + HOST,
        b"PRI * HTTP/1.1" + HOST,
        b"GET /health HTTP/3.0" + HOST,
        b"GET /health HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n",
    ]
    answers = [answer for fed in _fed_each([head] for head in heads) for answer in fed]

    for status, body in answers:
        assert_named_by_its_class(status, body)
    assert [status for status, _ in answers] == [400, 400, 400, 400, 400, 501, 501, 501, 505, 431]
    assert {body["error"] for _, body in answers} == {
        "BadRequest",
        "NotImplemented",
        "HTTPVersionNotSupported",
        "RequestHeaderFieldsTooLarge",
    }
