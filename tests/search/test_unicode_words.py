"""Keyword search over text with combining marks: decomposed accents (NFD, as macOS file names
and tools write them) and scripts whose vowel signs are marks (Devanagari, Tamil, ...)."""

from __future__ import annotations

import unicodedata
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.ext.asyncio import AsyncSession

from app.index.terms import search_terms
from app.llm.embeddings import local_embedder
from app.search.queries import keyword_terms
from app.search.schemas import SearchRequest
from app.search.service import SearchTuning, search
from tests.search.seed import Chunk, add_chunks, in_session
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
    # The CJK compatibility ideographs (U+F900, U+2F800 of the supplement) have other code points
    # as their NFC and NFD forms: a query spelled as the text is must still match it exactly.
    # (U+212B ANGSTROM SIGN is no such case: lower-casing already makes it U+00E5 on both sides.)
    Chunk("Hanja note: \uf900 marks the Joseon records.", path="hanja.md"),
    Chunk("Radical note: \U0002f800 from the supplement.", path="supplement.md"),
    # A zero-width joiner picks a conjunct's form inside the word: split there, the query was
    # `क्` and `षमा`, and the row holding `षमा` alone matched too.
    Chunk("अनुरोध पर क्\u200dषमा याचना।", path="joiner.md"),
    Chunk("षमा का अंश।", path="joiner_fragment.md"),
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
        ("\U0002f800", "supplement.md"),
        ("क्\u200dषमा", "joiner.md"),
    ],
)
def test_a_word_is_found_whatever_its_spelling_and_marks(
    client: TestClient, database_url: str, db: psycopg.Connection[Any], query: str, found: str
) -> None:
    assert nfd("résumé") != "résumé"  # the test's premise: two spellings of one word
    add_chunks(database_url, CORPUS)
    assert paths(keyword(client, query)) == [found]


@pytest.mark.parametrize(
    "text",
    [
        "क्\u200dषमा",  # ZERO WIDTH JOINER inside a word
        "می\u200cخواهم بروم",  # ZERO WIDTH NON-JOINER
        "ab\u200d cd",  # after a word: kept in it
        "\u200dab x \u200d y",  # before a word or alone: a separator
        "ab_\u200dcd",
    ],
)
def test_query_words_split_where_postgres_splits_them(
    db: psycopg.Connection[Any], text: str
) -> None:
    tokens = db.execute(
        "SELECT token FROM ts_debug('english', %s) WHERE alias <> 'blank'", (text,)
    ).fetchall()
    assert keyword_terms(text) == [token.lower() for (token,) in tokens]


def test_a_word_with_vowel_signs_is_highlighted_whole(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CORPUS)
    (hit,) = keyword(client, "जाँच")
    assert hit["path"] == "token.md"
    assert "**जाँच**" in hit["snippet"]


def keyword_scores(database_url: str, query: str, rank_function: str) -> dict[str, float]:
    async def run(session: AsyncSession) -> dict[str, float]:
        request = SearchRequest(query=query, project_path="/p", mode="keyword", limit=5)
        tuning = SearchTuning(rank_function=rank_function)  # type: ignore[arg-type]
        response = await search(session, request=request, embedder=local_embedder(), tuning=tuning)
        return {str(r.path): float(r.keyword_score or 0) for r in response.results}

    return in_session(database_url, run)


@pytest.mark.parametrize("rank_function", ["idf", "ts_rank", "ts_rank_cd"])
def test_an_accented_word_counts_as_much_as_an_ascii_word(
    database_url: str, db: psycopg.Connection[Any], rank_function: str
) -> None:
    # `café` is ORed as its two spellings and a row holds one: ts_rank divides an OR's score by
    # its operand count, so the accented word scored half of `bakery`, held by as many rows.
    add_chunks(
        database_url,
        [Chunk("café opening hours", path="a.md"), Chunk("bakery opening hours", path="b.md")],
    )
    scores = keyword_scores(database_url, "café bakery", rank_function)
    ascii_only = keyword_scores(database_url, "pastry bakery", rank_function)
    # ts_rank's division by 3 is undone in float4 (its own type): equal to float4's
    # precision; the other two are exact.
    tolerance = 1e-6 if rank_function == "ts_rank" else 0
    assert scores["a.md"] == pytest.approx(scores["b.md"], rel=tolerance, abs=0)
    assert scores["b.md"] == pytest.approx(ascii_only["b.md"], rel=tolerance, abs=0)


def test_the_stored_terms_keep_marks_in_their_words_as_the_query_does(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The stored side split an identifier's parts at marks: `getCafé` (decomposed) stored `get
    # Cafe`, which `café` did not find; a Devanagari word with a vowel sign inside is a token
    # there, and stored its bare letters, which the word `कन` matched in a row without it.
    add_chunks(
        database_url,
        [
            Chunk(nfd("Call getCafé() before serving."), path="camel.md"),
            Chunk("प्रमाणीकरण मॉड्यूल में टोकन की जाँच होती है।", path="token.md"),
            Chunk("कन एक शब्द है।", path="kan.md"),
            Chunk("See config/टोकन.json for it.", path="config.md"),
        ],
    )
    assert paths(keyword(client, "café")) == ["camel.md"]
    assert paths(keyword(client, "कन")) == ["kan.md"]
    assert sorted(paths(keyword(client, "टोकन"))) == ["config.md", "token.md"]


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        (nfd("getCafé()"), nfd("get Café")),
        ("टोकन की जाँच", ""),  # prose: no identifier, no parts
        ("config/टोकन.json", "config टोकन json"),
        ("user_क्\u200dषमा", "user क्\u200dषमा"),
    ],
)
def test_an_identifiers_parts_are_the_querys_words(text: str, stored: str) -> None:
    assert search_terms(text) == stored
