"""`agmem sync --prune-missing`: the indexed files of a project whose folder is gone."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.projects import canonical_project


def _indexed(tmp_path: Path, database_url: str, name: str) -> tuple[Path, dict[str, str]]:
    project = tmp_path / name
    (project / "memory").mkdir(parents=True)
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    (project / "memory" / "a.md").write_text("# A\n\nThe deploy goes through staging.\n")
    env = {"DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(cli, ["sync", "-p", str(project)], env=env)
    assert result.exit_code == 0, result.output
    return project, env


def test_prune_missing_drops_the_file_rows_of_a_project_whose_folder_is_gone(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    gone, env = _indexed(tmp_path, database_url, "gone")
    kept, _ = _indexed(tmp_path, database_url, "kept")
    key = canonical_project(str(gone))
    # A captured observation of the project: not the sync's, so never pruned.
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, content, hash) "
        "VALUES (%s, 'observation', 'ran the tests', 'h')",
        (key,),
    )
    shutil.rmtree(gone)
    refused = CliRunner().invoke(cli, ["sync", "-p", str(gone)], env=env)
    assert refused.exit_code == 1
    assert "does not exist" in refused.output

    result = CliRunner().invoke(cli, ["sync", "-p", str(gone), "--prune-missing"], env=env)

    assert result.exit_code == 0, result.output
    assert f"dropping 2 indexed files (2 chunks) of {gone}" in result.output
    assert "dropped 2 files" in result.stdout
    assert db.execute(
        "SELECT project_path, source, count(*) FROM memory_chunks GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall() == sorted([(key, "observation", 1), (canonical_project(str(kept)), "memory", 2)])
    assert db.execute("SELECT DISTINCT project_path FROM memory_files").fetchall() == [
        (canonical_project(str(kept)),)
    ]


def test_prune_missing_refuses_a_project_whose_folder_is_there(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # An unmounted drive's mount point, or a typo'd folder that exists: nothing is dropped.
    project, env = _indexed(tmp_path, database_url, "here")

    result = CliRunner().invoke(cli, ["sync", "-p", str(project), "--prune-missing"], env=env)

    assert result.exit_code == 1
    assert "exists" in result.output
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (2,)


def _move_the_folder(target: Path, link: Path) -> None:
    target.rename(target.parent / "moved")


def _make_the_link_loop(target: Path, link: Path) -> None:
    link.unlink()
    link.symlink_to(link.parent / "back")
    (link.parent / "back").symlink_to(link)


@pytest.mark.parametrize("gone", [_move_the_folder, _make_the_link_loop], ids=["moved", "loop"])
def test_prune_missing_drops_a_project_reached_through_a_link_that_leads_nowhere(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    gone: Callable[[Path, Path], None],
) -> None:
    # A project opened through a link (`~/work/shop -> /data/shop`) whose folder then moved, or
    # whose link now loops: the sync said the folder does not exist, and the prune that it
    # exists (the link itself) or that it could not tell (too many levels of links), so its
    # rows could go by neither.
    target, env = _indexed(tmp_path, database_url, "target")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert CliRunner().invoke(cli, ["sync", "-p", str(link)], env=env).exit_code == 0
    gone(target, link)
    refused = CliRunner().invoke(cli, ["sync", "-p", str(link)], env=env)
    assert refused.exit_code == 1
    assert "does not exist" in refused.output

    result = CliRunner().invoke(cli, ["sync", "-p", str(link), "--prune-missing"], env=env)

    assert result.exit_code == 0, result.output
    assert "dropped 2 files" in result.stdout
    assert db.execute("SELECT DISTINCT project_path FROM memory_files").fetchall() == [
        (canonical_project(str(target)),)
    ]
