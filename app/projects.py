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

import fnmatch
import ntpath
import posixpath
import re
import unicodedata
from typing import TYPE_CHECKING

from app.errors import ValidationFailed

if TYPE_CHECKING:
    from app.config import Settings

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
# Slashes before a Windows path: a file URI's path (`/c:/Users/...`, VS Code's `uri.path`), or a
# client joining the path to a URL after its slash (`/api/context//C:/...`). A drive alone too:
# `/c:` is the file URI's path of `C:\`.
_SLASHES_BEFORE_DRIVE = re.compile(r"^/+(?=[A-Za-z]:(?:[\\/]|$))")
_BARE_DRIVE = re.compile(r"[A-Za-z]:")


def is_windows_path(path: str) -> bool:
    """`C:\\...` or `C:/...`: a Windows client's absolute path."""
    return _WINDOWS_DRIVE.match(path) is not None


def canonical_project(path: str) -> str:
    """The project key for a path as sent: without NUL, trimmed, NFC, `.`/`..`/doubled and
    trailing separators folded; a Windows path (slashes before it dropped: `/C:/...` is
    `C:\\...`, and a drive alone its root: `/c:` and `C:` are `C:\\`) with backslashes and an
    upper-case drive letter."""
    # A NUL is removed, as `clean_text` removes it from every stored text: capture stored
    # `/x/p1\x00` as `/x/p1`, and a sync, which reads the path as sent, answered `does not
    # exist`. No folder name holds one, and Postgres cannot store one.
    path = path.replace("\x00", "")
    # macOS tools may send a decomposed "é" (NFD) where a typed path has the composed one.
    text = unicodedata.normalize("NFC", path.strip())
    # `/C:/...` was the POSIX key `/C:/...` in a body or a query, and `C:\...` in the context's
    # path form: one folder, two projects. No POSIX project is a folder named `C:` at the root.
    text = _SLASHES_BEFORE_DRIVE.sub("", text)
    if not text:
        return text
    # A drive alone is its root: `/C:` (`file:///c:`'s path) was the POSIX key `/C:` and `C:`
    # (`%HOMEDRIVE%`) the key `C:`, while `/api/context/C:` read `/C:`: three projects for
    # `C:\\`. Windows reads a bare `C:` as the drive's current folder, which no client names
    # as its project (it sends an absolute path).
    if _BARE_DRIVE.fullmatch(text):
        text += "\\"
    if is_windows_path(text):
        folded = ntpath.normpath(text)
        return folded[0].upper() + folded[1:]
    folded = posixpath.normpath(text)
    # POSIX lets `//x` mean something else than `/x`; no project path means that.
    return "/" + folded.lstrip("/") if folded.startswith("//") else folded


# How capture names a session it did not store (session/start of an excluded project).
EXCLUDED_PREFIX = "excluded-"


class ProjectExcluded(ValidationFailed):
    """A write for a project AGMEM_CAPTURE_EXCLUDE_PROJECTS excludes."""


def is_project_excluded(project_path: str, settings: Settings) -> bool:
    """True when the project matches one of AGMEM_CAPTURE_EXCLUDE_PROJECTS (fnmatch globs).

    Both sides in their canonical spelling (the globs are, from the settings); a Windows path
    matches without regard to case, as Windows itself opens it.
    """
    if not settings.capture_exclude_projects:
        return False
    path = canonical_project(project_path)
    windows = is_windows_path(path)
    if windows:
        path = path.casefold()
    return any(
        fnmatch.fnmatchcase(candidate, glob.casefold() if windows else glob)
        for glob in settings.capture_exclude_projects
        for candidate in (path, path.rstrip("/\\") + ("\\" if windows else "/"))
    )


def refuse_excluded(
    project_path: str, settings: Settings, what: str, *, session_id: str = ""
) -> None:
    """Raise ProjectExcluded for a write (`what`) an excluded project must not get: capture
    answers its interceptors `excluded` and stores nothing, and a memory or a sync that stored
    the project's text anyway defeated the setting. A session id capture minted for an excluded
    project (`excluded-…`) names one too."""
    if session_id.startswith(EXCLUDED_PREFIX):
        raise ProjectExcluded(
            f"session {session_id} is of a project excluded by AGMEM_CAPTURE_EXCLUDE_PROJECTS: "
            f"nothing is stored for it, {what} included"
        )
    if project_path and is_project_excluded(project_path, settings):
        raise ProjectExcluded(
            f"project {project_path} is excluded by AGMEM_CAPTURE_EXCLUDE_PROJECTS: "
            f"nothing is stored for it, {what} included"
        )
