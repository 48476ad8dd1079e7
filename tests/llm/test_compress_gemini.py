"""Compression through the real google-genai client against the fake Gemini server."""

from __future__ import annotations

from typing import Any

import psycopg

from app.llm.compress import COMPRESSION_INSTRUCTIONS, observation_text
from app.llm.tokens import estimate_tokens
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.worker.builders import LONG_RESULT, drain, make_observation, make_session, row, rows

ANSWER = "Learned: validateToken verifies with key1.\nChanged: nothing.\nConcepts: JWT"


def gemini_settings(url: str, **overrides: Any) -> Any:
    base: dict[str, Any] = {
        "gemini_api_key": "k",
        "gemini_base_url": url,
        "worker_backoff_base_seconds": 0.1,
        "worker_backoff_max_seconds": 0.2,
    }
    base.update(overrides)
    return make_settings(**base)


def test_success_sends_exact_request_and_records_usage_counts(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(
            ":generateContent",
            FakeResponse(body=text_answer(ANSWER, prompt_tokens=700, output_tokens=20)),
        )
        drain(gemini_settings(fake.url), database_url)
        (call,) = fake.calls(":generateContent")

    expected_text = observation_text(
        function_name="read_file",
        observation_type="file_read",
        args={"path": "src/o1.ts"},
        result=LONG_RESULT,
        max_chars=24_000,
    )
    assert call.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert call.body == {
        "contents": [{"parts": [{"text": expected_text}], "role": "user"}],
        "systemInstruction": {"parts": [{"text": COMPRESSION_INSTRUCTIONS}], "role": "user"},
        "generationConfig": {
            "temperature": 0.2,
            "maxOutputTokens": 200,
            # google-genai 3.x sends this one field in proto (snake_case) spelling, which
            # Gemini's JSON parser accepts like its camelCase name.
            "thinkingConfig": {"thinking_budget": 0},
        },
    }
    stored = row(db, "SELECT * FROM observations WHERE id = 'o1'")
    assert stored["status"] == "compressed"
    assert stored["compressed_data"] == ANSWER
    assert stored["generated_by"] == "gemini:gemini-2.5-flash"
    # usageMetadata wins over estimates: the prompt's count less the fixed instructions.
    assert stored["original_tokens"] == 700 - estimate_tokens(COMPRESSION_INSTRUCTIONS)
    assert stored["compressed_tokens"] == 20
    assert stored["tokens_saved"] == stored["original_tokens"] - 20
    assert stored["attempts"] == 1
    assert stored["locked_by"] is None
    (chunk,) = rows(db, "SELECT * FROM memory_chunks WHERE observation_id = 'o1'")
    assert chunk["source"] == "observation"
    assert chunk["content"] == ANSWER
    assert chunk["session_id"] == "s1"
    assert chunk["embedding"] is not None  # the embed job ran in the same drain
    usage = row(db, "SELECT * FROM llm_usage")
    assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (1, 700, 20)
    assert usage["project_path"] == "/home/dev/shop"
