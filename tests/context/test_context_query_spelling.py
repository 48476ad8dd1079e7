"""`GET /api/context`'s errors name the query's project path in the spelling the client sent."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient


def test_a_key_past_the_bound_names_the_spelling_sent(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # rev-structure27: 4,096 characters without a leading slash fit the parameter's bound but not
    # the key once its slash was back; sent as `?project_path=`, that 422 named
    # `query.projectPath`, while 4,097 characters (the parameter's own bound) named it as sent.
    # A query's path is now keyed as sent: a key past the bound is one NFC lengthens (U+0958 is
    # two characters stored, 2,049 of them a key of 4,098).
    for spelling in ("projectPath", "project_path"):
        for sent in ("\u0958" * 2049, "a" * 4097):
            for url in ("/api/context", "/api/context/p"):
                response = client.get(url, params={spelling: sent, "prompt": "x"})

                assert response.status_code == 422, (spelling, len(sent), url, response.text)
                assert response.json() == {
                    "error": "ValidationFailed",
                    "detail": f"query.{spelling}: String should have at most 4096 characters",
                }, (spelling, len(sent), url)
