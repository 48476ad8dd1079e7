"""Split files into index chunks with langchain-text-splitters, each knowing its source lines.

Sizes are in tokens, estimated as the rest of the service does (`app.tokens`: four characters a
token, a wide character one), so the splitters work on characters, a wide one counting four.
Every chunk the splitter returns is a substring of the text it was given, found again from the
previous chunk's position, and its offsets become lines.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from app.sync.transcripts import Transcript
from app.tokens import CHARS_PER_TOKEN, token_length

if TYPE_CHECKING:
    from langchain_text_splitters import MarkdownTextSplitter, RecursiveCharacterTextSplitter


@dataclass(frozen=True, slots=True)
class Chunk:
    content: str
    start_line: int  # 1-based, inclusive, in the file on disk
    end_line: int
    # The titles of the markdown sections the chunk sits in, outermost first, " > " joined. A
    # chunk cut from the middle of a long section has lost its heading; the keyword index gets it
    # back (see `app.index.terms.index_terms`).
    headings: str = ""
    # When the text was said: a transcript chunk's first message with a time (None: the file's
    # time stands for it, as for a memory file's chunk).
    at: datetime | None = None


def _length(text: str) -> Callable[[str], int]:
    # An ASCII text's token length is its length: the builtin spares the splitter a Python call
    # for each piece it measures (~3 us a chunk, 1.5% of sync's Python, on the testdata).
    return len if text.isascii() else token_length


@lru_cache(maxsize=8)
def _markdown_splitter(
    tokens: int, overlap: int, length: Callable[[str], int]
) -> MarkdownTextSplitter:
    # Imported by the first sync that chunks a file: the splitters pull in langchain-core and
    # requests (~0.1-0.35 s of CPU), which every process importing the worker (`agmem serve`,
    # `agmem worker`) paid at its start, most of them never syncing.
    from langchain_text_splitters import MarkdownTextSplitter

    return MarkdownTextSplitter(
        chunk_size=tokens * CHARS_PER_TOKEN,
        chunk_overlap=overlap * CHARS_PER_TOKEN,
        length_function=length,
    )


@lru_cache(maxsize=8)
def _text_splitter(
    tokens: int, overlap: int, length: Callable[[str], int]
) -> RecursiveCharacterTextSplitter:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter(
        chunk_size=tokens * CHARS_PER_TOKEN,
        chunk_overlap=overlap * CHARS_PER_TOKEN,
        length_function=length,
    )


def normalise_newlines(text: str) -> str:
    """CRLF becomes LF; a lone CR does only in a file without LF (a classic Mac file).

    Lines are counted as `grep -n` and editors count them: in a file of LF (or CRLF) line ends
    a lone CR is a character of its line (a progress line's `50%\r100%`); taken for a line end,
    it put every later citation a line past the line it named."""
    if "\r" not in text:
        return text
    if "\n" not in text:
        return text.replace("\r", "\n")
    return text.replace("\r\n", "\n")


def chunk_markdown(text: str, *, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Markdown-aware chunks (headers start sections) with 1-based line ranges into `text`."""
    text = normalise_newlines(text)
    pieces = _markdown_splitter(tokens, overlap, _length(text)).split_text(text)
    starts = _line_starts(text)
    blocks = fenced_blocks(text)
    sections = SectionTitles(text, blocks)
    spans = _keep_headers_with_sections(text, _locate(text, pieces))
    spans = _whole_fence_lines(text, spans, blocks)
    spans = _keep_closing_fences_with_blocks(text, spans, blocks)
    chunks = []
    for begin, end, reopened in _reopen_cut_blocks(text, spans, blocks):
        chunks.append(
            Chunk(
                reopened + text[begin:end],
                _line_at(starts, begin),
                _line_at(starts, end - 1),
                sections.around(begin),
            )
        )
    return chunks


_HEADER = re.compile(r"#{1,6} ")
_HEADING_LINE = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class FencedBlock:
    start: int  # offset of the opening fence's marker
    close: int | None  # offset of the closing fence's marker (None: open to the end)
    close_end: int  # offset just past the closing fence line (its newline excluded)


def fenced_blocks(text: str) -> list[FencedBlock]:
    """The fenced code blocks of a markdown text, by CommonMark's rule: a block is closed by a
    fence of its opener's character, at least as long, with nothing after it (```` ```json ````
    inside a block is code, not its end)."""
    blocks: list[FencedBlock] = []
    opener: re.Match[str] | None = None
    for match in _FENCE.finditer(text):
        marker = match.group(1)
        if opener is None:
            if not (marker[0] == "`" and "`" in match.group(2)):  # a backtick info string: prose
                opener = match
        elif (
            marker[0] == opener.group(1)[0]
            and len(marker) >= len(opener.group(1))
            and not match.group(2).strip()
        ):
            blocks.append(FencedBlock(opener.start(1), match.start(1), match.end()))
            opener = None
    if opener is not None:
        blocks.append(FencedBlock(opener.start(1), None, len(text)))
    return blocks


class SectionTitles:
    """The ATX headings of a markdown text (outside fenced code), to name a chunk's sections."""

    def __init__(self, text: str, blocks: list[FencedBlock] | None = None) -> None:
        blocks = fenced_blocks(text) if blocks is None else blocks
        inside = [(block.start, block.close_end) for block in blocks]
        self.headings = [
            (m.start(), len(m.group(1)), m.group(2).strip())
            for m in _HEADING_LINE.finditer(text)
            if not any(a <= m.start() < b for a, b in inside)
        ]

    def around(self, offset: int) -> str:
        """The titles of the sections open at `offset`, outermost first; a heading starting
        exactly there opens a new section, so it and its siblings do not count."""
        stack: list[tuple[int, str]] = []
        for start, level, title in self.headings:
            if start > offset:
                break
            stack = [entry for entry in stack if entry[0] < level]
            if start < offset:
                stack.append((level, title))
        return " > ".join(title for _, title in stack)


def _keep_headers_with_sections(text: str, located: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """Move header lines that end a chunk to the start of the next one, so that a header always
    travels with its section (the splitter leaves it behind when the section is too long)."""
    spans: list[tuple[int, int]] = []
    carry: int | None = None
    for index, (piece, begin) in enumerate(located):
        end = begin + len(piece)
        if carry is not None and carry < begin:
            begin = carry
        carry = None
        if index < len(located) - 1:
            cut = _trailing_headers(text, begin, end)
            if cut is not None:
                carry, end = cut, cut
        segment = text[begin:end]
        stripped = segment.strip()
        if stripped:
            begin += len(segment) - len(segment.lstrip())
            spans.append((begin, begin + len(stripped)))
    return spans


def _whole_fence_lines(
    text: str, spans: list[tuple[int, int]], blocks: list[FencedBlock]
) -> list[tuple[int, int]]:
    """Move a cut that falls inside a block's fence line to the line's edge: a span ending in an
    opening fence line ends before it, one ending in a closing fence line ends with it, and a
    span starting in either starts with the whole line.

    The splitter's "```\n" separator matches inside a "````" fence: a four-backtick block's
    closing fence was cut after its first backtick, and the next chunk, reopened, put the prose
    after the block inside an unclosed one."""
    fences: list[tuple[int, int, bool]] = []  # marker offset, line end, is a closing fence
    for block in blocks:
        line_end = text.find("\n", block.start)
        fences.append((block.start, len(text) if line_end == -1 else line_end, False))
        if block.close is not None:
            fences.append((block.close, block.close_end, True))
    if not fences:
        return spans
    starts = [start for start, _, _ in fences]

    def fence_around(offset: int) -> tuple[int, int, bool] | None:
        at = bisect_left(starts, offset) - 1  # the last fence line starting before `offset`
        return fences[at] if at >= 0 and offset < fences[at][1] else None

    kept: list[tuple[int, int]] = []
    for begin, end in spans:
        if (fence := fence_around(begin)) is not None:
            begin = fence[0]
        if (fence := fence_around(end)) is not None:
            start, line_end, closing = fence
            if closing:
                end = line_end
            else:
                end = text.rfind("\n", 0, start) + 1
                while end > begin and text[end - 1].isspace():
                    end -= 1
        if begin < end:
            kept.append((begin, end))
    return kept


def _keep_closing_fences_with_blocks(
    text: str, spans: list[tuple[int, int]], blocks: list[FencedBlock]
) -> list[tuple[int, int]]:
    """Move a code block's closing fence from the start of a chunk to the end of the one before.

    The markdown splitter cuts before a "```" line, so a block's closing fence began the next
    chunk; quoted alone (the context block), that chunk opened a code block where its prose
    began, and its own code read as prose."""
    closing = {b.close: b.close_end for b in blocks if b.close is not None}
    kept: list[tuple[int, int]] = []
    for begin, end in spans:
        fence_end = closing.get(begin)
        if fence_end is not None and kept:
            last_begin, last_end = kept[-1]
            if last_end < fence_end and not text[last_end:begin].strip():
                kept[-1] = (last_begin, fence_end)
            if kept[-1][1] >= fence_end:
                rest = text[fence_end:end]
                begin = fence_end + len(rest) - len(rest.lstrip())
        if begin < end:
            kept.append((begin, end))
    return kept


def _reopen_cut_blocks(
    text: str, spans: list[tuple[int, int]], blocks: list[FencedBlock]
) -> list[tuple[int, int, str]]:
    """Each span with the fence line that reopens the code block it starts inside (or ""); a
    span starting inside a block the chunk before it holds whole starts after the block.

    The splitter cuts where a chunk is full, inside a code block too (a mermaid diagram longer
    than a chunk): quoted alone, the chunk after the cut showed the rest of the code as prose."""
    closed = [b for b in blocks if b.close is not None]
    openers = [text.rfind("\n", 0, b.start) + 1 for b in closed]
    kept: list[tuple[int, int, str]] = []
    for begin, end in spans:
        reopened = ""
        at = bisect_right(openers, begin - 1) - 1  # the last block opening before the span
        if at >= 0 and begin < closed[at].close_end:
            block, opener = closed[at], openers[at]
            if kept and kept[-1][0] <= opener and kept[-1][1] >= block.close_end:
                rest = text[block.close_end : end]
                begin = block.close_end + len(rest) - len(rest.lstrip())
            elif begin > text.find("\n", block.start):  # past the opening fence's line
                reopened = text[opener : text.find("\n", block.start) + 1]
        if begin < end:
            kept.append((begin, end, reopened))
    return kept


def _trailing_headers(text: str, begin: int, end: int) -> int | None:
    """Offset of the header lines a span ends with (blank lines aside), or None."""
    cut: int | None = None
    position = end
    while position > begin:
        line_start = max(text.rfind("\n", begin, position - 1) + 1, begin)
        line = text[line_start:position].strip()
        if line and not _HEADER.match(line):
            break
        if line:
            cut = line_start
        position = line_start
    return cut


def chunk_transcript(
    transcript: Transcript, *, tokens: int = 400, overlap: int = 80
) -> list[Chunk]:
    """Chunks of a transcript's `User:`/`Assistant:` text, lines mapped back to the session file."""
    if not transcript.entries:
        return []
    # Each rendered line remembers the file line of the entry it came from; the blank line between
    # entries belongs to the entry before it.
    rendered: list[str] = []
    line_map: list[int] = []
    times: list[datetime | None] = []  # each rendered line's entry's time
    for entry in transcript.entries:
        body = normalise_newlines(entry.text).split("\n")
        rendered.extend(body)
        line_map.extend([entry.line] * len(body))
        times.extend([entry.at] * (len(body) + 1))
        rendered.append("")
        line_map.append(entry.line)
    text = "\n".join(rendered)
    pieces = _text_splitter(tokens, overlap, _length(text)).split_text(text)
    starts = _line_starts(text)
    chunks = []
    for piece, begin in _locate(text, pieces):
        top, bottom = _line_at(starts, begin) - 1, _line_at(starts, begin + len(piece) - 1) - 1
        at = next((t for t in times[top : bottom + 1] if t is not None), None)
        chunks.append(Chunk(piece, line_map[top], line_map[bottom], at=at))
    return chunks


def _locate(text: str, pieces: list[str]) -> list[tuple[str, int]]:
    located = []
    cursor = 0
    for piece in pieces:
        found = text.find(piece, cursor)
        if found == -1:  # the splitter only returns substrings; search from the start to be safe
            found = max(text.find(piece), 0)
        located.append((piece, found))
        cursor = found + 1
    return located


def _line_starts(text: str) -> list[int]:
    starts = [0]
    position = text.find("\n")
    while position != -1:
        starts.append(position + 1)
        position = text.find("\n", position + 1)
    return starts


def _line_at(starts: list[int], offset: int) -> int:
    return bisect_right(starts, max(offset, 0))
