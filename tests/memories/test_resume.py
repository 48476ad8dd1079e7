"""Smart resume: briefing (template or Gemini), context by namespace, within the budget."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.memories.resume import HEAD_TOKENS
from app.tokens import estimate_tokens
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, fake_gemini, text_answer
from tests.memories.helpers import PROJECT, put


def seed(client: TestClient, db: psycopg.Connection[Any]) -> None:
    put(client, "project.framework", "Next.js")
    put(client, "project.architecture", "app router, server actions, Postgres via Prisma")
    put(client, "current.task", "auth refactoring")
    put(client, "current.progress", 70)
    put(client, "current.next", ["add tests", "update docs"])
    put(client, "shared.api_contract", "REST v2, camelCase", scope="shared")
    put(client, "discovered.bug", "not part of the resume")
    db.execute(
        "INSERT INTO sessions (id, project_path, status, summary, summarized_at) VALUES "
        "('old', %s, 'summarized', 'Set up the login form. Styled it.', now() - interval '2 days'),"
        "('new', %s, 'summarized', 'Moved sessions to JWT. Wrote the middleware.', now()),"
        "('live', %s, 'active', NULL, NULL)",
        (PROJECT, PROJECT, PROJECT),
    )


@contextmanager
def with_gemini(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, **settings: Any
) -> Iterator[tuple[FakeGemini, Settings, TestClient]]:
    """The app with Gemini configured against a fake server, and the project seeded."""
    with fake_gemini() as fake:
        config = make_settings(
            home=tmp_path / "home", gemini_api_key="k", gemini_base_url=fake.url, **settings
        )
        app = create_app(config, database_url=database_url)
        with TestClient(app, raise_server_exceptions=False) as client:
            seed(client, db)
            yield fake, config, client


def test_template_briefing_and_context(client: TestClient, db: psycopg.Connection[Any]) -> None:
    seed(client, db)
    response = client.post("/api/resume", json={"projectPath": PROJECT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["briefing"] == (
        "Working on Next.js project. 70% through auth refactoring. "
        "Next: add tests and update docs. Last session: Moved sessions to JWT."
    )
    assert body["briefingBy"] == "template"
    context = body["context"]
    assert [m["key"] for m in context["current"]] == [
        "current.next",
        "current.progress",
        "current.task",
    ]
    assert [m["key"] for m in context["project"]] == ["project.architecture", "project.framework"]
    assert [m["key"] for m in context["shared"]] == ["shared.api_contract"]
    assert body["lastSession"]["id"] == "new"
    assert body["budget"] == 500
    assert 0 < body["tokenCount"] <= 500
    # Resume is a read: what it returned was counted.
    counts = db.execute("SELECT key, access_count FROM memories ORDER BY key").fetchall()
    assert ("discovered.bug", 0) in counts
    assert ("current.task", 1) in counts


def test_the_last_session_is_the_one_started_last_as_in_the_context_block(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # 'forgotten' was started first and summarised again just now (POST /api/summarize, or the
    # proxy's idle sweep ending it late); 'latest' is the session the user worked in last.
    db.execute(
        "INSERT INTO sessions (id, project_path, status, summary, created_at, summarized_at) "
        "VALUES ('forgotten', %s, 'summarized', 'Made 0 tool calls.', now() - interval '1 hour',"
        " now()), ('latest', %s, 'summarized', 'Moved sessions to JWT.', now() - interval "
        "'10 minutes', now() - interval '5 minutes')",
        (PROJECT, PROJECT),
    )

    body = client.post("/api/resume", json={"projectPath": PROJECT}).json()
    context = client.get("/api/context", params={"projectPath": PROJECT}).text

    assert body["lastSession"]["id"] == "latest"
    assert body["briefing"].endswith("Last session: Moved sessions to JWT.")
    assert context.index("Moved sessions to JWT.") < context.index("Made 0 tool calls.")


@pytest.mark.parametrize("budget", [50, 80, 120, 500])
def test_resume_fits_its_budget(
    client: TestClient, db: psycopg.Connection[Any], budget: int
) -> None:
    seed(client, db)
    for n in range(30):
        put(client, f"project.fact{n:02}", f"a stable fact number {n} " * 5)
    body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": budget}).json()
    texts = [body["briefing"]]
    if body["lastSession"]:
        texts.append(body["lastSession"]["summary"])
    for memories in body["context"].values():
        for memory in memories:
            value = memory["value"]
            texts.append(f"{memory['key']}: {value if isinstance(value, str) else value}")
    counted = sum(-(-len(text) // 4) for text in texts)
    assert body["tokenCount"] <= budget
    assert counted <= budget
    assert body["briefing"]


def test_resume_counts_a_wide_character_as_a_token(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The briefing counted four characters a token where the context block counts an ideograph
    # as one: a Chinese project's resume held ~4x its budget in real tokens.
    for n in range(30):
        put(client, f"project.fact{n:02}", f"第{n}條：這個專案使用資料庫與快取來保存工作階段" * 2)
    body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": 200}).json()
    texts = [body["briefing"]] + [
        f"{memory['key']}: {memory['value']}"
        for memories in body["context"].values()
        for memory in memories
    ]
    wide = sum(not ch.isascii() for text in texts for ch in text)
    assert body["context"]["project"], body
    assert wide <= body["tokenCount"] <= 200


@pytest.mark.parametrize("budget", [200, 500, 2000])
def test_a_briefing_quoting_wide_characters_keeps_to_the_budget(
    client: TestClient, budget: int
) -> None:
    # The briefing was cut at four characters a token: a template quoting a Chinese task and
    # its next steps (the memories priced as wide, the briefing not) answered 614 of 500 tokens.
    put(client, "project.name", "機器人專案" * 20)
    put(client, "current.task", "重構資料庫模組並加入測試" * 12)
    put(client, "current.next", "更新文件與部署腳本" * 10)
    body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": budget}).json()
    assert body["context"]["current"], body
    assert sum(not ch.isascii() for ch in body["briefing"]) > 20  # the briefing quotes them
    assert body["tokenCount"] <= budget, body["tokenCount"]


def test_resume_without_anything_stored(client: TestClient) -> None:
    body = client.post("/api/resume").json()
    assert body["briefing"] == "Resuming work. No memories are stored for it yet."
    assert body["context"] == {"project": [], "current": [], "shared": []}
    assert body["lastSession"] is None
    assert client.post("/api/resume", json={"budget": 10}).status_code == 422


def test_memories_left_out_for_the_budget_are_named_not_denied(client: TestClient) -> None:
    # A memory too large for the budget is left out whole; the briefing then said "No memories
    # are stored for it yet." (nothing of them kept), or said nothing of them, and an agent
    # resuming took the project for new: it could not know to read current.task itself.
    put(client, "project.framework", "Next.js")
    put(client, "current.task", "auth refactoring, " * 100)

    alone = client.post("/api/resume", json={"projectPath": "/home/dev/other", "budget": 50})
    put(client, "current.task", "auth refactoring, " * 100, projectPath="/home/dev/other")
    small = client.post("/api/resume", json={"projectPath": "/home/dev/other", "budget": 50})
    kept = client.post("/api/resume", json={"projectPath": PROJECT, "budget": 100})

    assert (
        alone.json()["briefing"] == "Working on other project. No memories are stored for it yet."
    )
    assert small.json()["briefing"] == (
        "Working on other project. 1 memory left out for the budget: current.task."
    )
    assert small.json()["tokenCount"] <= 50
    assert kept.json()["briefing"] == (
        "Working on Next.js project. 1 memory left out for the budget: current.task."
    )
    assert [m["key"] for m in kept.json()["context"]["project"]] == ["project.framework"]


def test_resume_by_session_finds_its_project(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    seed(client, db)
    put(client, "current.step", "session-only note", scope="session", sessionId="live")
    body = client.post("/api/resume", json={"sessionId": "live"}).json()
    assert "current.step" in [m["key"] for m in body["context"]["current"]]
    assert body["briefing"].startswith("Working on Next.js project.")


def test_gemini_writes_the_briefing_when_configured(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with with_gemini(database_url, db, tmp_path) as (fake, _, client):
        fake.queue(
            ":generateContent",
            FakeResponse(body=text_answer("Next.js shop, auth refactor 70% done; tests next.")),
            FakeResponse(status=500, body={"error": {"code": 500, "message": "boom"}}),
        )
        body = client.post("/api/resume", json={"projectPath": PROJECT}).json()
        assert body["briefing"] == "Next.js shop, auth refactor 70% done; tests next."
        assert body["briefingBy"] == "gemini"
        (call,) = fake.calls(":generateContent")
        prompt = call.body["contents"][0]["parts"][0]["text"]
        assert "current.task: auth refactoring" in prompt
        assert "Moved sessions to JWT" in prompt
        # 2.5 Flash's thinking would spend the 256-token cap (app/llm/generation.py).
        assert call.body["generationConfig"]["thinkingConfig"] == {"thinking_budget": 0}
        # A failing model still leaves a briefing: the template.
        fallback = client.post("/api/resume", json={"projectPath": PROJECT}).json()
        assert fallback["briefingBy"] == "template"
        assert fallback["briefing"].startswith("Working on Next.js project.")


def test_briefings_share_one_gemini_client_that_the_apps_end_closes(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Each briefing built a google-genai client (~45 ms of CPU on the event loop) and never
    # closed it: a new connection per resume, each left open for the process's life.
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Auth refactor.")))
        config = make_settings(home=tmp_path / "home", gemini_api_key="k", gemini_base_url=fake.url)
        with TestClient(create_app(config, database_url=database_url)) as client:
            seed(client, db)
            for _ in range(3):
                answer = client.post("/api/resume", json={"projectPath": PROJECT}).json()
                assert answer["briefingBy"] == "gemini"
            asked = [c for c in fake.connections if c.paths]
            assert [len(c.paths) for c in asked] == [3]
        deadline = time.monotonic() + 5
        while fake.left_open(":generateContent") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not fake.left_open(":generateContent")


def test_a_gemini_briefings_tokens_count_in_the_daily_usage(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Briefings called Gemini outside llm_usage: `agmem status` did not show their tokens and
    # AGMEM_GEMINI_DAILY_TOKEN_BUDGET did not count them.
    with with_gemini(database_url, db, tmp_path) as (fake, settings, client):
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer("Auth refactor.", prompt_tokens=120)),
        )
        for _ in range(2):
            assert (
                client.post("/api/resume", json={"projectPath": PROJECT}).json()["briefingBy"]
                == "gemini"
            )

    usage = db.execute(
        "SELECT project_path, model, requests, input_tokens, output_tokens FROM llm_usage"
    ).fetchall()
    assert usage == [(PROJECT, settings.gemini_model, 2, 240, 10)]


def test_a_briefing_without_gemini_usage_counts_its_estimate(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # As the worker does: an answer without usageMetadata still spends budget.
    answer = text_answer("Auth refactor, 70% done.")
    del answer["usageMetadata"]
    with with_gemini(database_url, db, tmp_path) as (fake, _, client):
        fake.on(":generateContent", lambda _r: FakeResponse(body=answer))
        assert (
            client.post("/api/resume", json={"projectPath": PROJECT}).json()["briefingBy"]
            == "gemini"
        )
        (call,) = fake.calls(":generateContent")

    prompt = call.body["contents"][0]["parts"][0]["text"]
    usage = db.execute("SELECT input_tokens, output_tokens FROM llm_usage").fetchall()
    assert usage == [(estimate_tokens(prompt), estimate_tokens("Auth refactor, 70% done."))]


def test_a_spent_daily_budget_leaves_the_template_briefing(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with with_gemini(database_url, db, tmp_path, gemini_daily_token_budget=1_000) as (
        fake,
        _,
        client,
    ):
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Not asked.")))
        db.execute(
            "INSERT INTO llm_usage (day, project_path, model, requests, input_tokens, "
            "output_tokens) VALUES ((now() AT TIME ZONE 'UTC')::date, %s, 'm', 3, 900, 100)",
            (PROJECT,),
        )
        answer = client.post("/api/resume", json={"projectPath": PROJECT}).json()

        assert fake.calls(":generateContent") == []
    assert answer["briefingBy"] == "template"
    assert answer["briefing"].startswith("Working on Next.js project.")


def test_template_briefing_reads_an_object_value_as_words_not_json(client: TestClient) -> None:
    put(client, "project.stack", {"language": "TypeScript", "framework": "Next.js"})
    put(client, "current.task", {"title": "auth refactoring"})

    briefing = client.post("/api/resume", json={"projectPath": PROJECT}).json()["briefing"]

    assert briefing == "Working on TypeScript and Next.js project. Current task: auth refactoring."


def test_a_gemini_that_times_out_leaves_the_template_briefing(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A timeout's exception has no message: logging its first line raised IndexError, and the
    # route answered 500 after waiting for the timeout.
    # 1 s, not less: the timeout bounds the connect too, and under two pytest workers a 0.3 s one
    # failed another test's connect to its local fake (tests/proxy/test_capture_live.py).
    with with_gemini(database_url, db, tmp_path, gemini_timeout_seconds=1.0) as (fake, _, client):
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("late"), delay_s=3))
        answer = client.post("/api/resume", json={"projectPath": PROJECT})

        assert fake.calls(":generateContent")
    assert answer.status_code == 200, answer.text
    assert answer.json()["briefingBy"] == "template"
    assert answer.json()["briefing"].startswith("Working on Next.js project.")


def test_after_repeated_gemini_failures_briefings_stop_waiting_for_it(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Every resume waited for Gemini's timeout (15 s) while it hung; the worker's breaker
    # (AGMEM_GEMINI_FAILURE_THRESHOLD in a row, then AGMEM_GEMINI_FAILURE_COOLDOWN_SECONDS of
    # fallback) now covers briefings too.
    with with_gemini(database_url, db, tmp_path, gemini_failure_threshold=2) as (fake, _, client):
        fake.on(":generateContent", lambda _r: FakeResponse(status=500, body={"error": {}}))
        answers = [client.post("/api/resume", json={"projectPath": PROJECT}) for _ in range(4)]

        assert len(fake.calls(":generateContent")) == 2
    assert [a.json()["briefingBy"] for a in answers] == ["template"] * 4


def test_a_briefing_failing_outside_gemini_names_its_type_in_the_breakers_reason(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client that cannot be built (SSL_CERT_FILE naming a missing file: google-genai's httpx
    # client reads it when made) fails before generate_text, no GeminiCallFailed. Wrapped by its
    # text alone, the breaker's reason read "[Errno 2] No such file or directory", no cause named
    # (and a textless error's, "GeminiCallFailed").
    with with_gemini(database_url, db, tmp_path, gemini_failure_threshold=1) as (fake, _, client):
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing-ca.pem"))
        answers = [client.post("/api/resume", json={"projectPath": PROJECT}) for _ in range(2)]
        gate = client.app.state.agmem.gemini_gate  # type: ignore[attr-defined]

        assert fake.calls(":generateContent") == []
    assert [a.json()["briefingBy"] for a in answers] == ["template"] * 2
    assert gate.breaker_open
    assert gate.breaker_reason.startswith(
        "FileNotFoundError: [Errno 2] No such file or directory (extractive fallback"
    ), gate.breaker_reason


def test_a_blocked_briefing_does_not_open_the_breaker(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Every briefing failure counted toward the breaker, a blocked one too: two resumes whose
    # prompt Gemini blocked opened it, and every compression went extractive for its cooldown.
    blocked = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Auth ref"}]},
                "finishReason": "SAFETY",
            }
        ],
        "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 3},
    }
    with with_gemini(database_url, db, tmp_path, gemini_failure_threshold=2) as (fake, _, client):
        fake.queue(":generateContent", FakeResponse(body=blocked), FakeResponse(body=blocked))
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Auth refactor.")))
        answers = [client.post("/api/resume", json={"projectPath": PROJECT}) for _ in range(3)]

        assert len(fake.calls(":generateContent")) == 3
    assert [a.json()["briefingBy"] for a in answers] == ["template", "template", "gemini"]
    # Billed all the same: the blocked answers' tokens count toward the day's budget.
    usage = db.execute("SELECT requests, input_tokens, output_tokens FROM llm_usage").fetchall()
    assert usage == [(3, 90, 11)]


def test_the_left_out_note_survives_a_long_briefing(client: TestClient) -> None:
    # The note was added after the briefing and the whole then cut to the budget: with a long
    # task quoted in the briefing the note naming what was left out was cut away.
    put(client, "current.task", "refactor the session store so each worker holds a lease " * 20)
    put(client, "project.a", "the API lives in app/api and its routes stay thin " * 4)
    put(client, "project.b", "uses Postgres")
    put(client, "project.c", "x " * 400)
    body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": 500}).json()
    assert body["tokenCount"] <= 500
    assert "left out for the budget: project.c." in body["briefing"], body


def test_a_small_budget_keeps_the_briefing_readable_beside_its_note(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Room for the note was made first: at budget 60 the briefing read `Working… 2 memories left
    # out for the budget: project.architecture,…`, both cut past use; at 50, the note alone.
    seed(client, db)
    notes = re.compile(r"(.*?)(?: (\d+ memor(?:y|ies) left out(?: for the budget: [^…]*)?\.))?")
    shown = {}
    for budget in (50, 60, 80):
        body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": budget}).json()
        assert body["tokenCount"] <= budget
        match = notes.fullmatch(body["briefing"])
        assert match is not None, body["briefing"]
        head, shown[budget] = match.groups()
        assert head.startswith("Working on "), head
        assert estimate_tokens(head) >= HEAD_TOKENS, head
    assert shown[60] == "2 memories left out."  # no keys, rather than keys cut
    assert shown[80] == "1 memory left out."


def test_memories_past_what_resume_reads_are_said_to_exist(client: TestClient) -> None:
    # Resume reads 50 memories a namespace: the 60th project fact was never mentioned, and the
    # left-out count said 13 where 23 were missing.
    for n in range(60):
        put(client, f"project.fact{n:02d}", f"fact number {n}")
    body = client.post("/api/resume", json={"projectPath": PROJECT, "budget": 20000}).json()
    assert len(body["context"]["project"]) == 50
    assert "project.*" in body["briefing"], body["briefing"]
