"""Compression through the real google-genai client against the fake Gemini server."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.llm.compress import COMPRESSION_INSTRUCTIONS, observation_text
from app.tokens import estimate_tokens
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.realdata import GEMINI_SESSION, gemini_call
from tests.worker.builders import (
    LONG_RESULT,
    drain,
    make_observation,
    make_session,
    row,
    rows,
    run_until,
)
from tests.worker.test_compression_real import capture

ANSWER = "Learned: validateToken verifies with key1.\nChanged: nothing.\nConcepts: JWT"


def gemini_settings(url: str, **overrides: Any) -> Any:
    base: dict[str, Any] = {
        "gemini_api_key": "k",
        "gemini_base_url": url,
        # Long enough that a retry never lands inside the drain that failed; tests that want
        # the retry now make the row due themselves.
        "worker_backoff_base_seconds": 2.0,
        "worker_backoff_max_seconds": 2.0,
        # The gate's spacing (60 s / the rate) is not what these tests read: at the default 60 a
        # minute, every call after a test's first waited 1 s for its slot (~3 s of a test that
        # makes four).
        "gemini_requests_per_minute": 100_000,
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


def _error(code: int, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": status.lower(), "status": status}}


def _make_due(db: psycopg.Connection[Any]) -> None:
    db.execute("UPDATE observations SET next_attempt_at = now() WHERE status = 'captured'")


def _status(db: psycopg.Connection[Any]) -> str:
    return str(row(db, "SELECT status FROM observations WHERE id = 'o1'")["status"])


def test_429_retry_after_is_honoured_then_success(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(
            ":generateContent",
            FakeResponse(429, _error(429, "RESOURCE_EXHAUSTED"), headers={"Retry-After": "1"}),
        )
        times: list[float] = []

        def answer(_request: Any) -> FakeResponse:
            times.append(time.monotonic())
            return FakeResponse(body=text_answer(ANSWER))

        fake.on(":generateContent", answer)
        first = time.monotonic()
        drain(gemini_settings(fake.url), database_url)
        after_429 = row(db, "SELECT * FROM observations WHERE id = 'o1'")
        run_until(gemini_settings(fake.url), database_url, lambda: _status(db) == "compressed")
        calls = fake.calls(":generateContent")

    assert after_429["status"] == "captured"
    assert "429" in after_429["last_error"]
    assert after_429["locked_by"] is None
    # The retry is scheduled no sooner than the server asked.
    assert (after_429["next_attempt_at"] - after_429["observed_at"]).total_seconds() >= 0.9
    assert len(calls) == 2
    assert times[0] - first >= 1.0
    stored = row(db, "SELECT * FROM observations WHERE id = 'o1'")
    assert (stored["status"], stored["attempts"], stored["last_error"]) == ("compressed", 2, None)


def test_a_long_429_pause_gives_the_waiting_rows_back_and_the_lanes_work_on(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    """A quota's 429 can ask for an hour. Every lane that then claimed a row for Gemini slept in
    the gate for that hour holding its claim, so nothing else ran: not a tiny call that needs no
    Gemini, not a summary, not a sync run."""
    make_session(db)
    for name in ("o1", "o2", "o3", "o4"):
        make_observation(db, name)
    for name in ("t1", "t2"):
        make_observation(db, name, result="ok")
    quota = FakeResponse(429, _error(429, "RESOURCE_EXHAUSTED"), headers={"Retry-After": "3600"})
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: quota)

        def settled() -> bool:
            waiting = rows(
                db,
                "SELECT id FROM observations WHERE status = 'captured' AND locked_by IS NULL "
                "AND next_attempt_at > now() + interval '800 seconds'",  # the hour, capped
            )
            done = rows(db, "SELECT id FROM observations WHERE status = 'compressed'")
            return len(waiting) == 4 and len(done) == 2

        run_until(gemini_settings(fake.url), database_url, settled, timeout=20, concurrency=2)
        calls = fake.calls(":generateContent")

    # Only calls made before the pause was known reached Gemini; the rows given back without a
    # call keep their attempt.
    assert 1 <= len(calls) <= 2
    attempts = rows(db, "SELECT attempts FROM observations WHERE id LIKE 'o%%'")
    assert sum(r["attempts"] for r in attempts) == len(calls)


def test_500_then_success(db: psycopg.Connection[Any], database_url: str) -> None:
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(500, _error(500, "INTERNAL")))
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        drain(gemini_settings(fake.url), database_url)
        after_500 = row(db, "SELECT * FROM observations WHERE id = 'o1'")
        _make_due(db)
        drain(gemini_settings(fake.url), database_url)
        assert len(fake.calls(":generateContent")) == 2

    assert after_500["status"] == "captured"
    assert after_500["last_error"].startswith("gemini 500")
    assert row(db, "SELECT attempts FROM observations")["attempts"] == 2


def test_timeout_is_a_failed_attempt_then_success(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    release = threading.Event()

    def held(_request: RecordedRequest) -> FakeResponse:
        release.wait(30)  # past any timeout of the call: it cannot be answered in time
        return FakeResponse(body=text_answer(ANSWER))

    with fake_gemini() as fake:
        fake.on(":generateContent", held)
        started = time.monotonic()
        try:
            drain(gemini_settings(fake.url, gemini_timeout_seconds=0.5), database_url)
        finally:
            release.set()
        waited = time.monotonic() - started
        after_timeout = row(db, "SELECT * FROM observations WHERE id = 'o1'")
        _make_due(db)
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        # The default timeout: the retry's success is what is under test, not how fast a loaded
        # machine connects (0.5 s here failed the retry too, now and then).
        drain(gemini_settings(fake.url), database_url)

    assert after_timeout["status"] == "captured"
    assert "timeout" in after_timeout["last_error"].lower()
    assert waited < 10  # the call was cut at the timeout, not left hanging
    assert row(db, "SELECT compressed_data FROM observations")["compressed_data"] == ANSWER


def test_malformed_answers_are_failed_attempts(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(
            ":generateContent",
            FakeResponse(raw=b"{not json"),
            FakeResponse(body={"candidates": [], "usageMetadata": {"promptTokenCount": 3}}),
        )
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        drain(gemini_settings(fake.url), database_url)
        first_error = row(db, "SELECT last_error FROM observations")["last_error"]
        _make_due(db)
        drain(gemini_settings(fake.url), database_url)
        second_error = row(db, "SELECT last_error FROM observations")["last_error"]
        _make_due(db)
        drain(gemini_settings(fake.url), database_url)
    assert _status(db) == "compressed"

    assert first_error.startswith("gemini call failed")
    assert "without text" in second_error
    assert row(db, "SELECT attempts FROM observations")["attempts"] == 3


@pytest.mark.parametrize(
    "blocked",
    [
        {"promptFeedback": {"blockReason": "SAFETY"}},
        {"candidates": [{"finishReason": "PROHIBITED_CONTENT", "content": {"parts": []}}]},
    ],
    ids=["prompt blocked", "answer blocked"],
)
def test_a_blocked_call_goes_to_the_fallback_at_once_not_after_every_attempt(
    db: psycopg.Connection[Any], database_url: str, blocked: dict[str, Any]
) -> None:
    # The same text is blocked on every try: five attempts over minutes of back-off bought
    # nothing but a late memory and four wasted calls.
    make_session(db)
    make_observation(db, "o1", args={"path": "src/keep.ts"})
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=blocked))
        drain(gemini_settings(fake.url), database_url)
        calls = len(fake.calls(":generateContent"))

    stored = row(db, "SELECT * FROM observations WHERE id = 'o1'")
    assert calls == 1
    assert (stored["status"], stored["generated_by"]) == ("compressed", "extractive")
    assert "src/keep.ts" in stored["compressed_data"]
    assert "blocked" in stored["last_error"]


def test_gemini_failing_every_attempt_leaves_the_extractive_text_and_its_error(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # One observation alone never opens the breaker: it ended `failed`, out of search and
    # context, while four failing together went to the fallback.
    make_session(db, status="ending")
    make_observation(db, "o1", args={"path": "src/keep.ts"})
    failing = gemini_settings(
        "",
        worker_max_attempts=3,
        gemini_failure_threshold=0,
        worker_backoff_base_seconds=0.1,
        worker_backoff_max_seconds=0.2,
        # The gate spaces calls 60 / requests-per-minute apart: at the default 60, its 1 s, not
        # the 0.1 s backoff, set the pace of the six attempts (~5 s of the test's ~5.7 s).
        gemini_requests_per_minute=100_000,
    )
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(503, _error(503, "UNAVAILABLE")))
        settings = failing.model_copy(update={"gemini_base_url": fake.url})
        run_until(
            settings,
            database_url,
            lambda: (
                row(db, "SELECT status FROM sessions WHERE id = 's1'")["status"] == "summarized"
            ),
        )
        # Three for the observation, three for the summary.
        assert len(fake.calls(":generateContent")) == 6

    stored = row(db, "SELECT * FROM observations WHERE id = 'o1'")
    assert (stored["status"], stored["generated_by"]) == ("compressed", "extractive")
    assert "src/keep.ts" in stored["compressed_data"]
    assert stored["function_args"] == {"path": "src/keep.ts"}
    assert stored["result"] == LONG_RESULT
    assert stored["last_error"].startswith("gemini 503")
    assert stored["last_error"].endswith("(extractive fallback after 3 attempts)")
    session = row(db, "SELECT * FROM sessions WHERE id = 's1'")
    assert session["summary_generated_by"] == "extractive"
    assert "could not be compressed" not in session["summary"]
    assert session["last_error"].startswith("gemini 503")
    indexed = rows(db, "SELECT source FROM memory_chunks ORDER BY source")
    assert [r["source"] for r in indexed] == ["observation", "summary"]


def test_no_key_uses_the_extractive_fallback(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(
        db,
        "o1",
        function_name="run_command",
        observation_type="code_execution",
        args={"command": "pytest -q", "cwd": "/home/dev/shop"},
        result="collected 12 items\n" + "." * 400 + "\nFAILED tests/test_jwt.py::test_expiry - "
        "AssertionError: token accepted after expiry\n1 failed, 11 passed",
    )
    drain(make_settings(), database_url)

    stored = row(db, "SELECT * FROM observations WHERE id = 'o1'")
    assert stored["status"] == "compressed"
    assert stored["generated_by"] == "extractive"
    text = stored["compressed_data"]
    # A call that names no file: its arguments on the tool's line (jsonb puts `cwd` first).
    assert text.splitlines()[0] == "run_command /home/dev/shop · pytest -q"
    assert "FAILED tests/test_jwt.py::test_expiry" in text
    assert stored["compressed_tokens"] < stored["original_tokens"]
    assert stored["tokens_saved"] == stored["original_tokens"] - stored["compressed_tokens"]


def test_daily_budget_stops_calls(db: psycopg.Connection[Any], database_url: str) -> None:
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    make_observation(db, "o3")
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer(ANSWER, prompt_tokens=600, output_tokens=20)),
        )
        drain(
            gemini_settings(fake.url, gemini_daily_token_budget=1000),
            database_url,
            concurrency=1,
        )
        calls = len(fake.calls(":generateContent"))

    # 620 tokens after the first call still fits under 1000; 1240 after the second does not.
    assert calls == 2
    methods = [r["generated_by"] for r in rows(db, "SELECT generated_by FROM observations")]
    assert sorted(methods) == ["extractive", "gemini:gemini-2.5-flash", "gemini:gemini-2.5-flash"]
    assert row(db, "SELECT sum(requests) AS n FROM llm_usage")["n"] == 2


def test_breaker_falls_back_after_repeated_gemini_failures(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    for n in range(4):
        make_observation(db, f"o{n}")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(500, _error(500, "INTERNAL")))
        run_until(
            gemini_settings(fake.url, gemini_failure_threshold=2),
            database_url,
            lambda: (
                row(db, "SELECT count(*) AS n FROM observations WHERE status = 'compressed'")["n"]
                == 4
            ),
            concurrency=1,
        )
        calls = len(fake.calls(":generateContent"))

    # Two failures open the breaker: no further call, and the two failed ones are retried with
    # the extractive method instead of failing for good.
    assert calls == 2
    stored = rows(db, "SELECT generated_by, attempts FROM observations ORDER BY id")
    assert [r["generated_by"] for r in stored] == ["extractive"] * 4
    assert [r["attempts"] for r in stored] == [2, 2, 1, 1]


def test_rows_the_open_breaker_sends_to_the_fallback_say_why(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    """A wrong GEMINI_API_KEY: every call is a 400. Once the breaker opened, the rows it sent to
    the extractive fallback kept no error: `agmem status` said `extractive 8` with nothing
    after Gemini failed, and no row's lastError said the key was wrong."""
    make_session(db, status="ending")
    for n in range(4):
        make_observation(db, f"o{n}")
    message = "API key not valid. Please pass a valid API key."
    wrong_key = FakeResponse(400, {"error": {"code": 400, "message": message}})
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: wrong_key)
        run_until(
            gemini_settings(fake.url, gemini_failure_threshold=2),
            database_url,
            lambda: row(db, "SELECT status FROM sessions")["status"] == "summarized",
            concurrency=1,
        )

    stored = rows(db, "SELECT generated_by, last_error FROM observations ORDER BY id")
    assert [r["generated_by"] for r in stored] == ["extractive"] * 4
    for r in stored:
        assert r["last_error"] == (
            "gemini 400: API key not valid. Please pass a valid API key. (extractive fallback: "
            "Gemini failed 2 times in a row)"
        )
    summarised = row(db, "SELECT summary_generated_by, last_error FROM sessions")
    assert summarised["summary_generated_by"] == "extractive"
    assert "gemini 400: API key not valid" in summarised["last_error"]


def test_skip_list_and_tiny_observations_never_reach_gemini(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "skipped", function_name="list_dir", result=LONG_RESULT)
    make_observation(db, "tiny", result="ok")
    with fake_gemini() as fake:
        drain(gemini_settings(fake.url), database_url)
        assert fake.calls(":generateContent") == []

    by_id = {r["id"]: r for r in rows(db, "SELECT * FROM observations")}
    assert by_id["skipped"]["generated_by"] == "extractive"
    assert by_id["tiny"]["generated_by"] == "raw"
    assert by_id["tiny"]["tokens_saved"] == 0
    assert {r["status"] for r in by_id.values()} == {"compressed"}


def test_secrets_are_redacted_before_sending(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    secret = "ghp_" + "a1B2c3D4e5" * 4
    make_observation(
        db, "o1", result=LONG_RESULT + f"\nGITHUB_TOKEN={secret}\nAKIAIOSFODNN7EXAMPLE"
    )
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        drain(gemini_settings(fake.url), database_url)
        (call,) = fake.calls(":generateContent")

    sent = call.body["contents"][0]["parts"][0]["text"]
    assert secret not in sent
    assert "AKIAIOSFODNN7EXAMPLE" not in sent
    assert "[REDACTED]" in sent


def test_cjk_observation_is_counted_with_the_apps_estimate_and_never_saves_below_zero(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # The Gemini CLI session's `replace` of a Chinese paragraph, captured through the API, and
    # compressed twice, one answer at a time (the worker's claim order is not capture's).
    name, args, result = gemini_call(GEMINI_SESSION, "yf8jqzhz")
    answer = "Learned: 專案要求所有指令都透過 uv run 執行，避免環境衝突。\nChanged: GEMINI.md"
    without_usage = {"candidates": text_answer(answer)["candidates"]}
    # The second answer Gemini counts longer than the call it compressed (a tiny prompt count).
    answers = (without_usage, text_answer(answer, prompt_tokens=300, output_tokens=180))
    ids = []
    with fake_gemini() as fake:
        for body in answers:
            ((observation, captured),) = capture(
                client, "/home/wei/repo/discordbot", [(name, args, result)]
            ).items()
            ids.append(observation)
            fake.queue(":generateContent", FakeResponse(body=body))
            drain(gemini_settings(fake.url), database_url)
        first, second = fake.calls(":generateContent")
    assert first.body["contents"] == second.body["contents"]
    sent = first.body["contents"][0]["parts"][0]["text"]
    plain, longer = ids

    estimated = row(db, "SELECT * FROM observations WHERE id = %s", plain)
    assert estimated["generated_by"] == "gemini:gemini-2.5-flash"
    # Without usageMetadata both sides are the app's one estimate: a wide character is a token,
    # so the answer's 20 ideographs and marks are 20 of its 30 tokens (57 characters: 15 at
    # four characters a token).
    assert estimated["compressed_tokens"] == estimate_tokens(answer) == 30
    assert estimated["original_tokens"] == max(captured, estimate_tokens(sent))
    assert estimated["tokens_saved"] == (
        estimated["original_tokens"] - estimated["compressed_tokens"]
    )
    assert estimated["tokens_saved"] > 0
    counted = row(db, "SELECT * FROM observations WHERE id = %s", longer)
    assert counted["original_tokens"] == 300 - estimate_tokens(COMPRESSION_INSTRUCTIONS) < 180
    assert counted["compressed_tokens"] == 180
    assert counted["tokens_saved"] == 0
