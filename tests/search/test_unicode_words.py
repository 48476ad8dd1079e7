"""Keyword search over text with combining marks: decomposed accents (NFD, as macOS file names
and tools write them) and scripts whose vowel signs are marks (Devanagari, Tamil, ...)."""

from __future__ import annotations

import unicodedata
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.search.seed import Chunk, add_chunks
from tests.search.test_keyword import keyword, paths


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def test_a_composed_query_finds_decomposed_text_and_the_other_way_round(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(
        database_url,
        [
            Chunk(nfd("The résumé parser rejects naïve dates."), path="decomposed.md"),
            Chunk("Deploys go through the façade service in Zürich.", path="composed.md"),
            Chunk("Unrelated notes about the office plants.", path="other.md"),
        ],
    )
    assert nfd("résumé") != "résumé"  # the test's premise: two spellings of one word
    assert paths(keyword(client, "résumé")) == ["decomposed.md"]
    assert paths(keyword(client, "naïve")) == ["decomposed.md"]
    assert paths(keyword(client, nfd("Zürich"))) == ["composed.md"]
    assert paths(keyword(client, nfd("façade"))) == ["composed.md"]


def test_a_word_with_vowel_signs_is_searched_whole_not_as_its_letters(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The vowel signs of टोकन (token) and டோக்கன் are combining marks: split at them, the query
    # was its bare consonants (ट, कन), and any row holding those fragments matched as well.
    add_chunks(
        database_url,
        [
            Chunk("प्रमाणीकरण मॉड्यूल में टोकन की जाँच होती है।", path="token.md"),
            Chunk("टिप्पणियाँ और कनस्तर की सूची।", path="fragments.md"),
            Chunk("தரவுத்தளம் இணைப்பு டோக்கன் சரிபார்ப்பு.", path="tamil.md"),
            Chunk("தமிழ் குறிப்பு: கணக்கு.", path="tamil_fragments.md"),
        ],
    )
    assert paths(keyword(client, "टोकन")) == ["token.md"]
    assert paths(keyword(client, "டோக்கன்")) == ["tamil.md"]
    (hit,) = keyword(client, "जाँच")
    assert hit["path"] == "token.md"
    assert "**जाँच**" in hit["snippet"]


def test_a_word_is_still_found_as_written_when_its_composed_form_differs(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # U+F900 (a CJK compatibility ideograph) and U+212B (ANGSTROM SIGN) have other code points
    # as their NFC and NFD forms: a query spelled as the text is must still match it exactly.
    add_chunks(
        database_url,
        [
            Chunk("Hanja note: \uf900 marks the Joseon records.", path="hanja.md"),
            Chunk("Wavelength measured in \u212bngstrom units.", path="angstrom.md"),
        ],
    )
    assert paths(keyword(client, "\uf900")) == ["hanja.md"]
    assert paths(keyword(client, "\u212bngstrom")) == ["angstrom.md"]
