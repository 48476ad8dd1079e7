"""A sync touches the indexed files of its own roots only; another root's go by `forget`.

A sync of the default memory root that forgot a custom root's flag (`agmem sync` after `agmem
sync --memory-dir notes`, or the API without `memoryDir`) deleted every file of that root, which
the next sync naming it indexed (and embedded) again (rev-leftovers26)."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path
from typing import Any

import psycopg
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from tests.sync.helpers import TESTDATA, CountingEmbedder, make_project, run_sync
from tests.sync.test_routes import execute


def with_custom_roots(root: Path) -> Path:
    """`make_project`, plus a memory root `notes/` and a transcripts folder `chats/`."""
    project = make_project(root)
    (project / "notes" / "memory").mkdir(parents=True)
    (project / "notes" / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    (project / "notes" / "memory" / "deploy.md").write_text("# Deploy\n\nShip on Fridays.\n")
    (project / "chats").mkdir()
    shutil.copy(
        TESTDATA / "claude-code" / "entire_c9883595c929_v2.0.74_small.jsonl",
        project / "chats" / "chat.jsonl",
    )
    return project


def indexed_from_every_root(
    database_url: str, settings: Settings, tmp_path: Path
) -> tuple[Path, CountingEmbedder]:
    """A project of both roots, synced with the custom ones and then with the defaults."""
    project = with_custom_roots(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project, memory_dir="notes", sessions_dir="chats")
    run_sync(database_url, settings, embedder, project)
    return project, embedder


def indexed(db: psycopg.Connection[Any], project: Path) -> set[str]:
    """The indexed files that hold chunks, relative to the project."""
    rows = db.execute(
        "SELECT DISTINCT f.path FROM memory_files f JOIN memory_chunks c ON c.file_id = f.id"
    ).fetchall()
    return {str(Path(path).relative_to(project)) for (path,) in rows}


DEFAULT = {
    "MEMORY.md",
    "memory/a.md",
    "memory/bank/nftbk_memory-bank_progress.md",
    "memory/bank/nftbk_memory-bank_systemPatterns.md",
    "sessions/small.jsonl",
    "sessions/legacy.json",
}
CUSTOM = {"notes/MEMORY.md", "notes/memory/deploy.md", "chats/chat.jsonl"}


def test_a_sync_of_the_default_roots_keeps_a_custom_roots_chunks(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = with_custom_roots(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project, memory_dir="notes", sessions_dir="chats")

    plain = run_sync(database_url, settings, embedder, project)

    assert plain.files_deleted == 0
    assert indexed(db, project) == DEFAULT | CUSTOM
    # The custom root's files are its own sync's: one deleted there is not this sync's to drop,
    # and the next sync naming the root drops it.
    (project / "notes" / "memory" / "deploy.md").unlink()
    assert run_sync(database_url, settings, embedder, project).files_deleted == 0
    assert indexed(db, project) == DEFAULT | CUSTOM
    named = run_sync(
        database_url, settings, embedder, project, memory_dir="notes", sessions_dir="chats"
    )
    assert (named.files_deleted, named.files_changed) == (1, 0)
    assert indexed(db, project) == (DEFAULT | CUSTOM) - {"notes/memory/deploy.md"}


def test_a_watch_sync_of_a_root_folder_keeps_another_roots_chunks(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A watcher's event on a root folder itself (`memory/` made again by a `git checkout`) makes
    # its sync a whole one: it too dropped every file of the roots the watch was not given.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)
    (project / "memory" / "a.md").unlink()

    report = run_sync(database_url, settings, embedder, project, changed=[project / "memory"])

    assert report.files_deleted == 1
    assert indexed(db, project) == (DEFAULT | CUSTOM) - {"memory/a.md"}


def test_forget_drops_a_roots_files_even_when_its_folder_is_gone(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)
    shutil.rmtree(project / "chats")

    forgot = run_sync(database_url, settings, embedder, project, forget_dirs=("notes", "chats"))

    assert (forgot.files_deleted, forgot.files_changed) == (3, 0)
    assert indexed(db, project) == DEFAULT
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (len(DEFAULT),)


def test_files_indexed_before_roots_were_recorded_are_judged_by_their_place(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Rows from before the column (root NULL): a file the sync's listing would find, were it on
    # disk, is the sync's; any other is another root's, kept until its root is synced or
    # forgotten. The sync's own found files get their root recorded.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)
    db.execute("UPDATE memory_files SET root = NULL")
    (project / "memory" / "a.md").unlink()
    (project / "sessions" / "small.jsonl").unlink()

    report = run_sync(database_url, settings, embedder, project)

    assert (report.files_deleted, report.files_changed) == (2, 0)
    left = (DEFAULT | CUSTOM) - {"memory/a.md", "sessions/small.jsonl"}
    assert indexed(db, project) == left
    roots = dict(db.execute("SELECT path, root FROM memory_files").fetchall())
    assert roots[str(project / "MEMORY.md")] == str(project)
    assert roots[str(project / "sessions" / "legacy.json")] == str(project / "sessions")
    assert roots[str(project / "notes" / "MEMORY.md")] is None
    forgot = run_sync(database_url, settings, embedder, project, forget_dirs=("notes", "chats"))
    assert forgot.files_deleted == 3
    assert indexed(db, project) == left - CUSTOM


def test_the_cli_keeps_other_roots_and_forgets_one_on_purpose(
    env: dict[str, str], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = with_custom_roots(tmp_path / "proj")
    runner = CliRunner()
    custom = ["sync", "-p", str(project), "--memory-dir", "notes", "--sessions-dir", "chats"]
    assert runner.invoke(cli, custom, env=env).exit_code == 0
    plain = runner.invoke(cli, ["sync", "-p", str(project)], env=env)
    assert plain.exit_code == 0, plain.output
    assert indexed(db, project) == DEFAULT | CUSTOM

    # Emptied on purpose: naming the root is refused (a root one level off looks the same), and
    # the error says how to drop what it held.
    (project / "notes" / "MEMORY.md").unlink()
    shutil.rmtree(project / "notes" / "memory")
    refused = runner.invoke(cli, [*custom[:3], "--memory-dir", "notes"], env=env)
    assert refused.exit_code == 1
    assert refused.stderr.strip().splitlines() == [
        f"agmem: error: memory folder {project / 'notes'} holds no memory file (MEMORY.md, "
        "memory.md or memory/): name the folder that holds them, or drop what was indexed "
        "from it with --forget-dir"
    ]
    forget = ["sync", "-p", str(project), "--forget-dir", "notes", "--forget-dir", "chats"]
    forgot = runner.invoke(cli, forget, env=env)
    assert forgot.exit_code == 0, forgot.output
    assert "deleted 3 ·" in forgot.stdout
    assert indexed(db, project) == DEFAULT
    again = runner.invoke(cli, [*forget[:3], "--forget-dir", "nope"], env=env)
    assert again.exit_code == 0, again.output
    assert f"warning: no indexed file under {project / 'nope'} to forget" in again.stderr
    both = runner.invoke(
        cli, [*custom[:3], "--sessions-dir", "sessions", "--forget-dir", "sessions"], env=env
    )
    assert both.exit_code == 1
    assert "cannot both sync and forget" in both.stderr
    watching = runner.invoke(cli, [*forget[:3], "--forget-dir", "notes", "--watch"], env=env)
    assert watching.exit_code == 1
    assert "--forget-dir takes no --watch" in watching.stderr


def test_the_api_keeps_other_roots_forgets_on_request_and_names_an_empty_root(
    client: TestClient,
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    project = with_custom_roots(tmp_path / "proj")

    def run(body: dict[str, Any]) -> dict[str, Any]:
        answer = client.post("/api/sync", json={"projectPath": str(project), **body})
        assert answer.status_code == 202, answer.json()
        execute(database_url, settings, answer.json()["runId"])
        done: dict[str, Any] = client.get(f"/api/sync/{answer.json()['runId']}").json()
        assert done["status"] == "done", done
        return done

    run({"memoryDir": "notes", "sessionsDir": "chats"})
    assert run({})["filesDeleted"] == 0
    # A warning has a field of its own: it is no error of the run.
    forgot_nothing = run({"forgetDirs": ["nope"]})
    assert (forgot_nothing["errors"], forgot_nothing["warnings"]) == (
        [],
        [f"no indexed file under {project / 'nope'} to forget"],
    )
    assert indexed(db, project) == DEFAULT | CUSTOM

    (project / "notes" / "MEMORY.md").unlink()
    shutil.rmtree(project / "notes" / "memory")
    refused = client.post("/api/sync", json={"projectPath": str(project), "memoryDir": "notes"})
    assert refused.status_code == 422
    assert refused.json() == {
        "error": "MemoryFilesNotFound",
        "detail": f"memory folder {project / 'notes'} holds no memory file (MEMORY.md, "
        "memory.md or memory/): name the folder that holds them, or drop what was indexed from "
        "it with forgetDirs",
    }
    assert run({"forgetDirs": ["notes", "chats"]})["filesDeleted"] == 3
    assert indexed(db, project) == DEFAULT
    clash = client.post(
        "/api/sync",
        json={"projectPath": str(project), "sessionsDir": "chats", "forgetDirs": ["chats"]},
    )
    assert clash.status_code == 422
    assert clash.json()["error"] == "ValidationFailed"
    # Stored with the run, not looked up: a NUL reached Postgres, which refuses it in text.
    nul = client.post("/api/sync", json={"projectPath": str(project), "forgetDirs": ["a\u0000"]})
    assert (nul.status_code, nul.json()["error"]) == (422, "ValidationFailed")


def test_two_spellings_of_one_folder_index_its_files_once(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # macOS gives the shell's cwd NFD while a typed -p or an API body is NFC: one folder, one
    # project key, two spellings of every path. A link stands in for the second spelling here.
    composed = make_project(tmp_path / unicodedata.normalize("NFC", "café"))
    decomposed = tmp_path / unicodedata.normalize("NFD", "café")
    decomposed.symlink_to(composed, target_is_directory=True)
    embedder = CountingEmbedder()
    first = run_sync(database_url, settings, embedder, decomposed)

    run_sync(database_url, settings, embedder, composed)

    files, chunks = db.execute(
        "SELECT count(DISTINCT f.id), count(c.id) FROM memory_files f "
        "LEFT JOIN memory_chunks c ON c.file_id = f.id"
    ).fetchone() or (0, 0)
    assert (files, chunks) == (len(DEFAULT), first.chunks_written)
    # Roots are stored composed, as the project key is, whichever spelling synced.
    roots = db.execute("SELECT DISTINCT root FROM memory_files").fetchall()
    assert {root for (root,) in roots} == {str(composed), str(composed / "sessions")}


def test_a_file_two_overlapping_roots_list_keeps_its_root_and_goes_when_deleted(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # `memory/MEMORY.md` is the default root's (under its `memory/`) and `--memory-dir memory`'s
    # (a root file). The second sync took it over with an UPDATE at every alternation, and once
    # deleted neither sync dropped it: `--memory-dir memory` is refused for a root without a
    # memory file, and the default root's sync left a file recorded under another root.
    project = make_project(tmp_path / "proj")
    shared = project / "memory" / "MEMORY.md"
    shared.write_text("# Shared\n\nListed by two roots.\n")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project, memory_dir="memory")

    run_sync(database_url, settings, embedder, project)

    root = db.execute("SELECT root FROM memory_files WHERE path = %s", (str(shared),)).fetchone()
    assert root == (str(project / "memory"),)
    shared.unlink()
    plain = run_sync(database_url, settings, embedder, project)
    assert plain.files_deleted == 1
    assert "memory/MEMORY.md" not in indexed(db, project)


def test_forgetting_a_parent_folder_keeps_transcripts_indexed_before_roots(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Judged by the path alone, `--forget-dir /` (or the project, or any folder above it) is a
    # sessions folder holding every transcript: it dropped another folder's (chats/) unrecorded.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)
    db.execute("UPDATE memory_files SET root = NULL")

    forgot = run_sync(database_url, settings, embedder, project, forget_dirs=("/", ".."))

    assert forgot.files_deleted == 0
    assert indexed(db, project) == DEFAULT | CUSTOM


def test_a_folder_to_forget_that_holds_no_indexed_file_is_reported(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A mistyped folder (`--forget-dir nope` for `notes`) forgot nothing and said nothing.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)

    forgot = run_sync(database_url, settings, embedder, project, forget_dirs=("nope", "chats"))

    assert forgot.files_deleted == 1
    # A warning, not an error: the run did what it was asked.
    assert forgot.errors == []
    assert forgot.warnings == [f"no indexed file under {project / 'nope'} to forget"]


def test_a_sync_names_the_other_roots_whose_files_it_kept(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A custom root renamed or removed kept its chunks in search, and no sync said so.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)
    shutil.rmtree(project / "notes")

    plain = run_sync(database_url, settings, embedder, project)

    assert plain.files_deleted == 0
    # chats/ is still there and holds its own files: only the gone root is worth a word.
    assert plain.errors == []
    assert plain.warnings == [
        "kept 2 files of folders that are gone: notes/ (forget them to drop them)"
    ]


def test_a_sync_says_nothing_of_other_roots_still_on_disk(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Every sync of the default roots said "kept 3 files of other roots: chats/, notes/" once a
    # custom root existed: a warning for the normal state, which users learn to skip.
    project, embedder = indexed_from_every_root(database_url, settings, tmp_path)

    plain = run_sync(database_url, settings, embedder, project)

    assert (plain.errors, plain.warnings) == ([], [])


def test_a_gone_roots_error_hints_forgetting_only_when_it_held_files(
    client: TestClient,
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    project, _ = indexed_from_every_root(database_url, settings, tmp_path)
    shutil.rmtree(project / "notes")
    for folder, hint in (("notes", True), ("nots", False)):
        refused = client.post("/api/sync", json={"projectPath": str(project), "memoryDir": folder})
        assert refused.status_code == 422
        detail = f"memory folder {project / folder} does not exist"
        if hint:
            detail += " (renamed or removed? drop what was indexed from it with forgetDirs)"
        assert refused.json() == {"error": "ProjectFolderNotFound", "detail": detail}
