"""One file of a sync read, hashed and, when its content changed, parsed and chunked (the
sync's file pass, app/sync/indexer.py, runs it in a thread a batch of files at a time).

A file is read only as the regular file inside its own root the listing saw: its checks were
earlier, and by the read the name can be a FIFO or a link that points elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from app.config import Settings
from app.index.terms import index_terms
from app.index.writer import content_hash
from app.privacy import clean_text, redact_secrets_lines, strip_private_lines
from app.sync import queries, stamps
from app.sync.chunking import Chunk, chunk_markdown, chunk_transcript, normalise_newlines
from app.sync.discover import FileSource, FoundFile, Skip, binary_reason, looks_binary
from app.sync.transcripts import parse_transcript, transcript_text

# Not "until the next sync": a watch's next sync may look only at other files (it looks at this
# one again itself, `app/sync/watch.py`), and the lease may outlast it.
LEASED = "held by another process's lease: kept as indexed until a sync can read it"


@dataclass(slots=True)
class Prepared:
    """A changed file's content hash and chunks, for the writer."""

    found: FoundFile
    hash: str
    chunks: list[Chunk]  # to write: once checked, only those the file's current rows lack
    passed_over: Counter[str] | None = None  # transcript items skipped or trimmed
    hashes: list[str] = field(default_factory=list)  # the chunks' content hashes
    terms: list[str] = field(default_factory=list)  # their `search_terms` (with section titles)
    keep: list[int] = field(default_factory=list)  # current rows that stay as they are
    checked: bool = False  # chunks compared with the file's current rows
    total: int = 0  # the file's chunks, written and kept

    def __post_init__(self) -> None:
        self.hashes = [content_hash(c.content) for c in self.chunks]
        self.terms = [index_terms(c.content, c.headings) for c in self.chunks]
        self.total = len(self.chunks)


@dataclass(frozen=True, slots=True)
class Roots:
    """The memory and sessions folders with symlinks resolved: a file is read only from inside
    its own (the listing checked the name; by the read it can point elsewhere)."""

    memory: str
    sessions: str

    @classmethod
    def of(cls, memory: Path, sessions: Path) -> Roots:
        return cls(os.path.realpath(memory), os.path.realpath(sessions))

    def holds(self, source: FileSource, real: str) -> bool:
        root = self.memory if source == "memory" else self.sessions
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(slots=True)
class Unchanged:
    """A file whose size or mtime moved and whose content did not: only re-stamped."""

    found: FoundFile


def prepare_all(
    batch: list[FoundFile],
    settings: Settings,
    roots: Roots,
    known: dict[str, queries.KnownFile],
    force: bool,
) -> list[Prepared | Unchanged | Skip]:
    return [prepare_file(f, settings, known.get(f.path), force, roots) for f in batch]


def prepare_file(
    found: FoundFile,
    settings: Settings,
    known: queries.KnownFile | None,
    force: bool,
    roots: Roots,
) -> Prepared | Unchanged | Skip:
    """Read, hash, and (only when the content changed) parse and chunk one file."""
    try:
        data = _read_regular(found, roots)
    except BlockingIOError:
        # The open, non-blocking, found a write lease of another process (Samba, an NFS
        # server): the kernel has told the holder to give it up.
        return Skip(found.path, LEASED, for_now=True)
    except OSError as error:
        return Skip(found.path, f"unreadable: {error.strerror}")
    if isinstance(data, Skip):
        return data
    if stamps.racy(found.mtime, stamps.stamp_clock()):
        found = found._replace(size=stamps.RACY_SIZE)  # read again by the next sync
    # A transcript is judged by its lines (below): one an agent is appending can be read ending
    # inside a character, and a crash can leave its tail as NUL bytes.
    binary = looks_binary(data)
    if binary and found.source == "memory":
        return Skip(found.path, binary_reason(data))
    digest = hashlib.sha256(data).hexdigest()
    # A file indexed under other privacy rules is re-chunked even unchanged: a secret a rule
    # added since catches stayed in its chunks (its rows that come out the same are kept).
    if known is not None and known.hash == digest and known.under_current_rules and not force:
        return Unchanged(found)
    text = "" if binary else data.decode("utf-8-sig")
    tokens, overlap = settings.sync_chunk_tokens, settings.sync_chunk_overlap_tokens
    if found.source == "memory":
        # Private spans and secrets go before chunking, each replaced by the newlines it held:
        # a span or a key longer than a chunk showed in the chunks after its first line's.
        # Line ends made \n first: a span or key keeps only the \n it held, and a CR line end
        # (CRLF, or a classic Mac file's CR) went with it, every later line's number off.
        text = redact_secrets_lines(strip_private_lines(normalise_newlines(clean_text(text))))
        chunks = chunk_markdown(text, tokens=tokens, overlap=overlap)
    else:
        not_utf8 = 0
        if binary:
            text, not_utf8 = transcript_text(data)
        transcript = parse_transcript(text, tool_output_chars=settings.sync_tool_output_chars)
        if binary and not transcript.entries:
            return Skip(found.path, binary_reason(data))
        if not_utf8:
            transcript.skipped["not UTF-8"] += not_utf8
        chunks = chunk_transcript(transcript, tokens=tokens, overlap=overlap)
        return Prepared(found, digest, _nonblank(chunks), transcript.skipped)
    return Prepared(found, digest, _nonblank(chunks))


def _read_regular(found: FoundFile, roots: Roots) -> bytes | Skip:
    """The file's bytes, or a Skip when it is no longer what the listing saw: its checks were
    earlier, and a FIFO put in its place blocked the read (and the project's lock) for ever, a
    link to outside the root put there had that file indexed."""
    descriptor = os.open(found.path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # Checked on the raw descriptor: wrapping a folder's raised IsADirectoryError and the
        # descriptor was never closed (one leaked per read, in a watch running for days).
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return Skip(found.path, "not a regular file")
        # O_NONBLOCK was for the open (a FIFO); kept for the read, an EAGAIN from a network file
        # system or a lease break ended the read there and a partial file was hashed as whole.
        os.set_blocking(descriptor, True)
        # The file opened, not the name: a check of the name would leave the same race open.
        if not roots.holds(found.source, _opened_path(descriptor, found.path)):
            return Skip(found.path, "symlink escapes the root")
        with open(descriptor, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(descriptor)


def _opened_path(descriptor: int, path: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:  # no /proc (macOS, some sandboxes): the name's target now, the best left
        return os.path.realpath(path)


def _nonblank(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.content.strip()]
