"""Finds the files a project's sync indexes, and says why it passed over the others.

Memory: `MEMORY.md` / `memory.md` at the memory root and every `*.md` under its `memory/` folder.
Transcripts: every `*.jsonl` (and Gemini's legacy single-object `*.json`) under the sessions
folder. Discovery only stats; reading and hashing happen in the delta check, for changed files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
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
    path: str  # for showing: a name that is not UTF-8 has U+FFFD for each such byte
    reason: str
    # Passed over for this sync only (another process holds the file): what the index holds of
    # it is kept until a sync can read it (a watch looks at it again by itself).
    for_now: bool = False

    def __post_init__(self) -> None:
        # The report goes to Postgres (JSONB) and to a terminal, neither of which takes the
        # lone surrogates Python holds such a name's bytes as.
        if not is_utf8(self.path):
            shown = self.path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            object.__setattr__(self, "path", shown)


@dataclass(slots=True)
class Discovery:
    files: list[FoundFile] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)


def discover(
    *, memory_root: Path, sessions_root: Path, max_bytes: int, include_sessions: bool = True
) -> Discovery:
    """Every indexable file of one project, plus each passed-over file with its reason."""
    found = Discovery()
    memory_root = memory_root.absolute()
    if memory_root.is_dir():
        _root_files(found, memory_root, max_bytes)
        memory_dir = memory_root / "memory"
        if memory_dir.is_dir() and not memory_dir.is_symlink():
            _walk(found, str(memory_dir), memory_root, "memory", (".md",), max_bytes)
        elif memory_dir.is_symlink():
            _consider_dir_link(found, memory_dir, memory_root)
    sessions_root = sessions_root.absolute()
    if include_sessions and sessions_root.is_dir():
        _walk(found, str(sessions_root), sessions_root, "sessions", TRANSCRIPT_SUFFIXES, max_bytes)
    return found


def needs_whole_listing(memory_root: Path, sessions_root: Path, changed: Iterable[str]) -> bool:
    """Whether a changed path is a root folder itself or above one: only a whole listing can then
    say which files are there."""
    memory_root = memory_root.absolute()
    roots = (str(memory_root), str(memory_root / "memory"), str(sessions_root.absolute()))
    return any(_is_root_or_above(path, root) for path in changed for root in roots)


def discover_changed(
    *, memory_root: Path, sessions_root: Path, scope: Scope, max_bytes: int
) -> Discovery:
    """The indexable files at or under the paths of `scope` (`scope_of` a watcher's changed paths:
    files or folders, present or gone, none of them a root or above one), found by `discover`'s
    rules: a file `discover` would list lies at or under a path of `scope` exactly when this
    finds it."""
    memory_root = memory_root.absolute()
    memory_dir = str(memory_root / "memory")
    sessions = str(sessions_root.absolute())
    found = Discovery()
    root_files = {str(memory_root / name) for name in ROOT_MEMORY_FILES}
    for path in scope.paths:
        if _under(path, memory_dir) and not os.path.islink(memory_dir):
            _changed_path(found, path, memory_dir, memory_root, "memory", (".md",), max_bytes)
        if _under(path, sessions):
            _changed_path(
                found, path, sessions, Path(sessions), "sessions", TRANSCRIPT_SUFFIXES, max_bytes
            )
    if not root_files.isdisjoint(scope.paths) and memory_root.is_dir():
        _root_files(found, memory_root, max_bytes)  # both spellings together, as `discover` does
    return found


class Scope(NamedTuple):
    """Where a sync limited to a watcher's changed paths looks: `paths` (normalised, none under
    another), and those of them that may be, or have been, folders (not a regular file now)."""

    paths: list[str]
    folders: list[str]


def scope_of(changed: Iterable[str], memory_root: Path) -> Scope:
    """The scope of the changed paths: a folder's walk finds the files under it, so those go; a
    root memory file brings its other spelling (one file on a case-insensitive filesystem,
    indexed under the name `discover` found first)."""
    paths = {os.path.normpath(p) for p in changed}
    root_files = {str(memory_root.absolute() / name) for name in ROOT_MEMORY_FILES}
    if not root_files.isdisjoint(paths):
        paths |= root_files
    kept: list[str] = []
    # By components, so that what lies under a folder comes right after it (as strings, "a.md"
    # sorts between "a" and "a/b.md", and a file under "a" was listed twice).
    for path in sorted(paths, key=lambda p: p.split(os.sep)):
        if not (kept and _under(path, kept[-1])):
            kept.append(path)
    # A regular file has no indexed files under it (a folder replaced by a file within one burst
    # left its files' own events too, unless it was moved away whole: the next whole sync, at the
    # watch's start, clears those), and the folder test is a scan of the project's files.
    return Scope(kept, [path for path in kept if not os.path.isfile(path)])


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder + os.sep)


def _is_root_or_above(path: str, root: str) -> bool:
    path = os.path.normpath(path)
    return path == root or _under(root, path)


def _changed_path(
    found: Discovery,
    path: str,
    base: str,
    root: Path,
    source: FileSource,
    suffixes: tuple[str, ...],
    max_bytes: int,
) -> None:
    """What `_walk` of `base` would find at or under `path` (a file or folder inside `base`)."""
    folders = path[len(base) + 1 :].split(os.sep)[:-1]
    if SKIPPED_DIRS.intersection(folders):
        return  # the walk never enters an excluded folder (it reports the folder itself)
    # Nor a symlinked folder: a watch started with one in place gets events through it (for files
    # outside the root, or indexed already under their own path), and the walk reports the link.
    folder = base
    for name in folders:
        folder += os.sep + name
        if os.path.islink(folder):
            return
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return  # gone: its indexed files are deleted
    except OSError as error:
        found.skipped.append(Skip(path, f"unreadable: {error.strerror}"))
        return
    name = os.path.basename(path)
    if stat.S_ISDIR(info.st_mode):
        if name in SKIPPED_DIRS:
            found.skipped.append(Skip(path, f"excluded directory {name}"))
        else:
            _walk(found, path, root, source, suffixes, max_bytes)
    elif stat.S_ISLNK(info.st_mode):
        if os.path.isdir(path):
            _consider_dir_link(found, Path(path), root)
        elif name.endswith(suffixes):
            _consider(found, Path(path), root, source, max_bytes, None)
    elif name.endswith(suffixes):
        _admit(found, path, info, source, max_bytes)


def _root_files(found: Discovery, memory_root: Path, max_bytes: int) -> None:
    # Both spellings on a case-insensitive filesystem are one file: keep the first.
    seen: set[tuple[int, int]] = set()
    names = os.listdir(memory_root)
    for name in ROOT_MEMORY_FILES:
        if name in names:
            _consider(found, memory_root / name, memory_root, "memory", max_bytes, seen)


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
        # Through the link first: a loop (ELOOP) resolves nowhere, and was said to escape.
        info = path.stat()
        if path.is_symlink() and not _inside(path, root):
            found.skipped.append(Skip(str(path), "symlink escapes the root"))
            return
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
    if not is_utf8(path):
        # Postgres keeps UTF-8 text: stored, the path failed the whole run (UnicodeEncodeError).
        found.skipped.append(Skip(path, "file name is not UTF-8"))
    elif not stat.S_ISREG(info.st_mode):
        found.skipped.append(Skip(path, "not a regular file"))
    elif info.st_size > max_bytes:
        found.skipped.append(Skip(path, f"over the size cap ({info.st_size} > {max_bytes} bytes)"))
    else:
        found.files.append(FoundFile(path, source, info.st_size, info.st_mtime))


def is_utf8(path: str) -> bool:
    """Whether `path` is text: a name whose bytes are not UTF-8 is held as lone surrogates."""
    if path.isascii():
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


_UTF16_32_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-32 LE's BOM starts with UTF-16 LE's
# Bytes no text file holds, in any 8-bit encoding: the C0 controls but tab, the line ends, form
# feed and escape (a terminal's colours in a saved log), and DEL.
_NOT_TEXT = bytes(set(range(32)) - set(b"\t\n\v\f\r\x1b")) + b"\x7f"


def binary_reason(data: bytes) -> str:
    """Why `data` (which `looks_binary`) is skipped: text in another encoding (a UTF-16 file
    from a Windows editor, Latin-1) is `not UTF-8`, which says what to do about it."""
    if data.startswith(_UTF16_32_BOMS):
        return "not UTF-8"
    head = data[:8192]
    if len(head.translate(None, _NOT_TEXT)) == len(head):
        return "not UTF-8"
    return "binary file"


def looks_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB, or bytes that are not UTF-8, mean a binary file."""
    if b"\x00" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
