"""Project keys of a bare drive (`/C:`, `C:`) become the drive's Windows key `C:\\`

`app.projects.canonical_project` folded `/C:/Users/...` to `C:\\Users\\...` but kept `/C:` as the
POSIX key `/C:` and `C:` as `C:`, while the context's path form read `/api/context/C:` as `/C:`:
a drive's root, sent as a file URI's path (`/c:`) or as `%HOMEDRIVE%` (`C:`), was a project apart
from `C:\\`, `C:/` and `/C:/`. Both now fold to `C:\\`; this moves the rows stored under the old
keys there, as migration 0009 moved `/C:/...` (its `move_keys`: a memory both spellings hold
keeps the older value under `<key> (duplicate spelling)`, one indexed file of a path stays, the
daily LLM usage is added up). The downgrade leaves the keys folded.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BARE_DRIVE = r"^/*[A-Za-z]:$"


def fold(path: str) -> str:
    """canonical_project of this revision for such a key (frozen here: the app's may change)."""
    return path.lstrip("/")[0].upper() + ":\\"


def _revision_0009() -> ModuleType:
    # A revision file is no importable module (its name opens with a digit): loaded by its path.
    path = Path(__file__).with_name("0009_windows_project_keys.py")
    spec = importlib.util.spec_from_file_location("agmem_revision_0009", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    bind = op.get_bind()
    moves = _revision_0009()
    moves.move_keys(bind, {key: fold(key) for key in moves.stored_keys(bind, BARE_DRIVE)})


def downgrade() -> None:
    pass
