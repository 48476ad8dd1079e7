"""The redaction pass and jsonb numbers Python's `json` cannot round-trip.

Postgres stores a jsonb number as a `numeric`, exactly: an integer of 5,000 digits, `1e400` (as
1 and 400 zeros), `1e-400` (as 0. and 399 zeros and a 1), a decimal of 1,000 digits, `1.50` with
its scale. `json.loads` refused the first (Python's int-from-string limit, so every pass failed
and the worker's lanes waited behind it for ever) and made floats of the others: a row whose
secret was redacted was written back with its numbers changed."""

from __future__ import annotations

import json
from typing import Any

import psycopg

import app.redaction
from app.privacy import redact_secrets
from tests.cli.helpers import invoke_agmem
from tests.test_redaction import _run
from tests.worker.builders import make_observation, make_session

NUMBERS = (
    '{"big": ' + "9" * 5000 + ", "
    '"negbig": -' + "7" * 4400 + ", "
    '"huge": 1e400, "tiny": 1e-400, "minus": -1E+400, '
    '"long": 3.' + "1415926535" * 100 + ", "
    '"zero": -0, "scale": 1.50, "plain": 42, "float": 0.1, '
    '"list": [1e400, ' + "5" * 4301 + ', {"deep": 2.500}]}'
)
SECRET = "password: hunter2"


def _store(db: psycopg.Connection[Any], pad: int) -> tuple[str, str]:
    """A kv memory and an observation whose numbers are beyond `json`, next to a secret; their
    numbers' jsonb text as Postgres holds it."""
    value = NUMBERS[:-1] + f', "note": "{SECRET}", "pad": "{"x" * pad}"}}'
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', '/p', 'nums', %s::jsonb, 'me')",
        (value,),
    )
    make_session(db)
    make_observation(db, "o1", args={"path": "src/a.ts"}, result="clean")
    db.execute(
        "UPDATE observations SET function_args = %s::jsonb, result = %s::jsonb WHERE id = 'o1'",
        (value, f'["{SECRET}", ' + NUMBERS + "]"),
    )
    memory = db.execute("SELECT (value - 'note')::text FROM memories").fetchone()
    observation = db.execute(
        "SELECT (function_args - 'note')::text || (result -> 1)::text FROM observations"
    ).fetchone()
    assert memory is not None
    assert observation is not None
    return memory[0], observation[0]


def _numbers_kept(db: psycopg.Connection[Any], memory: str, observation: str) -> None:
    assert db.execute("SELECT (value - 'note')::text FROM memories").fetchone() == (memory,)
    assert db.execute(
        "SELECT (function_args - 'note')::text || (result -> 1)::text FROM observations"
    ).fetchone() == (observation,)
    # The numbers as stored, to the digit (jsonb's text writes no exponents).
    assert "9" * 5000 in memory
    assert '"huge": 1' + "0" * 400 + "," in memory
    assert '"tiny": 0.' + "0" * 399 + "1," in memory
    assert '"scale": 1.50,' in memory
    notes = "SELECT value ->> 'note', function_args ->> 'note', result ->> 0 FROM memories, "
    assert db.execute(notes + "observations").fetchone() == ("password: [REDACTED]",) * 3


def test_numbers_json_cannot_round_trip_are_kept_exactly_by_the_pass(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    memory, observation = _store(db, 10)

    report = _run(database_url)

    assert report.changed["memories"] == report.changed["observations"] == 1
    _numbers_kept(db, memory, observation)
    # The version the redaction replaced is kept redacted, with its numbers.
    kept = db.execute("SELECT (value - 'note')::text, value ->> 'note' FROM memory_versions")
    assert kept.fetchall() == [(memory, "password: [REDACTED]")]
    assert _run(database_url).changed == dict.fromkeys(report.changed, 0)


def test_numbers_of_a_huge_row_are_kept_exactly_by_the_worker_process(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    memory, observation = _store(db, app.redaction.HUGE_ROW_BYTES + 1000)

    report = _run(database_url)

    assert report.changed["memories"] == report.changed["observations"] == 1
    _numbers_kept(db, memory, observation)


def test_a_row_nested_past_pythons_parser_is_redacted_in_its_text(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # Nested deeper than Python's parser goes (jsonb takes it): it was skipped, its secrets left
    # stored, while the pass (and `agmem status`) said redaction was done. Its strings are
    # redacted in its JSON text now, one by one, keys and credential-named values too.
    token = "ghp_" + "a1B2c3D4e5" * 4
    name, said = f'k\\e"y {token}', f'say \\"é {token}'
    inner = (
        '{"n": 1.50, "big": ' + "9" * 5000 + ', "password": "hunter2hunter2", '
        f'{json.dumps(name)}: {json.dumps(said, ensure_ascii=False)}, "list": ["{SECRET}"]}}'
    )
    deep = "[" * 3000 + inner + "]" * 3000
    for key, value in (("a", json.dumps(SECRET)), ("deep", deep), ("z", json.dumps(SECRET))):
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('project', '/p', %s, %s::jsonb, 'me')",
            (key, value),
        )
    before = db.execute("SELECT value::text FROM memories WHERE key = 'deep'").fetchone()
    assert before is not None
    assert token in before[0]

    report = _run(database_url)

    assert report.changed["memories"] == 3
    after = db.execute(
        "SELECT value::text, version, updated_by FROM memories WHERE key = 'deep'"
    ).fetchone()
    assert after is not None
    text, version, updated_by = after
    assert (version, updated_by) == (2, "agmem redact")
    for secret in (token, "hunter2"):
        assert secret not in text
    assert text.startswith("[" * 3000 + "{")
    assert text.endswith("}" + "]" * 3000)
    assert '"n": 1.50' in text
    assert '"big": ' + "9" * 5000 in text
    assert '"password": "[REDACTED]"' in text
    assert redact_secrets(name) != name
    assert f"{json.dumps(redact_secrets(name))}: " in text
    assert json.dumps(redact_secrets(said), ensure_ascii=False) in text
    # The version it replaced, secret and all, went to the history redacted the same way.
    history = db.execute("SELECT value::text FROM memory_versions").fetchall()
    assert history
    assert all(token not in row[0] for row in history)
    assert _run(database_url).changed["memories"] == 0


def test_agmem_redact_reads_a_row_nested_past_pythons_parser(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    deep = "[" * 5000 + "1" + "]" * 5000
    db.execute(
        "INSERT INTO memories (scope, project_path, key, value, created_by) "
        "VALUES ('project', '/p', 'deep', %s::jsonb, 'me')",
        (deep,),
    )
    result = invoke_agmem("redact", DATABASE_URL=database_url)
    assert result.returncode == 0, result.stderr
    assert "skipped" not in result.stdout
