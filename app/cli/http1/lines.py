"""The request line of `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py), read where its
message begins (httptools does not say where that is: the protocol counts it, `head_start`), and
the refusals it decides before any other of the head: its method's (501) and its line's (a 505
for another version of HTTP, a 400 for another protocol's name or none)."""

from __future__ import annotations

import re
from typing import Any

import httptools

from app.cli.headers import HeaderBoundProtocol
from app.cli.http1.answers import (
    METHOD_DETAIL,
    PRI_DETAIL,
    PROTOCOL_DETAIL,
    connect_refusal,
    no_version,
    version_not_supported,
)
from app.cli.http1.framing import chunked_end
from app.cli.refusals import Refused, error_body
from app.errors import BadRequest, MethodNotImplemented

# What of a read is kept for a head's request line not yet whole at the read's end, from the
# line's start, runs of spaces as one: a URL of up to 64 KiB (a long `prompt` on
# `GET /api/context`), its method and its version.
LINE_BOUND = 64 * 1024 + 64
SPACES = re.compile(rb" +")
_NOT_SPACE = re.compile(rb"[^ ]")
_NOT_BLANK = re.compile(rb"[^\r\n]")  # a request line's first byte: llhttp skips blank lines
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
# llhttp's methods a route answers (its 405 or 404 at worst), and PRI, whose HTTP/2 preface is
# its line's 505: a word at a read's end that may still become one of them waits for the rest of
# its head, as any head does. Any other word (`FOO`, `CONN`, RTSP's `DESC`) is a 501 whatever
# follows it (or the 400 of no method, if it goes on in other characters): it waits only
# METHOD_WAIT_SECONDS for its rest, not the idle timeout.
ANSWERED_METHODS = tuple(
    b"GET HEAD POST PUT DELETE OPTIONS PATCH TRACE QUERY COPY LOCK MKCOL MOVE PROPFIND PROPPATCH "
    b"SEARCH UNLOCK BIND REBIND UNBIND ACL REPORT MKACTIVITY CHECKOUT MERGE M-SEARCH NOTIFY "
    b"SUBSCRIBE UNSUBSCRIBE PURGE MKCALENDAR LINK UNLINK SOURCE PRI".split()
)
# A word's rest is its write's next segment: behind Nagle's algorithm it waits for the first
# one's ACK, which a receiver delays up to 40 ms (Linux) or 200 ms (Windows). Past this wait the
# 501 names the word as it came.
METHOD_WAIT_SECONDS = 0.5
# llhttp's version, a string formatted at each call (0.45 us): read once a request.
read_version = httptools.HttpRequestParser.get_http_version


def _skipped(stop: re.Pattern[bytes], text: bytes, at: int) -> int:
    """Where in `text` the first byte from `at` that `stop` matches is: its end when none is."""
    found = stop.search(text, at)
    return len(text) if found is None else found.start()


class LineReadingProtocol(HeaderBoundProtocol):
    """uvicorn's httptools protocol that reads each request line where its message begins, and
    refuses a method or a line before the rest of the head; the protocol over it feeds the
    reads and keeps their state (`read`, `head_at`, `line_from`, `line_text`, `head_tail`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
        # llhttp has refused the head's method in a word the reads have not ended yet: its text
        # so far is the line's (`line_text`), and the next reads are the word's, not llhttp's.
        self.method_pending = False

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
            return chunked_end(read, start)
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
        at = _skipped(_NOT_BLANK, text, at)
        if not text.startswith(method + b" ", at):
            return None
        end = _skipped(_NOT_SPACE, text, at + len(method))
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
            text, at = self.method_text()
            word = _TOKEN.match(text, at, at + METHOD_SHOWN)
            if word is None:
                return None  # no method: the parser's 400
            end = word.end()
            if end < len(text) and text[end] != 32 and end - at < METHOD_SHOWN:
                return None  # a word that goes on in other characters is no method either
            name = word.group()
        if name != method or method in RTSP_METHODS:
            return unknown_method(name)
        if method == b"CONNECT":
            return connect_refusal()
        if method == b"PRI":
            tail = self.line_tail
            if tail is None:
                tail = self.find_line_tail(method)
            if tail != b"HTTP/2.0":
                cause = "refused a PRI that is not HTTP/2's preface (501)"
                body = error_body(MethodNotImplemented(PRI_DETAIL))
                return Refused(b"501 Not Implemented", body, [], cause)
        return None

    def method_text(self) -> tuple[bytes, int]:
        """The text a method llhttp stopped in is read from, and where in it the method begins
        (past the blank lines llhttp skips)."""
        if self.line_text:  # the head's line begun in a read before: the method with it
            text, at = self.line_text + self.read[:METHOD_SHOWN], 0
        else:
            text, at = self.read, self.head_start()
        return text, _skipped(_NOT_BLANK, text, at)

    def word_refused(self) -> Refused | None:
        """The 501 of the method word the head's text kept so far (`line_text`, the reads it
        came in) ends in, if no method a route answers starts with it (`ANSWERED_METHODS`): None
        for any other text."""
        text = self.line_text
        at = _skipped(_NOT_BLANK, text, 0)
        word = _TOKEN.match(text, at, at + METHOD_SHOWN)
        if word is None or word.end() < len(text):
            return None
        name = word.group()
        if any(method.startswith(name) for method in ANSWERED_METHODS):
            return None
        return connect_refusal() if name == b"CONNECT" else unknown_method(name)

    def method_goes_on(self) -> bool:
        """Whether llhttp stopped in a method whose word runs to the read's end, short of the
        characters a 501 shows: the next read may go on with it (`FO`, then `O /`), and its 501
        waits to name it whole. Its text so far is then kept as the line's."""
        if self.url:
            return False
        text, at = self.method_text()
        word = _TOKEN.match(text, at, at + METHOD_SHOWN)
        if word is None or word.end() < len(text) or word.end() - at >= METHOD_SHOWN:
            return False
        self.line_text = text[at:]
        return True

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
            return no_version() if version == "0.9" else version_not_supported(version)
        if not tail:
            return no_version()  # HTTP/0.9 has no headers: with a Host it was HTTP/1.x's
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
            body = error_body(BadRequest(PROTOCOL_DETAIL.format(protocol=protocol)))
            return Refused(
                b"400 Bad Request", body, [], f"refused a request line of {protocol} (400)"
            )
        if digits[0] == 49:  # "1"
            return None
        return version_not_supported(digits.decode("ascii"))


def unknown_method(name: bytes) -> Refused:
    """The 501 of a method the service does not know (RFC 9110, 15.6.2), named as far as it
    came (to METHOD_SHOWN characters)."""
    shown = name.decode("ascii") + ("..." if len(name) == METHOD_SHOWN else "")
    body = error_body(MethodNotImplemented(METHOD_DETAIL.format(method=shown)))
    return Refused(b"501 Not Implemented", body, [], "refused an unknown method (501)")
