"""Observations and sessions whose jsonb Python's `json` cannot read or write back as it is,
written by SQL or an older build (capture refuses a field nested past AGMEM_CAPTURE_MAX_DEPTH,
at most 500 levels): nested ~3,000 deep, the read raised RecursionError; an integer of 5,000
digits, the answer's `json.dumps` raised. Both were a 500. A value nested past the parser is
answered as its exact JSON text, a string; the integer as its digits."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

DEEP = "[" * 3000 + '"x"' + "]" * 3000
DIGITS = "9" * 5000


def test_an_observation_nested_3000_deep_is_read_as_its_text(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO sessions (id, project_path) VALUES ('s1', '/home/dev/shop');"
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "result, observation_type, status) VALUES ('o1', 's1', '/home/dev/shop', 'read_file', "
        f"'{DEEP}'::jsonb, '{DEEP}'::jsonb, 'file_read', 'raw')"
    )
    stored = db.execute("SELECT function_args::text FROM observations").fetchone()
    assert stored is not None

    one = client.get("/api/observations/o1")

    assert one.status_code == 200, one.text
    assert one.json()["functionArgs"] == stored[0]
    assert one.json()["result"] == stored[0]


def test_an_integer_of_5000_digits_in_an_observation_or_a_session_is_answered(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO sessions (id, project_path, metadata) VALUES ('s1', '/home/dev/shop', "
        f"'{{\"n\": {DIGITS}}}'::jsonb);"
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "observation_type, status) VALUES ('o1', 's1', '/home/dev/shop', 'read_file', "
        f"'[{DIGITS}]'::jsonb, 'file_read', 'raw')"
    )

    one = client.get("/api/observations/o1")
    session = client.get("/api/sessions/s1")
    listed = client.get("/api/sessions", params={"projectPath": "/home/dev/shop"})

    assert one.status_code == 200, one.text
    assert f'"functionArgs":[{DIGITS}]' in one.text
    for answer in (session, listed):
        assert answer.status_code == 200, answer.text
        assert f'"metadata":{{"n":{DIGITS}}}' in answer.text


def test_a_field_read_as_its_text_is_flagged_and_no_other_is(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Answered as a plain string, it could not be told from a real string value.
    db.execute(
        "INSERT INTO sessions (id, project_path, metadata) VALUES ('s1', '/home/dev/shop', "
        f"'{{\"m\": {DEEP}}}'::jsonb);"
        "INSERT INTO sessions (id, project_path, metadata) VALUES ('s2', '/home/dev/shop', "
        "'{\"m\": 1}'::jsonb);"
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "result, entities, observation_type, status) VALUES ('o1', 's1', '/home/dev/shop', "
        f"'read_file', '{{\"path\": \"a\"}}'::jsonb, '[1e-16000]'::jsonb, '{DEEP}'::jsonb, "
        "'file_read', 'raw')"
    )

    one = client.get("/api/observations/o1").json()
    assert (one["resultIsJsonText"], one["entitiesIsJsonText"]) == (True, True)
    assert "functionArgsIsJsonText" not in one
    assert one["functionArgs"] == {"path": "a"}
    session = client.get("/api/sessions/s1").json()
    assert session["metadataIsJsonText"] is True
    listed = client.get("/api/sessions", params={"projectPath": "/home/dev/shop"}).json()
    flags = {s["id"]: s.get("metadataIsJsonText") for s in listed["sessions"]}
    assert flags == {"s1": True, "s2": None}
