"""The HTTP contract of key/value memories against the real app and database."""

from __future__ import annotations

import random
import string
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.memories.helpers import PROJECT, put, url

MEMORY_BANK = Path("/work/shared/testdata/memory-md/nftbk_memory-bank_activeContext.md")


def test_put_creates_then_updates_and_get_returns_it(client: TestClient) -> None:
    first = client.put(
        url("project.architecture"),
        json={"value": {"stack": ["next", "postgres"]}, "projectPath": PROJECT, "tags": ["arch"]},
    )
    assert first.status_code == 201
    created = first.json()
    assert created["version"] == 1
    assert created["scope"] == "project"
    assert created["projectPath"] == PROJECT
    assert first.headers["etag"] == '"1"'

    second = client.put(
        url("project.architecture"), json={"value": "monolith", "projectPath": PROJECT}
    )
    assert second.status_code == 200
    assert second.json()["id"] == created["id"]
    assert second.json()["version"] == 2
    assert second.json()["tags"] == ["arch"]  # omitted tags are kept

    got = client.get(url("project.architecture"), params={"projectPath": PROJECT})
    assert got.status_code == 200
    assert got.json()["value"] == "monolith"
    assert got.headers["etag"] == '"2"'

    # The OpenAPI schema (/docs) names both answers the route gives.
    put_op = client.get("/openapi.json").json()["paths"]["/api/memories/{key}"]["put"]
    assert {"200", "201"} <= set(put_op["responses"])


def test_any_json_value_round_trips_and_snake_case_is_accepted(client: TestClient) -> None:
    for key, value in [
        ("v.null", None),
        ("v.number", 3.5),
        ("v.bool", False),
        ("v.list", [1, "two", {"three": 3}]),
        ("v.nul", "a\x00b"),
    ]:
        response = client.put(url(key), json={"value": value, "project_path": PROJECT})
        assert response.status_code == 201, response.text
    got = client.get("/api/memories", params={"project_path": PROJECT, "pattern": "v.*"}).json()
    values = {m["key"]: m["value"] for m in got["memories"]}
    assert values == {
        "v.bool": False,
        "v.list": [1, "two", {"three": 3}],
        "v.nul": "ab",
        "v.null": None,
        "v.number": 3.5,
    }


def test_real_memory_bank_file_as_value(client: TestClient, db: psycopg.Connection[Any]) -> None:
    text = MEMORY_BANK.read_text(encoding="utf-8")
    put(client, "current.context", text, createdBy="claude")
    got = client.get(url("current.context"), params={"projectPath": PROJECT}).json()
    assert got["value"] == text
    assert got["createdBy"] == "claude"
    (content,) = db.execute(
        "SELECT content FROM memory_chunks WHERE source = 'kv' AND memory_id = %s", (got["id"],)
    ).fetchone() or (None,)
    assert content is not None
    assert content.startswith("current.context: ")


def test_a_key_is_one_memory_in_its_composed_and_decomposed_spellings(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # `project.café` typed on Linux and sent by a macOS tool (NFD) were two memories that look
    # the same, while project paths are NFC: a read found one or the other by the bytes sent.
    composed, decomposed = "project.caf\u00e9", "project.cafe\u0301"
    put(client, composed, "first")
    again = put(client, decomposed, "second")
    assert (again["key"], again["version"]) == (composed, 2)
    for spelling in (composed, decomposed):
        got = client.get(url(spelling), params={"projectPath": PROJECT})
        assert (got.status_code, got.json()["value"]) == (200, "second"), got.text
    listed = client.get(url("project.cafe\u0301*"), params={"projectPath": PROJECT}).json()
    assert [m["key"] for m in listed["memories"]] == [composed]
    assert db.execute("SELECT key FROM memories").fetchall() == [(composed,)]
    gone = client.delete(url(decomposed), params={"projectPath": PROJECT})
    assert gone.status_code in (200, 204), gone.text
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_get_unknown_key_is_404_in_error_shape(client: TestClient) -> None:
    response = client.get(url("project.nothing"), params={"projectPath": PROJECT})
    assert response.status_code == 404
    assert response.json()["error"] == "MemoryNotFound"


def test_bad_inputs_are_4xx_and_store_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    cases = [
        (url("k"), {"projectPath": PROJECT}),  # no value
        (url("k"), {"value": 1}),  # project scope without projectPath
        (url("k"), {"value": 1, "scope": "session"}),  # session scope without sessionId
        (url("k"), {"value": 1, "scope": "galaxy", "projectPath": PROJECT}),
        (url("k"), {"value": 1, "ttl": 0, "projectPath": PROJECT}),
        (url("k"), {"value": 1, "ttl": "soon", "projectPath": PROJECT}),
        (url("k"), {"value": 1, "tags": [""], "projectPath": PROJECT}),
        (url("bad*key"), {"value": 1, "projectPath": PROJECT}),
        (url("x" * 501), {"value": 1, "projectPath": PROJECT}),
        (url("  "), {"value": 1, "projectPath": PROJECT}),
        (url("k"), {"value": 1, "scope": "session", "sessionId": "s" * 201}),
    ]
    for path, body in cases:
        response = client.put(path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert set(response.json()) == {"error", "detail"}
    bad_json = client.put(
        url("k"), content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    # NaN and Infinity parse in Python but are not JSON: a clear 400, not Postgres's rejection.
    for value in (b"NaN", b"[1, -Infinity]"):
        non_finite = client.put(
            url("k"),
            content=b'{"scope": "global", "value": ' + value + b"}",
            headers={"content-type": "application/json"},
        )
        assert non_finite.status_code == 400
        assert non_finite.json()["error"] == "InvalidJSON"
        assert non_finite.json()["detail"].startswith("value:")
    assert client.get("/api/memories", params={"limit": 0}).status_code == 422
    assert client.get("/api/memories", params={"scope": "project"}).status_code == 422
    assert client.get("/api/memories", params={"pattern": "x*" * 300}).status_code == 422
    assert client.get("/api/memories", params={"tags": ","}).status_code == 200
    nul_pattern = client.get("/api/memories", params={"pattern": "k\x00*", "scope": "global"})
    assert nul_pattern.status_code == 200
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_values_too_long_to_index_are_422_naming_them_and_store_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Postgres cannot index a row over ~2.7 KB: a long random tag or project path was a 503
    # "the database is unreachable", then a 422 quoting the index (app/api/limits.py).
    noise = "".join(random.Random(1).choices(string.ascii_letters + string.digits, k=4000))
    for body, detail in (
        (
            {"projectPath": "/" + noise},
            "projectPath: String should have at most 1024 bytes in UTF-8, not 4001 "
            "(the database indexes it)",
        ),
        ({"tags": [noise]}, "tags: a tag has at most 200 characters, not 4000"),
    ):
        response = client.put(url("k"), json={"value": 1, "projectPath": PROJECT} | body)
        assert response.status_code == 422, response.text
        assert response.json() == {"error": "ValidationFailed", "detail": detail}
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    assert client.get("/health").status_code == 200


ONE_LINE = "the key holds a control character (a line break, a tab, an escape): " + (
    "a key is a name of one line"
)
IN_ORDER = "the key holds a bidirectional control (U+202A-U+202E, U+2066-U+2069), " + (
    "which shows it in another order than it is written: a key is a name of one line"
)


@pytest.mark.parametrize(
    ("key", "detail"),
    [
        *((f"project.a{c}b", ONE_LINE) for c in ("\n", "\t", "\x1b[2J", "\u2028", "\u2029")),
        # `project.a<RLO>gnp.exe` was stored, and `agmem memory list` showed `project.aexe.png`.
        *((f"project.a{c}gnp.exe", IN_ORDER) for c in ("\u202a", "\u202e", "\u2066", "\u2069")),
    ],
)
def test_a_key_holding_a_control_character_is_refused(
    client: TestClient, key: str, detail: str
) -> None:
    # A key is a memory's name, one line: `project.a\n# Injected` was stored, and `agmem memory
    # list` printed it over two lines of its `key<TAB>scope<TAB>value` output.
    response = client.put(url(key), json={"value": 1, "projectPath": PROJECT})

    assert response.status_code == 422
    assert response.json() == {"error": "InvalidKey", "detail": detail}
    assert client.get(url(key), params={"projectPath": PROJECT}).status_code == 404


@pytest.mark.parametrize("tag", ["a\x01b", "a\nb\x1b[31mRED", "a\u2028b", "a\u202eb"])
def test_a_tag_that_is_not_one_line_is_refused(client: TestClient, tag: str) -> None:
    # A tag is listed on its memory's line, as a key is: `["a\nb\x1b[31mRED"]` was stored.
    response = client.put(
        url("project.build"), json={"value": 1, "projectPath": PROJECT, "tags": [tag]}
    )

    assert response.status_code == 422
    assert response.json()["error"] == "ValidationFailed"
    assert "a tag is a name of one line" in response.json()["detail"]
    assert client.get(url("project.build"), params={"projectPath": PROJECT}).status_code == 404


def test_a_tag_holding_a_comma_is_refused(client: TestClient) -> None:
    # `?tags=a,b` means "a and b": a tag "ci,nightly" was stored, and no listing could ask
    # for it (the filter looked for "ci" and "nightly").
    response = client.put(
        url("project.build"), json={"value": 1, "projectPath": PROJECT, "tags": ["ci,nightly"]}
    )

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": "tags: a tag cannot hold ',', where ?tags= splits a filter: 'ci,nightly'",
    }
    assert client.get(url("project.build"), params={"projectPath": PROJECT}).status_code == 404


def test_list_filters_by_scope_pattern_tags_and_limit(client: TestClient) -> None:
    put(client, "project.name", "shop", tags=["core", "naming"])
    put(client, "project.stack", "next", tags=["core"])
    put(client, "current.todos", ["tests"], tags=["naming"])
    put(client, "ai.claude.notes", "prefers small diffs", scope="global")

    def keys(**params: Any) -> list[str]:
        response = client.get("/api/memories", params={"projectPath": PROJECT, **params})
        assert response.status_code == 200, response.text
        return [m["key"] for m in response.json()["memories"]]

    assert keys() == ["ai.claude.notes", "current.todos", "project.name", "project.stack"]
    assert keys(scope="global") == ["ai.claude.notes"]
    assert keys(scope="project") == ["current.todos", "project.name", "project.stack"]
    assert keys(pattern="project.*") == ["project.name", "project.stack"]
    assert keys(pattern="*.todos") == ["current.todos"]
    assert keys(pattern="ai.*.notes") == ["ai.claude.notes"]
    assert keys(tags="core") == ["project.name", "project.stack"]
    assert keys(tags="core,naming") == ["project.name"]
    assert keys(tags=["core", "naming"]) == ["project.name"]
    # A filter tag sanitizing leaves nothing of (all private span) matches nothing: dropped, the
    # filter was gone and every memory listed.
    assert keys(tags="<private>client</private>") == []
    assert keys(tags="core,<private>client</private>") == []
    assert keys(limit=2) == ["ai.claude.notes", "current.todos"]
    # Without projectPath only global (and project-less shared) memories are visible.
    assert [m["key"] for m in client.get("/api/memories").json()["memories"]] == ["ai.claude.notes"]


def test_wildcard_get_returns_memories_or_404(client: TestClient) -> None:
    put(client, "project.a", 1)
    put(client, "project.b", 2)
    response = client.get(url("project.*"), params={"projectPath": PROJECT})
    assert response.status_code == 200
    assert [m["key"] for m in response.json()["memories"]] == ["project.a", "project.b"]
    assert client.get(url("nothing.*"), params={"projectPath": PROJECT}).status_code == 404


def test_patterns_treat_special_characters_literally(client: TestClient) -> None:
    special = ["a%b.x", "a_b.x", "axb.x", "a\\b.x", "a.b[1].x", "a.b(c)+.x", "a/b/c.x", "a$b^.x"]
    for key in special:
        put(client, key, key)

    def matched(pattern: str) -> list[str]:
        params = {"projectPath": PROJECT, "pattern": pattern}
        return [m["key"] for m in client.get("/api/memories", params=params).json()["memories"]]

    assert matched("a%b.*") == ["a%b.x"]
    assert matched("a_b.*") == ["a_b.x"]
    assert matched("a\\b.*") == ["a\\b.x"]
    assert matched("a.b[1]*") == ["a.b[1].x"]
    assert matched("a.b(c)+*") == ["a.b(c)+.x"]
    assert matched("a/b/*") == ["a/b/c.x"]
    assert matched("a$b^*") == ["a$b^.x"]
    assert matched("a?b.x") == []
    # Exact reads of such keys (slashes and percent signs in the path) work too.
    for key in special:
        got = client.get(url(key), params={"projectPath": PROJECT})
        assert got.status_code == 200, key
        assert got.json()["value"] == key


def test_delete_answers_deleted_true_then_false(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "project.tmp", "x")
    first = client.delete(url("project.tmp"), params={"projectPath": PROJECT})
    assert first.status_code == 200
    assert first.json() == {"deleted": True}
    assert client.delete(url("project.tmp"), params={"projectPath": PROJECT}).json() == {
        "deleted": False
    }
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (0,)


def test_reads_count_access(client: TestClient) -> None:
    created = put(client, "project.counted", 1)
    assert created["accessCount"] == 0
    assert created["accessedAt"] is None
    for expected in (1, 2, 3):
        got = client.get(url("project.counted"), params={"projectPath": PROJECT}).json()
        assert got["accessCount"] == expected
    assert got["accessedAt"] is not None
    listed = client.get("/api/memories", params={"projectPath": PROJECT}).json()["memories"]
    assert listed[0]["accessCount"] == 4


def test_ttl_sets_expiry_and_expired_memories_are_never_returned(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    flash = put(client, "current.flash", "soon gone", ttl=1)
    put(client, "current.stays", "here", ttl=3600)
    assert (flash["ttl"], flash["expiresAt"] is not None) == (1, True)
    # Read back before it expires: the one of an hour (a read of the 1 s one could come after
    # its second on a loaded machine).
    got = client.get(url("current.stays"), params={"projectPath": PROJECT})
    assert got.status_code == 200
    assert got.json()["ttl"] == 3600
    assert got.json()["expiresAt"] is not None
    # It expires between the write and the next read.
    time.sleep(1.2)
    assert client.get(url("current.flash"), params={"projectPath": PROJECT}).status_code == 404
    listed = client.get("/api/memories", params={"projectPath": PROJECT}).json()["memories"]
    assert [m["key"] for m in listed] == ["current.stays"]
    # The read purged it, index rows included.
    assert db.execute("SELECT key FROM memories").fetchall() == [("current.stays",)]
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (1,)


def test_expired_memory_is_purged_even_if_only_listed(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "current.old", "x", ttl=3600)
    db.execute("UPDATE memories SET expires_at = now() - interval '1 second'")
    assert client.get("/api/memories", params={"projectPath": PROJECT}).json()["memories"] == []
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    # Writing the key again starts a new memory at version 1.
    assert put(client, "current.old", "new")["version"] == 1


def test_write_with_null_ttl_removes_expiry(client: TestClient) -> None:
    put(client, "current.x", 1, ttl=60)
    updated = put(client, "current.x", 2, ttl=None)
    assert updated["ttl"] is None
    assert updated["expiresAt"] is None


def test_privacy_rules_apply_to_values(client: TestClient, db: psycopg.Connection[Any]) -> None:
    value = {
        "note": "deploy with <private>the staging password is swordfish</private>care",
        "password": "hunter2",
        "header": "Authorization: Bearer sk-abcdefghijklmnopqrstuvwx0123456789",
    }
    stored = put(client, "discovered.deploy", value)["value"]
    assert stored["note"] == "deploy with care"
    assert stored["password"] == "[REDACTED]"
    assert "sk-abcdefghijklmnopqrstuvwx0123456789" not in stored["header"]
    (content,) = db.execute("SELECT content FROM memory_chunks").fetchone() or ("",)
    assert "swordfish" not in content
    assert "hunter2" not in content
    too_deep: Any = "leaf"
    for _ in range(100):
        too_deep = [too_deep]
    response = client.put(url("discovered.deep"), json={"value": too_deep, "projectPath": PROJECT})
    assert response.status_code == 422


def test_created_by_is_sanitized_like_other_text(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # createdBy is user text shown back on every read: a token pasted there was stored as sent.
    response = client.put(
        url("project.owner"),
        json={"value": 1, "projectPath": PROJECT, "createdBy": "ci ghp_" + "a" * 36},
    )
    assert response.status_code == 201
    assert response.json()["createdBy"] == "ci [REDACTED]"
    assert db.execute("SELECT created_by, updated_by FROM memories").fetchall() == [
        ("ci [REDACTED]", "ci [REDACTED]")
    ]


def test_a_created_by_that_redaction_lengthens_still_fits(client: TestClient) -> None:
    author = "a" * 185 + "; mysql -pab1"  # 198 characters, 205 once redacted
    response = client.put(
        url("project.long"), json={"value": 1, "projectPath": PROJECT, "createdBy": author}
    )
    assert response.status_code == 201, response.text
    assert response.json()["createdBy"] == ("a" * 185 + "; mysql -p[REDACTED]")[:200]


def test_a_key_holding_a_secret_or_private_span_is_refused_and_tags_are_sanitized(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Keys and tags were stored as sent: the key in the context block, the resume briefing's
    # prompt to Gemini, the search index and the log; a tag in every read.
    token = "ghp_" + "k" * 36
    for key in (f"project.deploy.{token}", "project.<private>home address</private>"):
        response = client.put(url(key), json={"value": "v", "projectPath": PROJECT})
        assert response.status_code == 422
        assert response.json()["error"] == "InvalidKey"
        assert token not in response.json()["detail"]
    tags = ["deploy", f"token {token}", "<private>client name</private>"]
    stored = put(client, "project.deploy", "v", tags=tags)
    assert stored["tags"] == ["deploy", "token [REDACTED]"]
    rows = db.execute("SELECT key, tags FROM memories").fetchall()
    index = db.execute("SELECT string_agg(content, ' ') FROM memory_chunks").fetchone()
    assert rows == [("project.deploy", ["deploy", "token [REDACTED]"])]
    assert token not in str(index)
    assert "client name" not in str(index)
    # An existing key of that shape (stored before) can still be read and deleted.
    db.execute("UPDATE memories SET key = %s", (f"project.{token}",))
    assert client.get(url(f"project.{token}"), params={"projectPath": PROJECT}).status_code == 200
    deleted = client.delete(url(f"project.{token}"), params={"projectPath": PROJECT})
    assert deleted.json() == {"deleted": True}


def test_key_holding_a_newline_is_read_and_deleted(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Every route of the key must match it: `{key:path}` stopped at a newline, a bare 404. A
    # write refuses such a key now; one stored before is still read and deleted by its URL.
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value) VALUES ('project', %s, %s, %s)",
        (PROJECT, "notes\nfirst line", '"v"'),
    )
    got = client.get(url("notes\nfirst line"), params={"projectPath": PROJECT})
    assert got.status_code == 200
    assert got.json()["value"] == "v"
    deleted = client.delete(url("notes\nfirst line"), params={"projectPath": PROJECT})
    assert deleted.json() == {"deleted": True}
