"""Unknown body fields of a memory write and of resume are a 422; a read's own fields echo back."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.helpers import refused
from tests.memories.helpers import PROJECT, put, url


def test_expires_at_instead_of_ttl_is_refused_and_stores_nothing(client: TestClient) -> None:
    # It used to be dropped: the memory was stored and never expired.
    body = {"value": "v", "projectPath": PROJECT, "expiresAt": "2030-01-01T00:00:00Z"}

    detail = refused(client, "PUT", url("current.task"), body)

    assert "expiresAt" in detail
    assert "ttl" in detail
    assert client.get(url("current.task"), params={"projectPath": PROJECT}).status_code == 404


def test_an_unknown_field_is_named_with_the_close_known_one(client: TestClient) -> None:
    body = {"value": "v", "projectPath": PROJECT, "tag": ["a"], "sesionId": "s-1", "zzz": 1}

    detail = refused(client, "PUT", url("current.task"), body)

    assert "'tag' (did you mean 'tags'?)" in detail
    assert "'sesionId' (did you mean 'sessionId'?)" in detail
    assert "'zzz'" in detail
    assert "zzz' (did you mean" not in detail


def test_a_memory_read_puts_back_with_its_read_only_fields(client: TestClient) -> None:
    put(client, "current.task", "draft", ttl=3600, tags=["a"])
    put(client, "current.task", "second draft", ttl=3600, tags=["a"])
    read = client.get(url("current.task"), params={"projectPath": PROJECT, "history": "true"})
    memory = read.json()
    assert memory["expiresAt"] is not None
    assert memory["version"] == 2

    changed = {**memory, "value": "final", "version": 99, "createdAt": "2000-01-01T00:00:00Z"}
    written = client.put(url("current.task"), json=changed)

    assert written.status_code == 200, written.text
    stored = written.json()
    assert (stored["value"], stored["version"], stored["ttl"]) == ("final", 3, 3600)
    assert stored["createdAt"] == memory["createdAt"]
    assert stored["id"] == memory["id"]


def test_read_only_fields_in_snake_case_echo_back_too(client: TestClient) -> None:
    body = {"value": "v", "project_path": PROJECT, "created_at": None, "access_count": 4}
    assert client.put(url("current.task"), json=body).status_code == 201


def test_expires_at_with_the_ttl_a_read_carries_is_an_echo(client: TestClient) -> None:
    # A memory that never expires reads as ttl null and expiresAt null; one with a ttl carries
    # both. Only an expiry without a ttl beside it asks for something the write cannot do.
    never = {"value": "v", "projectPath": PROJECT, "ttl": None, "expiresAt": None}
    assert client.put(url("a.b"), json=never).status_code == 201
    lasting = {"value": "v", "projectPath": PROJECT, "ttl": 60, "expiresAt": "2030-01-01T00:00Z"}
    assert client.put(url("a.c"), json=lasting).status_code == 201
    detail = refused(client, "PUT", url("a.d"), {**lasting, "ttl": None})
    assert "ttl" in detail


def test_resume_refuses_unknown_fields(client: TestClient) -> None:
    detail = refused(client, "POST", "/api/resume", {"projectPath": PROJECT, "budgt": 300})

    assert "'budgt' (did you mean 'budget'?)" in detail
    assert client.post("/api/resume", json={"projectPath": PROJECT}).status_code == 200


def test_capture_still_ignores_fields_it_does_not_know(client: TestClient) -> None:
    # Interceptors of other versions send more; capture is the hot path and stays lenient.
    body = {"projectPath": PROJECT, "id": "s-9", "interceptorVersion": "9.9"}
    assert client.post("/api/session/start", json=body).status_code == 201


def test_a_boolean_for_a_number_is_refused_and_changes_nothing(client: TestClient) -> None:
    # pydantic read `true` as 1: `ttl: true` stored a memory that expired a second later, and
    # `ifVersion: true` checked against version 1.
    put(client, "current.task", "kept")

    for field in ("ttl", "ifVersion"):
        body = {"value": "lost", "projectPath": PROJECT, field: True}
        assert "boolean" in refused(client, "PUT", url("current.task"), body)
    assert "boolean" in refused(client, "POST", "/api/resume", {"budget": True})

    stored = client.get(url("current.task"), params={"projectPath": PROJECT}).json()
    assert (stored["value"], stored["ttl"], stored["version"]) == ("kept", None, 1)
