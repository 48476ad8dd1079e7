"""Which indexed files are a sync's to delete: those of its own roots, and of roots it forgets.

Each indexed file records the root it was found under (`memory_files.root`: its memory root or
its sessions folder, as `source` says). A sync deletes a file it no longer finds only when the
file is of one of its two roots: a sync of the default root that forgot a custom root's flag
deleted every file of that root (rev-leftovers26), which the next sync naming it read and
embedded again. Another root's files go only when a sync names it to forget.

Roots and paths are compared composed (NFC): macOS gives the shell's cwd decomposed while a typed
`-p` or an API body is composed, and the two spellings of one folder are one project key
(app/projects.py). Compared as spelled, neither sync owned the other's files, and each spelling
kept its own copy of every file (rev-sync27). Roots are stored composed.
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from app.sync.discover import ROOT_MEMORY_FILES, FileSource
from app.sync.queries import PlacedFile


def lists(source: str, root: str, path: str) -> bool:
    """Whether a listing of `root` as `source` would find `path`, were it on disk (by the path
    alone: for files indexed before roots were recorded), both taken composed."""
    path = composed(path)
    inside = composed(root).rstrip(os.sep) + os.sep
    if source == "sessions":
        return path.startswith(inside)
    return path in {inside + name for name in ROOT_MEMORY_FILES} or path.startswith(
        inside + "memory" + os.sep
    )


def is_of(known: PlacedFile, source: str, root: str) -> bool:
    """Whether the indexed file is of the root `root` taken as `source`."""
    if known.source != source:
        return False
    if known.root is None:
        return lists(source, root, known.path)
    return composed(known.root) == composed(root)


def composed(path: str) -> str:
    """The NFC spelling (a no-op for ASCII, the common case, without building a new string)."""
    return path if path.isascii() else unicodedata.normalize("NFC", path)


@dataclass(frozen=True, slots=True)
class SyncRoots:
    """A sync's memory root and sessions folder (absolute, normalised), and the folders it
    forgets."""

    memory: str
    sessions: str
    forget: frozenset[str] = frozenset()

    def of(self, source: str) -> str:
        return self.memory if source == "memory" else self.sessions

    def may_delete(self, known: PlacedFile) -> bool:
        """A file this sync's listing would find, were it on disk, that it did not find (whatever
        root it is recorded under: two overlapping roots list one file, and neither dropped it
        once gone), or a file of a root it forgets."""
        return (
            is_of(known, "memory", self.memory)
            or is_of(known, "sessions", self.sessions)
            or (known.source in _SOURCES and lists(known.source, self.of(known.source), known.path))
            or self.forgets(known)
        )

    def forgotten_in_vain(self, placed: Collection[PlacedFile]) -> list[str]:
        """The folders to forget that no indexed file of `placed` is of (a mistyped name)."""
        return sorted(f for f in self.forget if not any(self._forgets(p, f) for p in placed))

    def forgets(self, known: PlacedFile) -> bool:
        return any(self._forgets(known, folder) for folder in self.forget)

    def _forgets(self, known: PlacedFile, folder: str) -> bool:
        # By the path alone a folder above this sync's sessions folder (`/`, the project) is a
        # sessions folder holding every transcript: it took another folder's unrecorded ones.
        if (
            known.root is None
            and known.source == "sessions"
            and lists("sessions", folder, self.sessions)
        ):
            return False
        return any(is_of(known, source, folder) for source in _SOURCES)


_SOURCES: Collection[FileSource] = ("memory", "sessions")


def kept_of_gone_roots(kept: Collection[PlacedFile], project: str) -> str | None:
    """What a sync says of the missing files it kept as another root's, when they stay in search
    for nothing: their root (for a file indexed before roots were recorded, the file) is gone,
    renamed or removed, and its chunks stay until a sync forgets it. A root still on disk holds
    its own files (its own sync drops those deleted): said at every sync of the default roots
    once a custom root existed, and at every pass of a watch, that was noise."""
    stale = [known for known in kept if not _still_there(known)]
    if not stale:
        return None
    roots = Counter(known.root for known in stale)
    named = ", ".join(_root_name(root, project) for root in sorted(roots, key=lambda r: r or ""))
    files = "1 file" if len(stale) == 1 else f"{len(stale)} files"
    return f"kept {files} of folders that are gone: {named} (forget them to drop them)"


def _still_there(known: PlacedFile) -> bool:
    return os.path.isdir(known.root) if known.root is not None else os.path.lexists(known.path)


def _root_name(root: str | None, project: str) -> str:
    if root is None:
        return "(indexed before roots were recorded)"
    inside = project.rstrip(os.sep) + os.sep
    name = root[len(inside) :] if root.startswith(inside) else root
    return name.rstrip(os.sep) + os.sep
