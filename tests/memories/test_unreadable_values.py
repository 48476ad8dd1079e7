"""Memories whose stored jsonb Python's `json` cannot read back as it is, written by SQL (or an
older build; no write path of this build takes one): a value nested ~3,000 deep made every read
of its row raise RecursionError (a 500 for the memory, its list, a pattern, its history), and a
number no double holds read back as another one (`1e400` + 0.5 as null over HTTP and
`Infinity` in `agmem memory get`, `1e-16383` as 0.0). Each is answered as its exact JSON text,
`valueIsJsonText: true` saying so, as MCP answers an integer of 5,000 digits."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app import exactjson
from app.memories.schemas import MemoryVersion
from tests.cli.helpers import invoke_agmem
from tests.memories.helpers import PROJECT, url

DEEP = "[" * 3000 + "1" + "]" * 3000
# As Postgres writes them back (its numeric text has no exponent).
HUGE = "1" + "0" * 400 + ".5"
TINY = "0." + "0" * 16382 + "1"
WHERE = {"projectPath": PROJECT}


def _store(db: psycopg.Connection[Any], key: str, value: str) -> None:
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', %s, %s, %s::jsonb, 'me')",
        (PROJECT, key, value),
    )


def _stored_text(db: psycopg.Connection[Any], key: str) -> str:
    row = db.execute("SELECT value::text FROM memories WHERE key = %s", (key,)).fetchone()
    assert row is not None
    text: str = row[0]
    return text


def test_a_value_nested_3000_deep_is_read_listed_and_kept_as_its_text(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    _store(db, "a.plain", "[1.5]")
    _store(db, "project.deep", DEEP)
    text = _stored_text(db, "project.deep")

    one = client.get(url("project.deep"), params=WHERE)
    assert one.status_code == 200, one.text
    assert one.json()["value"] == text
    assert one.json()["valueIsJsonText"] is True
    for listed in (
        client.get("/api/memories", params=WHERE),
        client.get(url("*"), params=WHERE),
    ):
        assert listed.status_code == 200, listed.text
        memories = {m["key"]: m for m in listed.json()["memories"]}
        assert memories["project.deep"]["value"] == text
        assert memories["project.deep"]["valueIsJsonText"] is True
        # Only such a value is flagged: every other memory keeps its shape.
        assert memories["a.plain"]["value"] == [1.5]
        assert "valueIsJsonText" not in memories["a.plain"]
    resumed = client.post("/api/resume", json={**WHERE, "budget": 20000})
    assert resumed.status_code == 200, resumed.text
    assert [m["value"] for m in resumed.json()["context"]["project"]] == [text]
    context = client.get("/api/context", params=WHERE)
    assert context.status_code == 200, context.text
    assert "**project.deep**: [[[[" in context.text

    over = client.put(url("project.deep"), json={"value": 2, "projectPath": PROJECT})
    assert over.status_code == 200, over.text
    assert "valueIsJsonText" not in over.json()
    history = client.get(url("project.deep"), params={**WHERE, "history": "true"})
    assert history.status_code == 200, history.text
    version = history.json()["history"][0]
    assert version["value"] == text
    assert version["valueIsJsonText"] is True
    kept = db.execute("SELECT value::text FROM memory_versions").fetchone()
    assert kept == (text,)


def test_numbers_no_double_holds_are_read_as_written(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    _store(db, "huge", "[" + HUGE + "]")
    _store(db, "tiny", '{"t": ' + TINY + "}")
    _store(db, "zero", "[0.000, -0.0]")
    for key, exact in (("huge", f"[{HUGE}]"), ("tiny", f'{{"t": {TINY}}}')):
        one = client.get(url(key), params=WHERE)
        assert one.status_code == 200, one.text
        assert one.json()["value"] == exact
        assert one.json()["valueIsJsonText"] is True
        listed = client.get("/api/memories", params={**WHERE, "pattern": key})
        assert listed.json()["memories"][0]["value"] == exact
    # A zero is a zero: read as the number it is.
    zero = client.get(url("zero"), params=WHERE).json()
    assert zero["value"] == [0.0, -0.0]
    assert "valueIsJsonText" not in zero


def test_agmem_memory_get_prints_such_values_as_their_text(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store(db, "deep", DEEP)
    _store(db, "huge", "[" + HUGE + "]")
    for key in ("deep", "huge"):
        text = _stored_text(db, key)
        shown = invoke_agmem("memory", "get", key, "--project", PROJECT, DATABASE_URL=database_url)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == text + "\n"
        shown = invoke_agmem(
            "memory", "get", key, "--project", PROJECT, "--json", DATABASE_URL=database_url
        )
        assert shown.returncode == 0, shown.stderr
        answer = json.loads(shown.stdout)
        assert (answer["value"], answer["valueIsJsonText"]) == (text, True)
    listed = invoke_agmem("memory", "list", "--project", PROJECT, DATABASE_URL=database_url)
    assert listed.returncode == 0, listed.stderr
    assert "deep\tproject\t[[[[" in listed.stdout
    assert f"huge\tproject\t[{HUGE[:40]}" in listed.stdout


def _read_back(client: TestClient, key: str) -> dict[str, Any]:
    """A memory as a read-then-write client sends it back: what it read, tags changed."""
    read = client.get(url(key), params=WHERE)
    assert read.status_code == 200, read.text
    body = {
        name: read.json()[name] for name in ("value", "valueIsJsonText", "scope", "projectPath")
    }
    return {**body, "tags": ["changed"]}


def test_a_value_read_as_its_text_and_written_back_keeps_its_type_and_numbers(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The flag was ignored on a PUT: the object became a jsonb string.
    _store(db, "tiny", '{"t": [' + TINY + ", 1.50]}")
    text = _stored_text(db, "tiny")
    written = client.put(url("tiny"), json=_read_back(client, "tiny"))
    assert written.status_code == 200, written.text
    assert written.json()["tags"] == ["changed"]
    assert written.json()["valueIsJsonText"] is True
    assert _stored_text(db, "tiny") == text
    kind = db.execute("SELECT jsonb_typeof(value) FROM memories WHERE key = 'tiny'").fetchone()
    assert kind == ("object",)
    # A client may send any value as its JSON text: numbers kept exactly.
    exact = client.put(
        url("exact"), json={**WHERE, "value": "[1.50, 1e-400]", "valueIsJsonText": True}
    )
    assert exact.status_code == 201, exact.text
    assert _stored_text(db, "exact") == "[1.50, 0." + "0" * 399 + "1]"
    # Only a JSON true says so: a lax "true" or 1 became true after the check and stored the
    # text as a jsonb string (rev-mends21).
    for lax in ("true", 1):
        refused = client.put(url("lax"), json={**WHERE, "value": "[1.50]", "valueIsJsonText": lax})
        assert refused.status_code == 422, refused.text
    assert db.execute("SELECT count(*) FROM memories WHERE key = 'lax'").fetchone() == (0,)
    plain = client.put(url("plain"), json={**WHERE, "value": "[1]", "valueIsJsonText": False})
    assert plain.status_code == 201, plain.text
    assert _stored_text(db, "plain") == '"[1]"'


def test_a_value_written_as_text_no_write_keeps_is_refused_and_nothing_stored(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    _store(db, "deep", DEEP)
    _store(db, "huge", "[" + HUGE + "]")
    before = {key: _stored_text(db, key) for key in ("deep", "huge")}
    # Too deep is the fault a value sent as itself has (`TOO_DEEP`); a number it cannot keep
    # is InvalidJSON on every surface.
    deep = client.put(url("deep"), json=_read_back(client, "deep"))
    assert (deep.status_code, deep.json()) == (422, TOO_DEEP), deep.text
    for key, words in (("huge", "past a double"),):
        refused = client.put(url(key), json=_read_back(client, key))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "InvalidJSON"
        assert words in refused.json()["detail"]
    assert {key: _stored_text(db, key) for key in ("deep", "huge")} == before
    for value, words in (
        ("[1, 2", "not JSON"),
        (["a"], "must be a string"),
    ):
        refused = client.put(url("new"), json={**WHERE, "value": value, "valueIsJsonText": True})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "InvalidJSON"
        assert words in refused.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories WHERE key = 'new'").fetchone() == (0,)


JSON = {"content-type": "application/json"}
TOO_DEEP = {
    "error": "ValidationFailed",
    "detail": "value: nested deeper than 64 levels of arrays and objects",
}


def test_a_value_too_deep_is_one_answer_sent_as_itself_or_as_its_text(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # 900 levels sent as the value were 422 ValidationFailed, and as its text (the flag) 400
    # InvalidJSON: one fault, two answers. The text nested past Python's parser is the same one.
    for depth in (65, 900, 3000):
        nested = "[" * depth + "]" * depth
        bodies = [{**WHERE, "value": nested, "valueIsJsonText": True}]
        if depth < 950:  # what FastAPI's `json` reads as a body
            bodies.append({**WHERE, "value": json.loads(nested)})
        for body in bodies:
            refused = client.put(url("deep"), content=json.dumps(body), headers=JSON)
            assert (refused.status_code, refused.json()) == (422, TOO_DEEP), (depth, refused.text)
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    kept = "[" * 64 + "]" * 64
    assert (
        client.put(url("deep"), json={**WHERE, "value": kept, "valueIsJsonText": True}).status_code
        == 201
    )


def test_a_put_keeps_every_number_as_written_or_refuses_it(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Parsed by FastAPI's json, 1e-400 was stored as 0.0 and 1.50 as 1.5, and 1e-999999 (which
    # Postgres cannot keep) as 0.0, where `agmem memory set` kept or refused them.
    headers = {"content-type": "application/json"}
    where = f'"projectPath": "{PROJECT}"'
    tiny = "0." + "0" * 399 + "1"
    for key, value, stored in (
        ("a", "[1e-400, 1.50]", f"[{tiny}, 1.50]"),
        ("b", "1e-16383", TINY),
        ("c", '{"x": {"y": [2.50]}}', '{"x": {"y": [2.50]}}'),
    ):
        body = f'{{"value": {value}, {where}}}'
        written = client.put(url(key), content=body, headers=headers)
        assert written.status_code == 201, written.text
        assert _stored_text(db, key) == stored
    refused = client.put(url("d"), content=f'{{"value": 1e-999999, {where}}}', headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "InvalidJSON"
    assert "digits after the point" in refused.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories WHERE key = 'd'").fetchone() == (0,)


def test_the_flag_is_made_on_a_copy_and_only_for_a_value_given_as_its_text() -> None:
    # The flag is added to a copy of the fields, made only for such a value (every row of a
    # listing paid for one): the caller's mapping is left as it was either way.
    fields: dict[str, Any] = {
        "version": 2,
        "value": exactjson.JsonText(HUGE),
        "writtenBy": "me",
        "writtenAt": "2026-11-27T09:00:00Z",
    }
    for value, flag in ((exactjson.JsonText(HUGE), True), ("[1.5]", None), ([1.5], None)):
        given = fields | {"value": value}
        kept = dict(given)
        version = MemoryVersion.model_validate(given)
        assert given == kept
        assert version.value_is_json_text is flag
        assert ("valueIsJsonText" in version.model_dump(by_alias=True)) is bool(flag)
