"""Keyword search over text with combining marks: decomposed accents (NFD, as macOS file names
and tools write them) and scripts whose vowel signs are marks (Devanagari, Tamil, ...)."""

from __future__ import annotations

import unicodedata
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.search.seed import Chunk, add_chunks
from tests.search.test_keyword import keyword, paths


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


CORPUS = [
    Chunk(nfd("The résumé parser rejects naïve dates."), path="decomposed.md"),
    Chunk("Deploys go through the façade service in Zürich.", path="composed.md"),
    # The vowel signs of टोकन (token) and டோக்கன் are combining marks: split at them, the query
    # was its bare consonants (ट, कन), and any row holding those fragments matched as well.
    Chunk("प्रमाणीकरण मॉड्यूल में टोकन की जाँच होती है।", path="token.md"),
    Chunk("टिप्पणियाँ और कनस्तर की सूची।", path="fragments.md"),
    Chunk("தரவுத்தளம் இணைப்பு டோக்கன் சரிபார்ப்பு.", path="tamil.md"),
    Chunk("தமிழ் குறிப்பு: கணக்கு.", path="tamil_fragments.md"),
    # U+F900 (a CJK compatibility ideograph) and U+212B (ANGSTROM SIGN) have other code points
    # as their NFC and NFD forms: a query spelled as the text is must still match it exactly.
    Chunk("Hanja note: \uf900 marks the Joseon records.", path="hanja.md"),
    Chunk("Wavelength measured in \u212bngstrom units.", path="angstrom.md"),
]


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("résumé", "decomposed.md"),  # a composed query, decomposed text
        ("naïve", "decomposed.md"),
        (nfd("Zürich"), "composed.md"),  # a decomposed query, composed text
        (nfd("façade"), "composed.md"),
        ("टोकन", "token.md"),  # whole words, not their letters
        ("டோக்கன்", "tamil.md"),
        ("\uf900", "hanja.md"),  # spelled as the text is
        ("\u212bngstrom", "angstrom.md"),
    ],
)
def test_a_word_is_found_whatever_its_spelling_and_marks(
    client: TestClient, database_url: str, db: psycopg.Connection[Any], query: str, found: str
) -> None:
    assert nfd("résumé") != "résumé"  # the test's premise: two spellings of one word
    add_chunks(database_url, CORPUS)
    assert paths(keyword(client, query)) == [found]


def test_a_word_with_vowel_signs_is_highlighted_whole(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CORPUS)
    (hit,) = keyword(client, "जाँच")
    assert hit["path"] == "token.md"
    assert "**जाँच**" in hit["snippet"]
