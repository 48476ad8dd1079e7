"""Gemini read as a hostile upstream: answers no real Gemini should send (a body dripped slower
than any timeout, text far past the token cap asked, a withheld answer's partial text, an
answer cut at its cap) through the real google-genai client and the fake server, into the real
database. Each is a failed attempt or the fallback, never a stuck lane or a stored fragment."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest

from app.llm.compress import COMPRESSION_MAX_OUTPUT_TOKENS
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.llm.test_compress_gemini import ANSWER, gemini_settings
from tests.worker.builders import drain, make_observation, make_session, row


def candidate(text: str, finish: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish}
        ],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 20},
    }


def stored(db: psycopg.Connection[Any]) -> dict[str, Any]:
    return row(
        db,
        "SELECT status, generated_by, compressed_data, last_error, attempts FROM observations",
    )


def test_an_answer_dripped_slower_than_the_timeout_is_a_timed_out_attempt(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # Each gap under the read timeout, the whole far over it: the call ran on past
    # AGMEM_GEMINI_TIMEOUT_SECONDS (a drip of a big body: for hours, the claim renewed all along).
    make_session(db)
    make_observation(db, "o1")
    body = json.dumps(text_answer(ANSWER)).encode()
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(raw=body, drip_s=0.2, drip_bytes=8))
        started = time.monotonic()
        drain(gemini_settings(fake.url, gemini_timeout_seconds=1.0), database_url)
        took = time.monotonic() - started

    found = stored(db)
    assert (found["status"], found["attempts"]) == ("captured", 1)
    assert "timeout" in found["last_error"]
    assert took < len(body) / 8 * 0.2  # the drip alone would take ~5 s


def test_text_far_past_the_token_cap_is_not_stored(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A 200-token compression answered with a megabyte was stored whole as the memory.
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer("Learned: " + "x " * 500_000)),
        )
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["attempts"], found["compressed_data"]) == ("captured", 1, None)
    assert f"{COMPRESSION_MAX_OUTPUT_TOKENS} tokens" in found["last_error"]


@pytest.mark.parametrize("finish", ["SAFETY", "RECITATION"])
def test_a_withheld_answers_partial_text_goes_to_the_fallback(
    finish: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    # Gemini stopped the answer part-way for its content: the fragment was stored as the memory.
    make_session(db)
    make_observation(db, "o1", args={"path": "src/keep.ts"})
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=candidate("Learned: the token is checked ag", finish)),
        )
        drain(gemini_settings(fake.url), database_url)
        calls = len(fake.calls(":generateContent"))

    found = stored(db)
    assert calls == 1  # the same text is withheld again: no retry
    assert (found["status"], found["generated_by"]) == ("compressed", "extractive")
    assert "src/keep.ts" in found["compressed_data"]
    assert "ag" not in found["compressed_data"].split()
    assert finish in found["last_error"]


def test_an_answer_cut_at_its_cap_keeps_its_whole_lines_only(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The fragment after the last whole line was stored, cut mid-word.
    make_session(db)
    make_observation(db, "o1")
    cut = "Learned: validateToken verifies with key1.\nChanged: the retry loop now st"
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=candidate(cut, "MAX_TOKENS")))
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["generated_by"]) == ("compressed", "gemini:gemini-2.5-flash")
    assert found["compressed_data"] == "Learned: validateToken verifies with key1."


def test_an_answer_cut_before_one_whole_sentence_is_a_failed_attempt(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=candidate("Learned: validateToken ver", "MAX_TOKENS")),
        )
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["attempts"], found["compressed_data"]) == ("captured", 1, None)
    assert "MAX_TOKENS" in found["last_error"]
