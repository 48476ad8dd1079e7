"""Gemini read as a hostile upstream: answers no real Gemini should send (a body dripped slower
than any timeout) through the real google-genai client and the fake server, into the real
database. Each is a failed attempt or the fallback, never a stuck lane or a stored fragment."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

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
