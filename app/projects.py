"""One spelling per project folder: the key every table carries.

Rows are keyed by the project path a client sends, and clients spell one folder several ways: an
IDE hook sends the workspace folder with a trailing slash, `agmem sync` sends `os.path.abspath`'s
form without one, a script joins `/home/dev/x/../shop`, VS Code writes Windows drive letters in
lower case (`c:\\Users\\...`) where other tools write `C:/Users/...`. Kept verbatim, each spelling
was a project of its own: the interceptor's sessions and the synced memory files never met in one
context block. This folds the spellings that name the same folder on any machine, lexically (no
disk access: the client's folder may be on another machine). Symlinks are not resolved, and a
relative path or `~` (which only the client could resolve) is kept as sent, normalised the same way.
"""

from __future__ import annotations

import ntpath
import posixpath
import re
import unicodedata

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def is_windows_path(path: str) -> bool:
    """`C:\\...` or `C:/...`: a Windows client's absolute path."""
    return _WINDOWS_DRIVE.match(path) is not None


def canonical_project(path: str) -> str:
    """The project key for a path as sent: trimmed, NFC, `.`/`..`/doubled and trailing
    separators folded; a Windows path with backslashes and an upper-case drive letter."""
    # macOS tools may send a decomposed "é" (NFD) where a typed path has the composed one.
    text = unicodedata.normalize("NFC", path.strip())
    if not text:
        return text
    if is_windows_path(text):
        folded = ntpath.normpath(text)
        return folded[0].upper() + folded[1:]
    folded = posixpath.normpath(text)
    # POSIX lets `//x` mean something else than `/x`; no project path means that.
    return "/" + folded.lstrip("/") if folded.startswith("//") else folded
