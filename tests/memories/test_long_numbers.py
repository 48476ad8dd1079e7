"""Memories holding jsonb numbers Python's `json` cannot round-trip, written by SQL (or an older
build): an integer of more than 4,300 digits made every read of its row raise (a 500 for the
memory, its list, its history, a write over it), and an update kept `1.50` or `1e-400` in the
history as the float Python read (`1.5`, `0`)."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.cli.helpers import invoke_agmem
from tests.memories.helpers import PROJECT, url

DIGITS = "9" * 5000
EXACT = '{"scale": 1.50, "tiny": 1e-400, "long": 3.' + "14" * 500 + "}"


def _store(db: psycopg.Connection[Any], key: str, value: str) -> None:
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', %s, %s, %s::jsonb, 'me')",
        (PROJECT, key, value),
    )


def test_a_memory_with_an_integer_of_5000_digits_is_read_listed_and_replaced(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    _store(db, "project.digits", "[" + DIGITS + ", 1]")
    where = {"projectPath": PROJECT}

    one = client.get(url("project.digits"), params=where)
    assert one.status_code == 200, one.text
    assert f'"value":[{DIGITS},1]' in one.text
    listed = client.get("/api/memories", params=where)
    assert listed.status_code == 200, listed.text
    assert DIGITS in listed.text
    assert client.get(url("project.dig*"), params=where).status_code == 200
    context = client.get("/api/context", params=where)
    assert context.status_code == 200, context.text
    assert f"**project.digits**: [{DIGITS},1]" in context.text

    over = client.put(url("project.digits"), json={"value": 2, "projectPath": PROJECT})
    assert over.status_code == 200, over.text
    history = client.get(url("project.digits"), params={**where, "history": "true"})
    assert history.status_code == 200, history.text
    assert '"history":[{"version":1,' in history.text
    assert f'"value":[{DIGITS},1]' in history.text
    assert db.execute("SELECT value::text FROM memory_versions").fetchone() == (f"[{DIGITS}, 1]",)


def test_an_update_keeps_the_replaced_numbers_exactly_in_the_history(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    _store(db, "exact", EXACT)
    stored = db.execute("SELECT value::text FROM memories").fetchone()

    over = client.put(url("exact"), json={"value": "new", "projectPath": PROJECT})

    assert over.status_code == 200, over.text
    assert db.execute("SELECT value::text FROM memory_versions").fetchone() == stored


def test_agmem_memory_get_prints_an_integer_of_5000_digits(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store(db, "digits", "[" + DIGITS + "]")
    for args in (["--json"], []):
        shown = invoke_agmem(
            "memory", "get", "digits", "--project", PROJECT, *args, DATABASE_URL=database_url
        )
        assert shown.returncode == 0, shown.stderr
        assert DIGITS in shown.stdout
    listed = invoke_agmem("memory", "list", "--project", PROJECT, DATABASE_URL=database_url)
    assert listed.returncode == 0, listed.stderr
    assert "digits\tproject\t[9999" in listed.stdout
    listed = invoke_agmem(
        "memory", "list", "--project", PROJECT, "--json", DATABASE_URL=database_url
    )
    assert listed.returncode == 0, listed.stderr
    assert DIGITS in listed.stdout


def test_agmem_memory_set_stores_numbers_as_written(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # An integer of 5,000 digits was stored as a string (its parse failed), `1.50` as 1.5, and
    # `1e400` (a JSON number) was refused as Infinity.
    for key, value in (("digits", DIGITS), ("scale", "[1.50, 1e-400]")):
        done = invoke_agmem(
            "memory", "set", key, value, "--project", PROJECT, DATABASE_URL=database_url
        )
        assert done.returncode == 0, done.stderr
    stored = dict(
        db.execute("SELECT key, value::text FROM memories WHERE jsonb_typeof(value) <> 'string'")
    )
    assert stored == {
        "digits": DIGITS,
        "scale": "[1.50, 0." + "0" * 399 + "1]",
    }


# Past jsonb's numeric (131,072 digits before the point, 16,383 after) Postgres refused them
# and `set` printed a 162-line traceback; past a double's range (1e400) every reader gave back
# Infinity (`get`) or null (HTTP), so they are refused as over HTTP.
OUT_OF_RANGE = ("1e999999999", "1e-999999", "[1e200000]", "1e400", '{"a": [-1e309]}')


def test_agmem_memory_set_refuses_a_number_out_of_range_in_one_line(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    for value in OUT_OF_RANGE:
        done = invoke_agmem(
            "memory", "set", "k", value, "--project", PROJECT, DATABASE_URL=database_url
        )
        assert done.returncode == 1, (value, done.stderr)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "value: a number is" in done.stderr, done.stderr
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_a_put_of_a_number_out_of_range_is_a_400_saying_why(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    for value in ("1e400", "1e999999999", "[1, -1e309]", "NaN", '{"a": Infinity}'):
        response = client.put(
            url("k"),
            content=b'{"value": '
            + value.encode()
            + b', "projectPath": "'
            + PROJECT.encode()
            + b'"}',
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400, (value, response.text)
        answer = response.json()
        assert answer["error"] == "InvalidJSON"
        assert answer["detail"].startswith("value: a number is"), answer
        assert "send it as a string" in answer["detail"]
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
