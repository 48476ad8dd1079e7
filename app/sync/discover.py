"""Finds the files a project's sync indexes, and says why it passed over the others.

Memory: `MEMORY.md` / `memory.md` at the memory root and every `*.md` under its `memory/` folder.
Transcripts: every `*.jsonl` (and Gemini's legacy single-object `*.json`) under the sessions
folder. Discovery only stats; reading and hashing happen in the delta check, for changed files.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

FileSource = Literal["memory", "sessions"]

SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv"})
ROOT_MEMORY_FILES = ("MEMORY.md", "memory.md")
TRANSCRIPT_SUFFIXES = (".jsonl", ".json")


class FoundFile(NamedTuple):  # a tuple: a no-change re-sync makes one a file
    path: str  # absolute; symlinks inside the root keep their own path
    source: FileSource
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Skip:
    path: str
    reason: str


@dataclass(slots=True)
class Discovery:
    files: list[FoundFile] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    # Roots that exist: files under a missing root are not reported deleted by mistake of a typo.
    roots: dict[FileSource, str] = field(default_factory=dict)


def discover(
    *, memory_root: Path, sessions_root: Path, max_bytes: int, include_sessions: bool = True
) -> Discovery:
    """Every indexable file of one project, plus each passed-over file with its reason."""
    found = Discovery()
    memory_root = memory_root.absolute()
    if memory_root.is_dir():
        found.roots["memory"] = str(memory_root)
        # Both spellings on a case-insensitive filesystem are one file: keep the first.
        seen: set[tuple[int, int]] = set()
        for name in ROOT_MEMORY_FILES:
            candidate = memory_root / name
            if candidate.name not in os.listdir(memory_root):
                continue
            _consider(found, candidate, memory_root, "memory", max_bytes, seen)
        memory_dir = memory_root / "memory"
        if memory_dir.is_dir() and not memory_dir.is_symlink():
            _walk(found, str(memory_dir), memory_root, "memory", (".md",), max_bytes)
        elif memory_dir.is_symlink():
            _consider_dir_link(found, memory_dir, memory_root)
    sessions_root = sessions_root.absolute()
    if include_sessions and sessions_root.is_dir():
        found.roots["sessions"] = str(sessions_root)
        _walk(found, str(sessions_root), sessions_root, "sessions", TRANSCRIPT_SUFFIXES, max_bytes)
    return found


def _walk(
    found: Discovery,
    directory: str,
    root: Path,
    source: FileSource,
    suffixes: tuple[str, ...],
    max_bytes: int,
) -> None:
    # The hot path of a no-change re-sync: plain strings and DirEntry data, no Path objects, and
    # each file's stat relative to its open folder (fstatat), so the kernel does not walk the
    # whole path again for every file.
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            os.close(folder)
            raise
    except OSError as error:
        found.skipped.append(Skip(directory, f"unreadable directory: {error.strerror}"))
        return
    try:
        prefix = directory + os.sep
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if name in SKIPPED_DIRS:
                    found.skipped.append(Skip(prefix + name, f"excluded directory {name}"))
                else:
                    _walk(found, prefix + name, root, source, suffixes, max_bytes)
            elif entry.is_symlink():
                path = Path(prefix + name)
                if path.is_dir():
                    _consider_dir_link(found, path, root)
                elif name.endswith(suffixes):
                    _consider(found, path, root, source, max_bytes, None)
            elif name.endswith(suffixes):
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as error:
                    found.skipped.append(Skip(prefix + name, f"unreadable: {error.strerror}"))
                    continue
                _admit(found, prefix + name, info, source, max_bytes)
    finally:
        os.close(folder)


def _consider_dir_link(found: Discovery, link: Path, root: Path) -> None:
    if not _inside(link, root):
        found.skipped.append(Skip(str(link), "symlink escapes the root"))
        return
    # A link to a folder inside the root would index those files twice (and may loop).
    found.skipped.append(Skip(str(link), "symlinked directory inside the root (indexed directly)"))


def _consider(
    found: Discovery,
    path: Path,
    root: Path,
    source: FileSource,
    max_bytes: int,
    seen: set[tuple[int, int]] | None,
) -> None:
    try:
        if path.is_symlink() and not _inside(path, root):
            found.skipped.append(Skip(str(path), "symlink escapes the root"))
            return
        info = path.stat()
    except OSError as error:
        found.skipped.append(Skip(str(path), f"unreadable: {error.strerror}"))
        return
    if seen is not None:
        key = (info.st_dev, info.st_ino)
        if key in seen:
            return
        seen.add(key)
    _admit(found, str(path), info, source, max_bytes)


def _admit(
    found: Discovery, path: str, info: os.stat_result, source: FileSource, max_bytes: int
) -> None:
    if not stat.S_ISREG(info.st_mode):
        found.skipped.append(Skip(path, "not a regular file"))
    elif info.st_size > max_bytes:
        found.skipped.append(Skip(path, f"over the size cap ({info.st_size} > {max_bytes} bytes)"))
    else:
        found.files.append(FoundFile(path, source, info.st_size, info.st_mtime))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def looks_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB, or bytes that are not UTF-8, mean a binary file."""
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
