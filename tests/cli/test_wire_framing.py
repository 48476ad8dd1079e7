"""A chunked body's framing as the protocol follows it (app/cli/http1/framing.py): where the body
ends, whatever the reads it comes in, for chunks skipped a run at a time and those read a line at
a time alike."""

from __future__ import annotations

import pytest

from app.cli.http1.framing import CHUNKS_BEGIN, chunked_end, scan_chunks

NEXT = b"GET /health RTSP/1.0\r\n\r\n"


def _chunk(size: int, line: bytes | None = None, fill: bytes = b"x") -> bytes:
    return (b"%x" % size if line is None else line) + b"\r\n" + (fill * size)[:size] + b"\r\n"


# Runs of small chunks broken by every form the run does not take: a chunk past 255 bytes, an
# upper-case size, a leading zero, an extension, a three-digit size under 256, data of CRLFs and
# of what looks like size lines, and trailers.
BODIES = {
    "one-byte": b"".join(_chunk(1) for _ in range(40)) + b"0\r\n\r\n",
    "sizes": b"".join(_chunk(size) for size in (1, 15, 16, 17, 255, 256, 4000, 2)) + b"0\r\n\r\n",
    "forms": _chunk(3)
    + _chunk(171, b"AB")
    + _chunk(10, b"0a")
    + _chunk(5, b"5;name=value")
    + _chunk(12, b"00c")
    + _chunk(7, b"7 ")
    + _chunk(4)
    + b"0\r\n\r\n",
    "data like framing": _chunk(6, fill=b"\r\n")
    + _chunk(8, fill=b"1\r\nx\r\n")
    + _chunk(1, fill=b"\n")
    + b"0\r\n\r\n",
    "trailers": _chunk(1) * 5 + b"0\r\nX-Sum: 1\r\n\r\n",
    # the run is tried only after a chunk whose size line is in its form: runs after each other
    "runs after other forms": _chunk(1, b"1;a")
    + _chunk(1) * 4
    + _chunk(1, b"01")
    + _chunk(1) * 4
    + b"1\nx\r\n"
    + _chunk(1) * 4
    + _chunk(2, b" 2")
    + _chunk(1) * 4
    + b"0\r\n\r\n",
}


def _end_in(reads: list[bytes]) -> int:
    """Where in the reads, as one stream, the body that begins them ends: -1 for nowhere."""
    state, fed = CHUNKS_BEGIN, 0
    for read in reads:
        state, end = scan_chunks(state, read, 0)
        if end >= 0:
            return fed + end
        fed += len(read)
    return -1


@pytest.mark.parametrize("name", BODIES)
def test_a_body_in_one_read_ends_where_its_trailers_do(name: str) -> None:
    body = BODIES[name]

    assert chunked_end(body + NEXT, 0) == len(body)


@pytest.mark.parametrize("name", BODIES)
def test_a_body_in_two_reads_ends_where_its_trailers_do_at_every_cut(name: str) -> None:
    stream = BODIES[name] + NEXT
    for cut in range(1, len(BODIES[name]) + 1):
        assert _end_in([stream[:cut], stream[cut:]]) == len(BODIES[name]), cut


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("size", [1, 2, 5, 7])
def test_a_body_in_small_reads_ends_where_its_trailers_do(name: str, size: int) -> None:
    stream = BODIES[name] + NEXT

    assert _end_in([stream[at : at + size] for at in range(0, len(stream), size)]) == len(
        BODIES[name]
    )


def test_a_size_line_that_is_none_is_still_refused_after_a_run() -> None:
    with pytest.raises(ValueError, match="no chunk size"):
        scan_chunks(CHUNKS_BEGIN, _chunk(1) * 3 + b"zz\r\nabc\r\n", 0)
