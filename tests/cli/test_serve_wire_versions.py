"""`agmem serve` on the wire: the request line's method and version it does not serve as they
came (CONNECT, PRI, HTTP/0.x, HTTP/1.2 and up), checked with raw sockets on a real server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

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

# One worker under `make test` (`--dist loadgroup`), beside test_serve_wire.py's servers.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_wire")]


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
