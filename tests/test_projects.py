"""One folder, however a client spells it, is one project; two folders are never merged."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.projects import canonical_project


@pytest.mark.parametrize(
    ("sent", "key"),
    [
        ("/home/dev/shop", "/home/dev/shop"),
        ("/home/dev/shop/", "/home/dev/shop"),
        ("/home/dev/shop\x00", "/home/dev/shop"),  # removed, as capture removes it from text
        ("/home/\x00dev/shop/\x00", "/home/dev/shop"),
        (" /home//dev/./x/../shop ", "/home/dev/shop"),
        ("//home/dev/shop", "/home/dev/shop"),
        ("/home/dev/cafe\u0301 app", "/home/dev/caf\u00e9 app"),
        ("C:/Users/dev/shop/", "C:\\Users\\dev\\shop"),
        ("c:\\Users\\dev\\shop\\", "C:\\Users\\dev\\shop"),
        ("/", "/"),
        ("C:\\", "C:\\"),
        # A file URI's path (VS Code's `uri.path`), and the slash a client puts before any path.
        ("/c:/Users/dev/shop", "C:\\Users\\dev\\shop"),
        ("//C:\\Users\\dev\\shop\\", "C:\\Users\\dev\\shop"),
        # A drive alone is its root, after slashes (`file:///c:`'s path) or not (`%HOMEDRIVE%`).
        ("/C:", "C:\\"),
        ("//c:", "C:\\"),
        ("c:", "C:\\"),
        (" /C: ", "C:\\"),
        ("/C:x", "/C:x"),
        ("C:shop", "C:shop"),
        ("/home/C:/shop", "/home/C:/shop"),
        ("~/shop/", "~/shop"),
        ("shop", "shop"),
    ],
)
def test_spellings_of_one_folder_fold_to_one_key(sent: str, key: str) -> None:
    assert canonical_project(sent) == key


def test_different_folders_stay_apart() -> None:
    keys = {
        canonical_project(p)
        for p in ("/home/dev/shop", "/home/dev/shop2", "/home/dev/Shop", "/home/dev/shop app")
    }
    assert len(keys) == 4


def test_an_interceptors_spelling_meets_the_clis_in_every_api(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # An IDE hook sends the workspace folder with a trailing slash; `agmem sync` and the CLI send
    # os.path.abspath's form. They were two projects: the context block of one never saw the other.
    started = client.post("/api/session/start", json={"projectPath": "/home/dev/shop/", "id": "s"})
    assert started.json()["projectPath"] == "/home/dev/shop"
    client.post("/api/session/start", json={"projectPath": "/home/dev/x/../shop", "id": "t"})
    listed = client.get("/api/sessions", params={"projectPath": "/home/dev/shop//"}).json()
    assert sorted(s["id"] for s in listed["sessions"]) == ["s", "t"]
    everyone = client.get("/api/sessions", params={"projectPath": ""}).json()
    assert len(everyone["sessions"]) == 2

    put = client.put(
        "/api/memories/project.name", json={"value": "shop", "projectPath": "C:/Users/dev/shop/"}
    )
    assert put.json()["projectPath"] == "C:\\Users\\dev\\shop"
    got = client.get("/api/memories/project.name", params={"projectPath": "c:\\Users\\dev\\shop"})
    assert got.status_code == 200, got.text
    context = client.get(
        "/api/context", params={"projectPath": "c:/Users/dev/shop", "format": "json"}
    ).json()
    assert "project.name" in context["context"]
    # A blank projectPath is no filter, as an omitted one is (it matched no project at all).
    found = client.post(
        "/api/search", json={"query": "project.name", "projectPath": " ", "mode": "keyword"}
    ).json()
    assert [r["source"] for r in found["results"]] == ["kv"]
    rows = db.execute("SELECT DISTINCT project_path FROM sessions").fetchall()
    assert rows == [("/home/dev/shop",)]


def test_a_windows_key_sent_after_a_slash_is_found_by_every_form(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # `/C:/...` in a body or a query was the POSIX key `/C:/...`, and `C:\\...` in the context's
    # path form: what a client stored under the one, the other did not find (rev-leftovers26).
    slashed = "/C:/Users/dev/shop"
    started = client.post("/api/session/start", json={"projectPath": slashed, "id": "w"})
    assert started.json()["projectPath"] == "C:\\Users\\dev\\shop"
    put = client.put("/api/memories/project.name", json={"value": "shop", "projectPath": slashed})
    assert put.json()["projectPath"] == "C:\\Users\\dev\\shop"
    for spelling in (slashed, "C:/Users/dev/shop", "c:\\Users\\dev\\shop"):
        listed = client.get("/api/sessions", params={"projectPath": spelling}).json()
        assert [s["id"] for s in listed["sessions"]] == ["w"], spelling
        got = client.get("/api/memories/project.name", params={"projectPath": spelling})
        assert got.status_code == 200, spelling
        found = client.post(
            "/api/search",
            json={"query": "project.name", "projectPath": spelling, "mode": "keyword"},
        ).json()
        assert [r["source"] for r in found["results"]] == ["kv"], spelling
    for url in (
        "/api/context//C:/Users/dev/shop",
        "/api/context/C:/Users/dev/shop",
        "/api/context/%2FC%3A%2FUsers%2Fdev%2Fshop",
        "/api/context?projectPath=/C:/Users/dev/shop",
        "/api/context?projectPath=C:/Users/dev/shop",
    ):
        assert "project.name" in client.get(url).text, url


def test_a_bare_drive_is_its_root_in_every_form(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # `/C:` was the POSIX key `/C:` in a body or a query, `C:` the key `C:`, and the context's
    # path form read both as `/C:`: the drive's root was three projects apart from `C:\\`.
    put = client.put("/api/memories/project.name", json={"value": "d", "projectPath": "/c:"})
    assert put.json()["projectPath"] == "C:\\"
    started = client.post("/api/session/start", json={"projectPath": "C:", "id": "w"})
    assert started.json()["projectPath"] == "C:\\"
    for spelling in ("/C:", "C:", "C:\\", "C:/", "//c:/"):
        listed = client.get("/api/sessions", params={"projectPath": spelling}).json()
        assert [s["id"] for s in listed["sessions"]] == ["w"], spelling
        got = client.get("/api/memories/project.name", params={"projectPath": spelling})
        assert got.status_code == 200, spelling
    for url in ("/api/context/C:", "/api/context//c:", "/api/context?projectPath=/C:"):
        assert "project.name" in client.get(url).text, url
    assert db.execute("SELECT DISTINCT project_path FROM memories").fetchall() == [("C:\\",)]
