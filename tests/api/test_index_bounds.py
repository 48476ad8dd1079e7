"""Client values Postgres keeps in a btree index are bounded in the request, by field: a longer
one was a 422 quoting Postgres (`index row size 2712 exceeds btree version 4 maximum 2704 for
index "ix_..."`), which named an index, not what to shorten (app/api/limits.py)."""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.api.limits import KEY_MAX_BYTES, PROJECT_PATH_MAX_BYTES, TAG_MAX_CHARS


def noise(size: int, *, seed: int = 1) -> str:
    """`size` bytes of UTF-8 that do not compress: random 4-byte CJK characters (which Unicode
    normalisation leaves alone), then ASCII letters for the rest."""
    chooser = random.Random(seed)
    text = "".join(chr(chooser.randrange(0x20000, 0x2A6E0)) for _ in range(size // 4))
    return text + "".join(chooser.choices("abcdefghij", k=size % 4))


def tables(db: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
    return db.execute(
        "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM memories),"
        " (SELECT count(*) FROM sync_runs)"
    ).fetchone()


PATH = "/" + noise(PROJECT_PATH_MAX_BYTES)  # one byte over, with its slash


@pytest.mark.parametrize(
    ("method", "path", "body", "named"),
    [
        ("POST", "/api/session/start", {"projectPath": PATH}, "projectPath: String should"),
        ("PUT", "/api/memories/k", {"value": 1, "projectPath": PATH}, "projectPath: String should"),
        ("POST", "/api/sync", {"projectPath": PATH}, "projectPath: String should"),
        (
            "PUT",
            "/api/memories/" + quote(noise(KEY_MAX_BYTES + 1)),
            {"value": 1, "scope": "global"},
            f"the key is longer than {KEY_MAX_BYTES} bytes",
        ),
        (
            "PUT",
            "/api/memories/k",
            {"value": 1, "scope": "global", "tags": ["t" * (TAG_MAX_CHARS + 1)]},
            f"tags: a tag has at most {TAG_MAX_CHARS} characters",
        ),
    ],
)
def test_a_value_too_long_to_index_is_422_naming_its_field(
    client: TestClient,
    db: psycopg.Connection[Any],
    method: str,
    path: str,
    body: dict[str, Any],
    named: str,
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] in ("ValidationFailed", "InvalidKey")
    assert named in response.json()["detail"]
    assert "index" not in response.json()["detail"].replace("indexes it", "")
    assert tables(db) == (0, 0, 0)


def test_the_largest_values_allowed_fit_the_indexes_together(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The memories' unique index holds a project path, a session id and a key in one row.
    path = "/" + noise(PROJECT_PATH_MAX_BYTES - 1)
    started = client.post("/api/session/start", json={"projectPath": path})
    assert started.status_code == 201, started.text
    body = {
        "value": 1,
        "scope": "session",
        "projectPath": path,
        "sessionId": noise(800, seed=2),  # 200 characters, the most an id has
        "tags": [noise(TAG_MAX_CHARS * 4, seed=3)],
    }
    key = quote(noise(KEY_MAX_BYTES, seed=4))
    written = client.put(f"/api/memories/{key}", json=body)
    assert written.status_code == 201, written.text
    assert tables(db) == (1, 1, 0)


# NFC makes each U+0958 two characters of 6 bytes in all: 601 bytes sent, 1,201 stored.
GROWS = "/" + "\u0958" * 200
# Far longer sent than stored: the key is `/p`.
FOLDS = "/p" + "/." * 600


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/session/start", {}),
        ("/api/memories/k", {"value": 1}),
    ],
)
def test_the_bound_is_on_the_project_path_as_stored(
    client: TestClient, db: psycopg.Connection[Any], path: str, body: dict[str, Any]
) -> None:
    method = "PUT" if path.startswith("/api/memories") else "POST"
    grown = client.request(method, path, json=body | {"projectPath": GROWS})
    assert grown.status_code == 422, grown.text
    assert "projectPath: String should have at most 1024 bytes" in grown.json()["detail"]
    assert tables(db) == (0, 0, 0)
    folded = client.request(method, path, json=body | {"projectPath": FOLDS})
    assert folded.status_code == 201, folded.text
    stored = folded.json().get("projectPath") or folded.json()["memory"]["projectPath"]
    assert stored == "/p"


def test_an_empty_project_path_is_refused_in_plain_words(client: TestClient) -> None:
    response = client.post("/api/session/start", json={"projectPath": ""})
    assert response.status_code == 422, response.text
    assert "projectPath: String should have at least 1 character" in response.json()["detail"]
