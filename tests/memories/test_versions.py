"""Version history and optimistic concurrency (ifVersion / If-Match)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.memories.routes import InvalidIfMatch, parse_if_match
from tests.memories.helpers import PROJECT, put, url


def test_two_agents_writing_one_shared_key_lose_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "shared.plan", "claude's plan", scope="shared", createdBy="claude")
    put(client, "shared.plan", "gemini's plan", scope="shared", createdBy="gemini")
    latest = put(client, "shared.plan", "merged plan", scope="shared", createdBy="claude")
    assert latest["version"] == 3
    assert latest["createdBy"] == "claude"
    assert latest["updatedBy"] == "claude"

    got = client.get(url("shared.plan"), params={"projectPath": PROJECT, "history": "true"})
    assert got.status_code == 200
    history = [(v["version"], v["value"], v["writtenBy"]) for v in got.json()["history"]]
    assert history == [(2, "gemini's plan", "gemini"), (1, "claude's plan", "claude")]
    assert db.execute("SELECT count(*) FROM memory_versions").fetchone() == (2,)


def test_stale_if_version_is_409_and_changes_nothing(client: TestClient) -> None:
    put(client, "project.plan", "v1")
    put(client, "project.plan", "v2", ifVersion=1)
    stale = client.put(
        url("project.plan"), json={"value": "lost?", "projectPath": PROJECT, "ifVersion": 1}
    )
    assert stale.status_code == 409
    assert stale.json()["error"] == "VersionConflict"
    assert "version 2" in stale.json()["detail"]
    got = client.get(url("project.plan"), params={"projectPath": PROJECT}).json()
    assert (got["value"], got["version"]) == ("v2", 2)


def test_if_match_header(client: TestClient) -> None:
    created = client.put(url("project.doc"), json={"value": 1, "projectPath": PROJECT})
    etag = created.headers["etag"]
    ok = client.put(
        url("project.doc"), json={"value": 2, "projectPath": PROJECT}, headers={"If-Match": etag}
    )
    assert ok.status_code == 200
    again = client.put(
        url("project.doc"), json={"value": 3, "projectPath": PROJECT}, headers={"If-Match": etag}
    )
    assert again.status_code == 409
    bad = client.put(
        url("project.doc"), json={"value": 3, "projectPath": PROJECT}, headers={"If-Match": "*x"}
    )
    assert bad.status_code == 400
    disagree = client.put(
        url("project.doc"),
        json={"value": 3, "projectPath": PROJECT, "ifVersion": 2},
        headers={"If-Match": '"1"'},
    )
    assert disagree.status_code == 400


def test_an_if_match_int_cannot_read_is_400_and_changes_nothing(client: TestClient) -> None:
    # More digits than int() reads (4300): a 500 on PUT and DELETE.
    put(client, "project.doc", "kept")
    header = '"1' + "0" * 5000 + '"'
    write = client.put(
        url("project.doc"),
        json={"value": "lost", "projectPath": PROJECT},
        headers={"If-Match": header},
    )
    delete = client.delete(
        url("project.doc"), params={"projectPath": PROJECT}, headers={"If-Match": header}
    )

    for answer in (write, delete):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "InvalidIfMatch"
    got = client.get(url("project.doc"), params={"projectPath": PROJECT}).json()
    assert (got["value"], got["version"]) == ("kept", 1)


def test_an_if_match_of_digits_that_are_not_ascii_is_refused() -> None:
    # A superscript two, sendable as Latin-1: str.isdigit() says yes, int() raised ValueError.
    with pytest.raises(InvalidIfMatch):
        parse_if_match('"\u00b2"')


def test_if_version_zero_means_create_only(client: TestClient) -> None:
    assert (
        client.put(
            url("project.once"), json={"value": 1, "projectPath": PROJECT, "ifVersion": 0}
        ).status_code
        == 201
    )
    second = client.put(
        url("project.once"), json={"value": 2, "projectPath": PROJECT, "ifVersion": 0}
    )
    assert second.status_code == 409
    missing = client.put(
        url("project.none"), json={"value": 1, "projectPath": PROJECT, "ifVersion": 4}
    )
    assert missing.status_code == 409


def test_a_delete_with_a_stale_if_match_is_409_and_deletes_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    read = put(client, "shared.plan", "claude's plan", scope="shared", createdBy="claude")
    put(client, "shared.plan", "gemini's plan", scope="shared", createdBy="gemini")
    where = {"projectPath": PROJECT, "scope": "shared"}

    # Claude deletes the plan it read (version 1); Gemini has written version 2 since.
    stale = client.delete(url("shared.plan"), params=where, headers={"If-Match": '"1"'})

    assert stale.status_code == 409
    assert stale.json()["error"] == "VersionConflict"
    assert "version 2" in stale.json()["detail"]
    kept = client.get(url("shared.plan"), params={**where, "history": "true"}).json()
    assert (kept["value"], kept["version"], len(kept["history"])) == ("gemini's plan", 2, 1)
    assert read["version"] == 1


def test_a_delete_with_the_current_if_match_deletes(client: TestClient) -> None:
    put(client, "project.doc", 1)
    current = put(client, "project.doc", 2)
    where = {"projectPath": PROJECT}

    etag = f'"{current["version"]}"'
    deleted = client.delete(url("project.doc"), params=where, headers={"If-Match": etag})
    again = client.delete(url("project.doc"), params=where, headers={"If-Match": etag})
    bad = client.delete(url("project.doc"), params=where, headers={"If-Match": "soon"})

    assert (deleted.status_code, deleted.json()) == (200, {"deleted": True})
    assert (again.status_code, again.json()) == (200, {"deleted": False})
    assert bad.status_code == 400
    assert client.get(url("project.doc"), params=where).status_code == 404


def test_if_match_star_writes_only_a_key_that_exists(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    star = {"If-Match": "*"}
    missing = client.put(
        url("project.new"), json={"value": 1, "projectPath": PROJECT}, headers=star
    )
    assert missing.status_code == 409, missing.text
    assert missing.json()["error"] == "VersionConflict"
    assert "If-Match: *" in missing.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)

    put(client, "project.doc", "v1")
    put(client, "project.doc", "v2")
    updated = client.put(
        url("project.doc"), json={"value": "v3", "projectPath": PROJECT}, headers=star
    )
    assert updated.status_code == 200, updated.text
    assert (updated.json()["value"], updated.json()["version"]) == ("v3", 3)
    assert updated.headers["etag"] == '"3"'

    # With ifVersion too: a version narrows "exists"; "create only" contradicts it.
    narrowed = client.put(
        url("project.doc"),
        json={"value": "v4", "projectPath": PROJECT, "ifVersion": 2},
        headers=star,
    )
    assert narrowed.status_code == 409
    contradicts = client.put(
        url("project.doc"),
        json={"value": "v4", "projectPath": PROJECT, "ifVersion": 0},
        headers=star,
    )
    assert contradicts.status_code == 400
    assert "If-Match (*)" in contradicts.json()["detail"]


def test_if_match_star_deletes_whatever_version_exists(client: TestClient) -> None:
    put(client, "project.doc", 1)
    put(client, "project.doc", 2)
    where = {"projectPath": PROJECT}
    star = {"If-Match": "*"}

    deleted = client.delete(url("project.doc"), params=where, headers=star)
    again = client.delete(url("project.doc"), params=where, headers=star)

    assert (deleted.status_code, deleted.json()) == (200, {"deleted": True})
    assert (again.status_code, again.json()) == (200, {"deleted": False})
    assert client.get(url("project.doc"), params=where).status_code == 404


def test_a_weak_if_match_never_matches_and_a_list_matches_any_of_its_tags(
    client: TestClient,
) -> None:
    # RFC 9110 13.1.1: If-Match compares strongly, so `W/"1"` matches no version (it was taken
    # as "1" and the write went through); a list of tags matches any of them (it was a 400).
    put(client, "project.doc", "v1")
    body = {"value": "v2", "projectPath": PROJECT}
    for weak in ('W/"1"', 'W/"1", W/"2"'):
        refused = client.put(url("project.doc"), json=body, headers={"If-Match": weak})
        deleted = client.delete(
            url("project.doc"), params={"projectPath": PROJECT}, headers={"If-Match": weak}
        )
        for answer in (refused, deleted):
            assert answer.status_code == 409, (weak, answer.text)
            assert answer.json()["error"] == "VersionConflict"
    stale = client.put(url("project.doc"), json=body, headers={"If-Match": '"5", "7"'})
    assert stale.status_code == 409, stale.text
    assert "not one of 5, 7" in stale.json()["detail"]

    written = client.put(url("project.doc"), json=body, headers={"If-Match": '"3", W/"2", "1"'})
    assert written.status_code == 200, written.text
    assert written.json()["version"] == 2
    both = client.put(
        url("project.doc"),
        json={**body, "value": "v3", "ifVersion": 2},
        headers={"If-Match": '"2","9"'},
    )
    assert both.status_code == 200, both.text
    gone = client.delete(
        url("project.doc"), params={"projectPath": PROJECT}, headers={"If-Match": '"1", "3"'}
    )
    assert gone.json() == {"deleted": True}
    for bad in ('"1", *', '"1" "2"'):
        refused = client.put(url("project.doc"), json=body, headers={"If-Match": bad})
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"] == "InvalidIfMatch"
