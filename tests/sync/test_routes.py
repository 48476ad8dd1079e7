from __future__ import annotations

import asyncio
import os
import unicodedata
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.sync.runs import execute_sync_run
from tests.sync.helpers import make_project


def execute(database_url: str, settings: Settings, run_id: str) -> None:
    async def go() -> None:
        engine = make_async_engine(database_url)
        try:
            await execute_sync_run(make_sessionmaker(engine), settings, run_id)
        finally:
            await engine.dispose()

    asyncio.run(go())


def test_post_queues_a_run_that_the_worker_entry_point_executes(
    client: TestClient,
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "proj")
    (project / "memory" / "blob.md").write_bytes(b"\x00\x01binary")

    answer = client.post("/api/sync", json={"projectPath": str(project)})

    assert answer.status_code == 202
    run_id = answer.json()["runId"]
    queued = client.get(f"/api/sync/{run_id}").json()
    assert queued["status"] == "queued"
    assert queued["filesScanned"] == 0

    execute(database_url, settings, run_id)

    done = client.get(f"/api/sync/{run_id}").json()
    assert done["status"] == "done"
    assert done["filesScanned"] == 7
    assert done["filesChanged"] == 6
    assert done["chunksWritten"] > 0
    assert done["embeddingsComputed"] > 0
    assert done["skipped"] == 1
    assert done["skippedFiles"] == [
        {"path": str(project / "memory" / "blob.md"), "reason": "binary file"}
    ]
    assert done["errors"] == []
    passed_over = done["transcriptItemsSkipped"]
    assert passed_over["file-history-snapshot"] == 2
    assert passed_over["queue-operation"] == 1
    assert done["finishedAt"] is not None
    assert all(done[at].endswith("Z") for at in ("createdAt", "startedAt", "finishedAt"))
    chunks = db.execute("SELECT count(*) FROM memory_chunks").fetchone()
    assert chunks == (done["chunksWritten"],)

    # Executing a finished run again does nothing.
    execute(database_url, settings, run_id)
    assert client.get(f"/api/sync/{run_id}").json() == done


def test_run_with_custom_folders_and_failure_is_recorded(
    client: TestClient,
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "proj")
    (project / "sessions").rename(project / "chats")
    (project / "notes").mkdir()
    # A folder the request names must exist: a typo is refused, not a silent empty sync. One
    # that holds neither MEMORY.md nor memory/ is a root one level off: a run there found no
    # memory file and deleted the chunks of those indexed from the right root.
    # That one exists: it is MemoryFilesNotFound, not "not found" (rev-leftovers26).
    for folder, error, problem in (
        (
            "nowhere",
            "ProjectFolderNotFound",
            # Never indexed: no hint to forget it (it dropped nothing).
            "does not exist",
        ),
        (
            "notes",
            "MemoryFilesNotFound",
            "holds no memory file (MEMORY.md, memory.md or memory/): name the folder that holds "
            "them",
        ),
    ):
        refused = client.post(
            "/api/sync",
            json={"projectPath": str(project), "sessionsDir": "chats", "memoryDir": folder},
        )
        assert refused.status_code == 422
        assert refused.json() == {
            "error": error,
            "detail": f"memory folder {project / folder} {problem}",
        }
    assert db.execute("SELECT count(*) FROM sync_runs").fetchone() == (0,)
    (project / "MEMORY.md").rename(project / "notes" / "MEMORY.md")
    answer = client.post(
        "/api/sync",
        json={"projectPath": str(project), "sessionsDir": "chats", "memoryDir": "notes"},
    )
    run_id = answer.json()["runId"]
    execute(database_url, settings, run_id)
    done = client.get(f"/api/sync/{run_id}").json()
    assert done["status"] == "done"
    assert done["filesScanned"] == 3  # notes/MEMORY.md and the two transcripts in chats/

    project_gone = tmp_path / "gone"
    project_gone.mkdir()
    run_id = client.post("/api/sync", json={"projectPath": str(project_gone)}).json()["runId"]
    project_gone.rmdir()
    execute(database_url, settings, run_id)
    failed = client.get(f"/api/sync/{run_id}").json()
    assert failed["status"] == "failed"
    assert "does not exist" in failed["errors"][0]


def test_bad_requests_get_clear_errors(client: TestClient, tmp_path: Path) -> None:
    cases = [
        ({"projectPath": "relative/path"}, 422, "ProjectFolderNotFound"),
        ({"projectPath": str(tmp_path / "missing")}, 422, "ProjectFolderNotFound"),
        ({"projectPath": str(tmp_path), "sessionsDir": "a\u0000b"}, 422, "ProjectFolderNotFound"),
        ({}, 422, "ValidationFailed"),
        ({"projectPath": str(tmp_path), "force": "maybe"}, 422, "ValidationFailed"),
        ({"projectPath": str(tmp_path), "extra": 1}, 422, "ValidationFailed"),
        # A name longer than the file system allows (ENAMETOOLONG) was a 500.
        ({"projectPath": str(tmp_path / ("x" * 300))}, 422, "ProjectFolderNotFound"),
        ({"projectPath": str(tmp_path), "memoryDir": "m" * 4000}, 422, "ProjectFolderNotFound"),
    ]
    for body, status, error in cases:
        answer = client.post("/api/sync", json=body)
        assert (answer.status_code, answer.json()["error"]) == (status, error), body
    bad_json = client.post(
        "/api/sync", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    for run_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        missing = client.get(f"/api/sync/{run_id}")
        assert (missing.status_code, missing.json()["error"]) == (404, "SyncRunNotFound")


@pytest.mark.parametrize("name", ["trail ", unicodedata.normalize("NFD", "café")])
def test_a_folder_is_read_as_the_client_spells_it_and_stored_under_its_key(
    name: str,
    tmp_path: Path,
    client: TestClient,
    db: psycopg.Connection[Any],
    database_url: str,
    settings: Settings,
) -> None:
    # As `agmem sync -p` does: the key (NFC, trimmed) named no folder on disk, and a macOS
    # client's NFD folder was "does not exist".
    project = tmp_path / name
    project.mkdir()
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    key = unicodedata.normalize("NFC", str(project)).strip()

    answer = client.post("/api/sync", json={"projectPath": str(project)})

    assert answer.status_code == 202, answer.json()
    run_id = answer.json()["runId"]
    execute(database_url, settings, run_id)
    done = client.get(f"/api/sync/{run_id}").json()
    assert (done["status"], done["filesChanged"], done["projectPath"]) == ("done", 1, key)
    stored = db.execute("SELECT DISTINCT project_path FROM memory_chunks").fetchall()
    assert stored == [(key,)]


def test_a_nul_in_the_project_path_is_removed_as_capture_removes_it(
    client: TestClient,
    db: psycopg.Connection[Any],
    database_url: str,
    settings: Settings,
    tmp_path: Path,
) -> None:
    # Capture stored `/x/p1\u0000` as `/x/p1`, and a sync of the same path was a 422
    # `does not exist`: the project's sessions could be captured and never synced.
    project = tmp_path / "p1"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    sent = f"{project}\u0000"
    captured = client.post("/api/session/start", json={"projectPath": sent, "id": "s"})
    assert captured.json()["projectPath"] == str(project)

    answer = client.post("/api/sync", json={"projectPath": sent})

    assert answer.status_code == 202, answer.json()
    execute(database_url, settings, answer.json()["runId"])
    done = client.get(f"/api/sync/{answer.json()['runId']}").json()
    assert (done["status"], done["projectPath"]) == ("done", str(project))
    stored = db.execute("SELECT DISTINCT project_path FROM memory_chunks").fetchall()
    assert stored == [(str(project),)]


def test_a_folder_named_by_its_key_is_still_found(
    client: TestClient, database_url: str, settings: Settings, tmp_path: Path
) -> None:
    # A path the folder's key names (a stray space, an NFD spelling of an NFC folder) is read
    # as that key, as it was before the spelling was kept.
    project = tmp_path / "café"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    for spelling in (f" {project}", unicodedata.normalize("NFD", str(project))):
        answer = client.post("/api/sync", json={"projectPath": spelling})
        assert answer.status_code == 202, answer.json()
        execute(database_url, settings, answer.json()["runId"])
        done = client.get(f"/api/sync/{answer.json()['runId']}").json()
        assert (done["status"], done["projectPath"]) == ("done", str(project))
    # The disk has the NFD folder and the client sends NFC: no folder has that name.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / unicodedata.normalize("NFD", "é")).mkdir()
    missing = client.post("/api/sync", json={"projectPath": str(tmp_path / "d" / "é")})
    assert (missing.status_code, missing.json()["error"]) == (422, "ProjectFolderNotFound")


def test_a_file_name_that_is_not_utf8_is_skipped_not_the_run_failed(
    client: TestClient, database_url: str, settings: Settings, tmp_path: Path
) -> None:
    # Postgres keeps UTF-8 text: the path (lone surrogates in Python) failed the whole run with
    # UnicodeEncodeError, every other file unindexed.
    project = tmp_path / "proj"
    (project / "memory").mkdir(parents=True)
    (project / "memory" / "ok.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    folder = os.fsencode(project / "memory")
    with open(folder + b"/caf\xe9.md", "wb") as latin1:
        latin1.write(b"# Latin-1 name\n\nA note.\n")
    os.mkdir(folder + b"/d\xff")
    with open(folder + b"/d\xff/inside.md", "wb") as inside:
        inside.write(b"# Inside\n\nA note.\n")

    run_id = client.post("/api/sync", json={"projectPath": str(project)}).json()["runId"]
    execute(database_url, settings, run_id)

    done = client.get(f"/api/sync/{run_id}").json()
    assert (done["status"], done["filesChanged"], done["errors"]) == ("done", 1, [])
    assert sorted(done["skippedFiles"], key=lambda s: s["path"]) == [
        {"path": f"{project}/memory/caf\ufffd.md", "reason": "file name is not UTF-8"},
        {"path": f"{project}/memory/d\ufffd/inside.md", "reason": "file name is not UTF-8"},
    ]


@pytest.mark.parametrize("field", ["force", "reembed"])
@pytest.mark.parametrize("sent", ["yes", "true", 1, 0, "0"])
def test_a_flag_sent_as_text_or_a_number_is_refused(
    client: TestClient, db: psycopg.Connection[Any], tmp_path: Path, field: str, sent: Any
) -> None:
    # pydantic's lax mode read "yes", "true" and 1 as true (and "0", 0 as false): a sync ran
    # forced on a word, where every other wrong type is a 422.
    answer = client.post("/api/sync", json={"projectPath": str(tmp_path), field: sent})

    assert answer.status_code == 422
    assert answer.json()["error"] == "ValidationFailed"
    assert field in answer.json()["detail"]
    assert db.execute("SELECT count(*) FROM sync_runs").fetchone() == (0,)


@pytest.mark.parametrize("sent", ["C:\\Users\\dev\\shop", "/C:"])
def test_a_windows_path_on_a_posix_server_is_named_as_one(client: TestClient, sent: str) -> None:
    # Read as a relative name under the server's folder, it was "project folder
    # /srv/C:\Users\dev\shop does not exist": a folder the client never named. A drive alone
    # (`/C:`, the key `C:\\`) was "/C: does not exist".
    answer = client.post("/api/sync", json={"projectPath": sent})

    assert answer.status_code == 422
    assert answer.json() == {
        "error": "ProjectFolderNotFound",
        "detail": f"project folder {sent} is a Windows path: this server reads "
        "POSIX paths (sync it on the machine that holds it)",
    }
