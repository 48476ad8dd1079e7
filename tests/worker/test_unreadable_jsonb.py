"""Observations whose jsonb Python's `json` cannot read back as it is (written by SQL or an older
build), through the worker: `exactjson.loads_stored` gives such a value as its exact JSON text
(`JsonText`), and the worker's readers expected a dict. Entities nested 3,000 deep raised
AttributeError in the extract (the row retried 5 times with tracebacks, then failed); arguments
holding `1e-16000` put the whole 16 KB of the number's text into the extract and the summary."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.conftest import make_settings
from tests.worker.builders import PROJECT, drain, make_session, row, rows

DEEP = "[" * 3000 + "1" + "]" * 3000


def _observation(db: psycopg.Connection[Any], key: str, args: str, entities: str) -> None:
    db.execute(
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "result, observation_type, status, entities, result_at) VALUES (%s, 's1', %s, "
        "'read_file', %s::jsonb, '\"export const a = 1;\"', 'file_read', 'captured', %s::jsonb, "
        "now())",
        (key, PROJECT, args, entities),
    )


def test_unreadable_entities_and_arguments_are_compressed_and_summarized_bounded(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    _observation(db, "o1", '{"path": "src/a.ts"}', '{"files": ' + DEEP + "}")
    _observation(db, "o2", '{"path": "src/b.ts", "n": 1e-16000}', "{}")

    drain(make_settings(), database_url)

    done = rows(db, "SELECT id, status, attempts, compressed_data FROM observations ORDER BY id")
    assert [(r["id"], r["status"], r["attempts"]) for r in done] == [
        ("o1", "compressed", 1),
        ("o2", "compressed", 1),
    ], done
    for observation in done:
        assert len(observation["compressed_data"]) < 2000
    assert "src/a.ts" in done[0]["compressed_data"]
    session = row(db, "SELECT status, summary FROM sessions")
    assert session["status"] == "summarized"
    assert "0" * 1000 not in session["summary"]
