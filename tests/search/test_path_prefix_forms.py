"""`pathPrefix` against paths stored as the disk spells them: a macOS folder's name is
decomposed (NFD), while clients, and the project key, write it composed (NFC)."""

from __future__ import annotations

import unicodedata
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.search.seed import Chunk, add_chunks
from tests.search.test_keyword import paths

PROJECT = "/Users/zoë/café"  # the project key: composed, as the service stores every key


def search(client: TestClient, prefix: str, mode: str) -> list[dict[str, Any]]:
    body = {"query": "rotation", "mode": mode, "projectPath": PROJECT, "pathPrefix": prefix}
    response = client.post("/api/search", json=body)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
@pytest.mark.parametrize("disk_form", ["NFD", "NFC"])
def test_a_prefix_matches_the_path_whichever_way_either_spells_its_accents(
    client: TestClient, database_url: str, db: psycopg.Connection[Any], mode: str, disk_form: str
) -> None:
    on_disk = unicodedata.normalize(disk_form, f"{PROJECT}/memory/résumé.md")
    add_chunks(
        database_url,
        [
            Chunk("Key rotation runs every night.", project=PROJECT, path=on_disk),
            Chunk("Key rotation notes elsewhere.", project=PROJECT, path=f"{PROJECT}/other.md"),
        ],
    )
    for form in ("NFC", "NFD"):
        assert paths(search(client, unicodedata.normalize(form, f"{PROJECT}/memory/"), mode)) == [
            on_disk
        ]
        assert paths(
            search(client, unicodedata.normalize(form, f"{PROJECT}/memory/rés"), mode)
        ) == [on_disk]


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
@pytest.mark.parametrize(("parent_form", "child_form"), [("NFC", "NFD"), ("NFD", "NFC")])
def test_a_prefix_matches_a_path_spelled_partly_in_each_form(
    client: TestClient,
    database_url: str,
    db: psycopg.Connection[Any],
    mode: str,
    parent_form: str,
    child_form: str,
) -> None:
    # A parent folder made by a client (composed) holding a file written on macOS (decomposed),
    # or the other way round: neither spelling of the prefix is the path's as a whole.
    on_disk = unicodedata.normalize(parent_form, f"{PROJECT}/memory/") + unicodedata.normalize(
        child_form, "résumé.md"
    )
    add_chunks(
        database_url,
        [
            Chunk("Key rotation runs every night.", project=PROJECT, path=on_disk),
            Chunk("Key rotation notes elsewhere.", project=PROJECT, path=f"{PROJECT}/other.md"),
        ],
    )
    for form in ("NFC", "NFD"):
        prefix = unicodedata.normalize(form, f"{PROJECT}/memory/rés")
        assert paths(search(client, prefix, mode)) == [on_disk]


def test_a_prefix_matches_a_path_holding_a_character_whose_composed_form_is_ascii(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # U+212A KELVIN SIGN composes to `K`: the stored path does not start with the prefix's ASCII
    # run `/p/Kcaf`, though its composed form starts with the prefix.
    on_disk = "/p/\u212acafé/notes.md"
    add_chunks(
        database_url,
        [Chunk("Key rotation runs every night.", path=on_disk), Chunk("Key rotation notes.")],
    )
    body = {"query": "rotation", "mode": "keyword", "projectPath": "/p", "pathPrefix": "/p/Kcafé/"}
    response = client.post("/api/search", json=body)
    assert response.status_code == 200, response.text
    assert paths(response.json()["results"]) == [on_disk]
