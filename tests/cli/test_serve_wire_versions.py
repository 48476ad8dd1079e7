"""`agmem serve` on the wire: the request line's method and version it does not serve as they
came (CONNECT, PRI, HTTP/0.x, HTTP/1.2 and up), checked with raw sockets on a real server."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.cli.wire import JsonErrorsProtocol
from tests.cli.test_serve_wire import (
    IDLE_SECONDS,
    REFUSAL_WINDOW,
    _answers,
    _logged_within,
    _serving,
    error_of,
    exchange,
    logged,
)
from tests.cli.test_wire_layers import _app, _Transport

# One worker under `make test` (`--dist loadgroup`) starts its server once. A group of its own,
# not test_serve_wire.py's: the two modules share no server, and their ~100 s of waits on
# one worker left the other to run the rest of the suite alone.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_wire_versions")]


@pytest.fixture(scope="module")
def served(database_url: str) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    with _serving(
        database_url,
        idle_seconds=IDLE_SECONDS,
        trusted_proxies="127.0.0.1",
        AGMEM_REFUSAL_LOG_SECONDS=str(REFUSAL_WINDOW),
    ) as running:
        yield running


@pytest.fixture(scope="module")
def port(served: tuple[int, subprocess.Popen[str]]) -> int:
    return served[0]


BEHIND = b"GET /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize(
    "line",
    [b"CONNECT 127.0.0.1:443 HTTP/1.1", b"CONNECT /health HTTP/1.1", b"CONNECT /health HTTP/1.0"],
    ids=["authority", "a route's path", "HTTP/1.0"],
)
def test_connect_is_a_501_and_nothing_after_it_is_served(port: int, line: bytes) -> None:
    # The authority form was the generic 400 "not valid HTTP/1.1"; a path was the route's 405,
    # then the bytes after it, a tunnel's for the client, were served as the next request (404).
    request = line + b"\r\nHost: 127.0.0.1:443\r\n\r\n" + BEHIND

    answer = exchange(port, request)

    assert answer.count(b"HTTP/1.1 ") == 1, answer
    status, error = error_of(answer)
    assert status == b"HTTP/1.1 501 Not Implemented"
    assert error["error"] == "NotImplemented"
    assert "CONNECT" in error["detail"]
    assert "no proxy" in error["detail"]


def test_a_connect_pipelined_behind_a_request_is_refused_after_its_answer(port: int) -> None:
    health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    connect = b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n"

    answers = _answers(exchange(port, health + connect + BEHIND))

    statuses = [status for status, _ in answers]
    assert statuses == [b"HTTP/1.1 200 OK", b"HTTP/1.1 501 Not Implemented"]


def test_connect_logs_its_cause(served: tuple[int, subprocess.Popen[str]]) -> None:
    port, server = served
    logged(server)
    exchange(port, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    # Within a window of the module's other CONNECTs it is logged as their count, at its end.
    log = _logged_within(server, "refused a CONNECT (501)", REFUSAL_WINDOW + 3)

    assert "refused a CONNECT (501)" in log, log
    assert "Invalid HTTP request" not in log


def test_pri_of_http_1_1_is_a_501_that_names_the_http_2_preface(port: int) -> None:
    # llhttp refuses any PRI but HTTP/2's preface (`PRI * HTTP/2.0`, a 505): this one was the
    # generic 400 "not valid HTTP/1.1".
    answer = exchange(port, b"PRI * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

    status, error = error_of(answer)
    assert status == b"HTTP/1.1 501 Not Implemented"
    assert error["error"] == "NotImplemented"
    assert "PRI" in error["detail"]
    assert "HTTP/2" in error["detail"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        (b"TRACE", b"/health", b"405 Method Not Allowed"),
        (b"PROPFIND", b"/health", b"405 Method Not Allowed"),
        (b"PATCH", b"/health", b"405 Method Not Allowed"),
        (b"TRACE", b"/", b"404 Not Found"),
        (b"MKCOL", b"/api/nope", b"404 Not Found"),
    ],
)
def test_another_method_the_parser_knows_gets_the_route_answer_in_the_shape(
    port: int, method: bytes, path: bytes, status: bytes
) -> None:
    # Not CONNECT's case: these have no tunnel after them, and a route answers them.
    request = method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + BEHIND

    answers = _answers(exchange(port, request))

    assert answers[0][0] == b"HTTP/1.1 " + status
    assert set(answers[0][1]) == {"error", "detail"}
    assert answers[1][0] == b"HTTP/1.1 404 Not Found"


def test_a_405_names_the_methods_allowed(port: int) -> None:
    request = b"TRACE /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

    answer = exchange(port, request)

    assert b"\r\nallow: get" in answer.partition(b"\r\n\r\n")[0].lower()


@pytest.mark.parametrize("minor", [b"2", b"9"])
def test_a_higher_minor_version_of_http_1_is_served_as_1_1(port: int, minor: bytes) -> None:
    # RFC 9110, 2.5: served as the highest minor version implemented (nginx does); llhttp knows
    # no HTTP/1.2, and it was the generic 400 "not valid HTTP/1.1".
    health = b"GET /health HTTP/1." + minor + b"\r\nHost: 127.0.0.1\r\n\r\n"
    body = b'{"projectPath": "/p", "id": "v1-%s"}' % minor
    start = (
        (
            b"POST /api/session/start HTTP/1." + minor + b"\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        )
        + b"Connection: close\r\n\r\n"
        + body
    )

    answers = _answers(exchange(port, health + start))  # kept alive, as HTTP/1.1

    assert [status for status, _ in answers] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 201 Created"]
    assert answers[1][1]["id"] == "v1-" + minor.decode()


def test_a_higher_minor_version_of_http_1_needs_a_host_as_1_1_does(port: int) -> None:
    status, error = error_of(exchange(port, b"GET /health HTTP/1.2\r\n\r\n"))

    assert status == b"HTTP/1.1 400 Bad Request"
    assert "no Host header" in error["detail"]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /health HTTP/0.9\r\n\r\n",
        b"GET /health HTTP/0.9\r\nHost: 127.0.0.1\r\n\r\n",
        b"POST /api/observe HTTP/0.9\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["bare", "with a Host", "POST"],
)
def test_an_explicit_http_0_9_is_a_505_that_names_it(port: int, request_bytes: bytes) -> None:
    # It was the 400 of a line without a version ("no HTTP version"), which it has.
    status, error = error_of(exchange(port, request_bytes))

    assert status == b"HTTP/1.1 505 HTTP Version Not Supported"
    assert error["error"] == "HTTPVersionNotSupported"
    assert "HTTP/0.9" in error["detail"]
    assert "no HTTP version" not in error["detail"]


def test_an_explicit_http_0_9_typed_a_line_at_a_time_is_a_505(port: int) -> None:
    # As nc or telnet send it: the line and the blank line after it in reads of their own.
    pieces = (b"GET /health HTTP/0.9\r\n", b"Host: 127.0.0.1\r\n", b"\r\n")

    status, error = error_of(exchange(port, *pieces, pause=0.1))

    assert status == b"HTTP/1.1 505 HTTP Version Not Supported"
    assert "HTTP/0.9" in error["detail"]


def test_a_line_without_a_version_is_still_the_400_that_says_so(port: int) -> None:
    # The line split where a version would begin: no version came.
    pieces = (b"GET /health", b"\r\nHost: 127.0.0.1\r\n\r\n")

    status, error = error_of(exchange(port, *pieces, pause=0.1))

    assert status == b"HTTP/1.1 400 Bad Request"
    assert "no HTTP version" in error["detail"]


@pytest.mark.parametrize("version", [b"0.8", b"0.0", b"4.0", b"9.9"])
def test_another_version_is_a_505_that_names_it(port: int, version: bytes) -> None:
    # 0.8 and 0.0 were the generic 400 "not valid HTTP/1.1" (llhttp knows neither); 4.0 and
    # 9.9 were 505s already, kept here so that the protocol-name check leaves them so.
    request = b"GET /health HTTP/" + version + b"\r\nHost: 127.0.0.1\r\n\r\n"

    status, error = error_of(exchange(port, request))

    assert status == b"HTTP/1.1 505 HTTP Version Not Supported"
    assert "HTTP/" + version.decode() in error["detail"]


def test_a_version_of_two_digits_stays_a_400(port: int) -> None:
    # RFC 9112, 2.3: HTTP-version is one digit, a dot and one digit; this is no version.
    status, _ = error_of(exchange(port, b"GET /health HTTP/1.10\r\nHost: 127.0.0.1\r\n\r\n"))

    assert status == b"HTTP/1.1 400 Bad Request"


HOST = b"\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.mark.parametrize(
    "line",
    [
        b"GET /health RTSP/1.5",
        b"GET /health RTSP/1.0",
        b"GET /health RTSP/1.1",
        b"GET /health RTSP/2.0",
        b"SOURCE /health ICE/1.7",
        b"SOURCE /health ICE/1.0",
        b"OPTIONS /health RTSP/1.0",
        b"GET  /health   RTSP/1.0",
    ],
)
def test_a_request_line_of_another_protocol_is_a_400_that_names_it(port: int, line: bytes) -> None:
    # llhttp takes RTSP/ and ICE/ for HTTP/ with their methods (GET, OPTIONS, SOURCE): RTSP/1.5
    # was served 200, SOURCE ICE/1.7 the route's 405, RTSP/1.0 served as HTTP/1.0, RTSP/2.0 a
    # 505 naming "HTTP/2.0".
    answer = exchange(port, line + HOST + BEHIND)

    assert len(_answers(answer)) == 1, answer
    status, error = error_of(answer)
    assert status == b"HTTP/1.1 400 Bad Request"
    assert error["error"] == "BadRequest"
    protocol = line.rsplit(b" ", 1)[1].decode()
    assert protocol in error["detail"]


def test_pipelined_lines_of_another_protocol_are_one_400(port: int) -> None:
    # Both were served: 200, then 404.
    request = b"GET /health RTSP/1.9" + HOST + b"GET /nope RTSP/1.4" + HOST

    answers = _answers(exchange(port, request))

    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"]
    assert "RTSP/1.9" in answers[0][1]["detail"]


def test_a_protocol_name_split_across_reads_is_still_read(port: int) -> None:
    pieces = (b"GET /health RT", b"SP/1.1" + HOST)

    status, error = error_of(exchange(port, *pieces, pause=0.1))

    assert status == b"HTTP/1.1 400 Bad Request"
    assert "RTSP/1.1" in error["detail"]


def test_http_split_anywhere_in_its_request_line_is_served(port: int) -> None:
    line = b"GET /health HTTP/1.1"
    # Connection: close: each exchange reads until the server closes, which a kept-alive
    # connection waited the idle timeout (2 s) for, 19 times.
    rest = b"\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    for cut in range(1, len(line)):
        answer = exchange(port, line[:cut], line[cut:] + rest, pause=0.02)
        assert answer.startswith(b"HTTP/1.1 200 OK"), (cut, answer)


def test_http_0_9_named_in_a_read_after_a_served_request_is_its_505(port: int) -> None:
    # The read the served request's head began in was kept, and the 0.9 line, in a later read,
    # was looked for in it: "no HTTP version".
    pieces = (
        b"GET /health HTTP/1.1\r\n",
        b"Host: 127.0.0.1\r\n\r\nGET /b HTTP/0.9\r\n",
        b"Host: 127.0.0.1\r\n\r\n",
    )

    answers = _answers(exchange(port, *pieces, pause=0.1))

    assert [status for status, _ in answers] == [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 505 HTTP Version Not Supported",
    ]


@pytest.mark.parametrize(
    ("pieces", "status", "said"),
    [
        # A malformed header after it: the line's refusal comes first (it was "no version").
        ((b"GET /health HTTP/0.9\r\nBad Header\r\n\r\n",), b"505", "HTTP/0.9"),
        ((b"GET /health HTTP/0.", b"9\r\nHost: 127.0.0.1\r\n\r\n"), b"505", "HTTP/0.9"),
        # A line that goes on after its version is malformed (it was "no HTTP version").
        ((b"GET /a HTTP/0.9 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",), b"400", "malformed"),
        # The marker elsewhere than in the request line (each was the 505 of HTTP/0.9).
        ((b"GET /b\r\nX: /b HTTP/0.9\r\n\r\n",), b"400", "no HTTP version"),
        ((b"GET /b\r\nX: GET /b HTTP/0.9\r\n\r\n",), b"400", "no HTTP version"),
    ],
    ids=["bad header after", "split in the version", "more after it", "in a header", "a line"],
)
def test_http_0_9_is_read_from_the_request_line_alone(
    port: int, pieces: tuple[bytes, ...], status: bytes, said: str
) -> None:
    answer = exchange(port, *pieces, pause=0.1)

    assert len(_answers(answer)) == 1, answer
    got, error = error_of(answer)
    assert got.split(b" ")[1] == status, answer
    assert said in error["detail"]


def test_http_0_9_in_a_body_is_not_the_line_after_it(port: int) -> None:
    body = b"x\r\nGET /b HTTP/0.9\r\n"
    first = (
        b"POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )

    answers = _answers(exchange(port, first + b"GET /b\r\n\r\n"))

    assert [status for status, _ in answers][1:] == [b"HTTP/1.1 400 Bad Request"], answers
    assert "no HTTP version" in answers[1][1]["detail"]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n",
        b"CONNECT bad target HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["no Host", "a malformed target"],
)
def test_connect_is_a_501_whatever_else_is_wrong(port: int, request_bytes: bytes) -> None:
    # Without a Host it was the 400 "no Host header"; a malformed target the generic 400.
    status, error = error_of(exchange(port, request_bytes + BEHIND))

    assert status == b"HTTP/1.1 501 Not Implemented"
    assert "CONNECT" in error["detail"]


def test_a_head_begun_at_a_reads_end_keeps_no_more_of_the_read_than_a_line_needs() -> None:
    # A 250 KiB body and the next request's first byte in one read: the whole read was kept
    # until that head completed or the connection timed out.
    body = b"x" * (250 * 1024)
    read = (
        b"POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
        + b"G"
    )

    async def go() -> int:
        config = Config(_app, http=JsonErrorsProtocol, log_level="warning", access_log=False)
        config.load()
        protocol = JsonErrorsProtocol(config=config, server_state=ServerState(), app_state={})
        protocol.connection_made(_Transport())
        try:
            protocol.data_received(read)
            await asyncio.sleep(0)
            held = [v for v in vars(protocol).values() if isinstance(v, bytes | bytearray)]
            return max(map(len, held))
        finally:
            protocol.idle_timer.cancel()

    assert asyncio.run(go()) <= 64 * 1024 + 64
