"""The schema head read from the migration scripts without Alembic (app/db/revision.py).

Whatever shape of script the parse does not read must give None (`agmem serve` then runs
Alembic's upgrade) rather than an exception or a wrong head: a wrong head skips a migration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.db.revision import script_head_in

HEADER = "import sqlalchemy as sa\nfrom alembic import op\n\n"


def script(revision: str, down: str | None, *, style: str = "annotated") -> str:
    if style == "annotated":
        return (
            f"revision: str = {revision!r}\ndown_revision: str | Sequence[str] | None = {down!r}\n"
        )
    return f"revision = {revision!r}\ndown_revision = {down!r}\n"


def versions(tmp_path: Path, *scripts: str) -> Path:
    folder = tmp_path / "versions"
    folder.mkdir()
    for number, text in enumerate(scripts, start=1):
        (folder / f"{number:04d}_step.py").write_text(HEADER + text, encoding="utf-8")
    return folder


def test_a_chain_in_either_style_has_its_last_revision_as_head(tmp_path: Path) -> None:
    folder = versions(
        tmp_path,
        script("0001", None),
        script("0002", "0001", style="plain"),
        script("0003", "0002"),
    )
    assert script_head_in(folder) == "0003"


def test_a_merge_revision_is_the_head_of_both_branches(tmp_path: Path) -> None:
    folder = versions(
        tmp_path,
        script("0001", None),
        script("0002a", "0001"),
        script("0002b", "0001"),
        "revision = '0003'\ndown_revision = ('0002a', '0002b')\n",
    )
    assert script_head_in(folder) == "0003"


@pytest.mark.parametrize(
    "other",
    [
        # Every top-level assignment was evaluated as a literal: these made `agmem serve` exit
        # with a ValueError traceback.
        'items = sa.table("items", sa.column("id"))\n',
        'NAME = "items"\nINDEX = f"ix_{NAME}_id"\n',
        "LIMIT: int = 10 * 2\n",
    ],
)
def test_other_assignments_of_any_shape_leave_the_head_alone(tmp_path: Path, other: str) -> None:
    folder = versions(tmp_path, script("0001", None), other + script("0002", "0001"))
    assert script_head_in(folder) == "0002"


@pytest.mark.parametrize(
    "last",
    [
        # Valid for Alembic, and was ignored: the head read was 0001, and serve skipped 0002.
        'revision, down_revision = "0002", "0001"\n',
        '(revision, down_revision) = ("0002", "0001")\n',
        'revision = down_revision = "0002"\nrevision = "0002"\ndown_revision = "0001"\n',
        # Not literals: only Alembic knows what they come to.
        'PREFIX = "00"\nrevision = PREFIX + "02"\ndown_revision = "0001"\n',
        'revision = f"{2:04d}"\ndown_revision = "0001"\n',
        # Assigned twice (the module's last binding wins), or bound some other way.
        script("0002", "0001") + 'revision = "0003"\n',
        script("0002", "0001") + "if True:\n    revision = '0003'\n",
        script("0002", "0001") + "for revision in ['0003']:\n    pass\n",
        script("0002", "0001") + "from os import sep as revision\n",
        script("0002", "0001") + "def revision() -> None:\n    pass\n",
        # Missing, or of a type Alembic refuses.
        'down_revision = "0001"\n',
        'revision = "0002"\n',
        'revision: str\nrevision = "0002"\ndown_revision = "0001"\n',
        'revision = 2\ndown_revision = "0001"\n',
        'revision = "0002"\ndown_revision = 1\n',
        # Not a script Python can read.
        'revision = "0002"\ndown_revision = "0001"\ndef upgrade(:\n',
    ],
)
def test_a_script_the_parse_does_not_understand_gives_no_head(tmp_path: Path, last: str) -> None:
    folder = versions(tmp_path, script("0001", None), last)
    assert script_head_in(folder) is None


def test_two_scripts_of_one_revision_give_no_head(tmp_path: Path) -> None:
    folder = versions(
        tmp_path, script("0001", None), script("0002", "0001"), script("0002", "0001")
    )
    assert script_head_in(folder) is None


def test_a_script_revising_an_unknown_revision_gives_no_head(tmp_path: Path) -> None:
    folder = versions(tmp_path, script("0001", None), script("0002", "0000"))
    assert script_head_in(folder) is None


def test_two_heads_give_no_head(tmp_path: Path) -> None:
    folder = versions(
        tmp_path, script("0001", None), script("0002a", "0001"), script("0002b", "0001")
    )
    assert script_head_in(folder) is None


def test_no_scripts_give_no_head(tmp_path: Path) -> None:
    assert script_head_in(versions(tmp_path)) is None


def test_files_alembic_does_not_load_are_not_read(tmp_path: Path) -> None:
    # Alembic skips a package's __init__.py and editors' lock files (.#name.py).
    folder = versions(tmp_path, script("0001", None), script("0002", "0001"))
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / ".#0002_step.py").write_text("not python (", encoding="utf-8")
    assert script_head_in(folder) == "0002"
