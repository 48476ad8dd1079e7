"""A chunked body's framing as `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py) follows it
beside llhttp: where a body that spans reads stands at a read's end, and where it ends, so that
the next message's request line is read where it begins and no body byte is read as one."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable


def blank_line_ends(data: bytes) -> Iterable[int]:
    """Where in a read a chunked body may end: after each blank line (CRLF CRLF), one begun in
    the read before included."""
    for end, start in ((1, b"\n"), (2, b"\r\n"), (3, b"\n\r\n")):
        if data.startswith(start):
            yield end
    at = data.find(b"\r\n\r\n")
    while at >= 0:
        yield at + 4
        at = data.find(b"\r\n\r\n", at + 1)


def chunked_end(read: bytes, at: int) -> int:
    """Where a chunked body that begins at `at` ends, in a read that holds it whole (llhttp has
    parsed it): after its last chunk's trailers; the read's end for what llhttp did not take."""
    try:
        _, end = scan_chunks(CHUNKS_BEGIN, read, at)
    except ValueError:
        return len(read)
    return len(read) if end < 0 else end


# Where a chunked body that spans reads stands at a read's end (`scan_chunks`): the bytes of a
# chunk's data left (its CRLF included) and, where none are, what of the framing is kept. No data
# left: in a chunk's size line (`_SIZE`, its bytes so far kept); or in the last chunk's trailers
# (`_TRAILERS`, the section's last bytes kept, from a line's start: b"\n" as it begins).
_SIZE, _TRAILERS = 0, -1
ChunkState = tuple[int, bytes]
CHUNKS_BEGIN: ChunkState = (_SIZE, b"")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
# A size line with its extensions: past it, llhttp's state is not tracked (the old way).
_SIZE_LINE_BOUND = 64 * 1024
_HEX_DIGITS = "0123456789abcdef"
# The fewest bytes the run of small chunks (`_small_chunks`) can match (`1\r\nX\r\n`): with
# fewer left, no match is tried.
_SMALLEST = 6


def _hex_digit(value: int) -> str:
    digit = _HEX_DIGITS[value]
    return f"[{digit}{digit.upper()}]" if digit.isalpha() else digit


@functools.cache
def _small_chunks() -> re.Pattern[bytes]:
    """A run of chunks of 1 to 255 bytes, each a size line of one or two hex digits and no
    extension, its data and CRLF: what the loop in `scan_chunks` reads of them, found in C. It
    took ~1.4 us a chunk in Python, more than llhttp and uvicorn's callbacks together, so 1-byte
    chunks cost 2.8 times the parse (rev-mends22). The sizes make a trie (first digit, then the
    line's end or a second digit) whose each leaf skips its count of bytes (`.` with DOTALL is a
    jump); possessive, the run holds no backtracking state. Compiled on the first chunked body
    (~9 ms loaded), not at import."""
    firsts = []
    for first in range(1, 16):
        leaves = [rf"\r\n.{{{first}}}\r\n"]
        leaves += [
            rf"{_hex_digit(second)}\r\n.{{{first * 16 + second}}}\r\n" for second in range(16)
        ]
        firsts.append(_hex_digit(first) + "(?:" + "|".join(leaves) + ")")
    return re.compile(("(?s)(?:" + "|".join(firsts) + ")*+").encode())


def scan_chunks(state: ChunkState, data: bytes, at: int) -> tuple[ChunkState, int]:
    """A chunked body's framing from `state` over `data[at:]`, which llhttp parses too: the state
    at the data's end, and where in it the body ends (after its trailers), or -1. Each chunk's
    data is skipped by its size: a body of blank lines costs its chunks, not its lines. A
    ValueError for what is not a size line (llhttp refuses it)."""
    left, kept = state
    end = len(data)
    while at < end:
        if left == _SIZE:
            line_end = data.find(b"\n", at)
            # A size line in the run's form (one or two bytes, no leading zero, then its CR),
            # whole in this read, with room for a chunk: a run begins there (the run itself
            # refuses a rare look-alike, `7 `, at once). The line's length is tested first, the
            # test a large chunk's line (`1000`) and an extension's (`5;a`) fail at once: gated
            # on the bytes after the data instead, each chunk of such a form paid three reads
            # of them (+7% framing an extension's form, rev-wire24). Gated on the size line
            # before the data, a small chunk before a large one cost a failed match, one after a
            # large one the loop's reading (mixed sizes 1.4 times the loop alone, rev-wire23).
            if (
                1 < line_end - at < 4
                and not kept
                and data[line_end - 1] == 13
                and data[at] != 48
                and end - at >= _SMALLEST
            ):
                run_end = _skipped_run(_small_chunks(), data, at)
                if run_end > at:
                    at = run_end
                    continue
            line = kept + data[at : end if line_end < 0 else line_end]
            if len(line) > _SIZE_LINE_BOUND:
                raise ValueError("a chunk's size line past its bound")
            if line_end < 0:
                return (_SIZE, line), -1
            digits = line.split(b";", 1)[0].strip(b" \t\r")
            if _HEX.fullmatch(digits) is None:  # int() takes signs and underscores too
                raise ValueError("no chunk size")
            size = int(digits, 16)
            at = line_end + 1
            left, kept = (size + 2, b"") if size else (_TRAILERS, b"\n")
        elif left > 0:
            if at + left > end:
                return (left - (end - at), b""), -1
            at += left
            left = _SIZE
        else:
            text = kept + data[at:]
            found = text.find(b"\n\r\n")
            if found < 0:
                return (_TRAILERS, text[-2:]), -1
            return CHUNKS_BEGIN, at + found + 3 - len(kept)
    return (left, kept), -1


def _skipped_run(small: re.Pattern[bytes], data: bytes, at: int) -> int:
    """Past the run of small chunks (`_small_chunks`) at `at` in `data`, whole ones only."""
    run = small.match(data, at)
    return at if run is None else run.end()
