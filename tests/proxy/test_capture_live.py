"""Capture through the live proxy: tool calls become observations, the next request's results
attach to them, sessions are opened, reused and ended, and capture trouble never fails a call."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import httpx
import psycopg
import pytest
from google.genai import errors, types
from sqlalchemy import event

from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.proxy.conftest import PROJECT, Proxy, ProxyFactory
from tests.proxy.upstream import Scripted, sse_bytes


def _calls_answer(*calls: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"functionCall": call} for call in calls]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}


def _wait_for(check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _logs_until(capsys: pytest.CaptureFixture[str], event: str, times: int = 1) -> str:
    """What was logged until `event` appeared `times` times (or the wait ran out). Logs go to
    stderr (stdout is the MCP stdio channel); each read drains both streams, so reads are kept."""
    seen: list[str] = []

    def logged() -> bool:
        captured = capsys.readouterr()
        seen.append(captured.out + captured.err)
        return "".join(seen).count(event) >= times

    _wait_for(logged)
    return "".join(seen)


def _observations(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT session_id, function_name, function_args, result, status, project_path "
        "FROM observations ORDER BY seq"
    ).fetchall()


def _settled(db: psycopg.Connection[Any], count: int, status: str) -> list[tuple[Any, ...]]:
    def check() -> list[tuple[Any, ...]]:
        rows = _observations(db)
        return rows if len(rows) == count and all(r[4] == status for r in rows) else []

    return _wait_for(check) or _observations(db)


def _start_waiting_briefly(
    start_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, *, grace_s: float
) -> AbstractContextManager[Proxy]:
    """A proxy whose capture waits for an answer 1 s (the upstream timeout) plus `grace_s`
    without a chunk before giving up, and four times that from the request."""
    from app.proxy import capture as proxy_capture

    monkeypatch.setattr(proxy_capture, "_ANSWER_GRACE_S", grace_s)
    return start_proxy(proxy_upstream_timeout_seconds=1.0)


def test_calls_then_results_with_the_google_genai_client(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    proxy.upstream.queue(
        Scripted(
            body=_calls_answer(
                {"name": "read_file", "args": {"path": "auth/jwt.ts"}},
                {"name": "read_file", "args": {"path": "auth/session.ts"}},
                text="Reading both.",
            )
        ),
        Scripted(body=text_answer("The expiry check is off by one.")),
    )
    client = proxy.client()
    prompt = types.Content(role="user", parts=[types.Part(text="why do tokens expire early?")])

    first = client.models.generate_content(model="gemini-2.5-flash", contents=[prompt])
    assert [call.args for call in first.function_calls or []] == [
        {"path": "auth/jwt.ts"},
        {"path": "auth/session.ts"},
    ]
    rows = _settled(db, 2, "pending")
    assert [(r[1], r[2], r[4], r[5]) for r in rows] == [
        ("read_file", {"path": "auth/jwt.ts"}, "pending", PROJECT),
        ("read_file", {"path": "auth/session.ts"}, "pending", PROJECT),
    ]

    assert first.candidates is not None
    model_turn = first.candidates[0].content
    assert model_turn is not None
    results = types.Content(
        role="user",
        parts=[
            types.Part.from_function_response(name="read_file", response={"text": "jwt source"}),
            types.Part.from_function_response(name="read_file", response={"text": "session src"}),
        ],
    )
    second = client.models.generate_content(
        model="gemini-2.5-flash", contents=[prompt, model_turn, results]
    )
    assert second.text == "The expiry check is off by one."

    rows = _settled(db, 2, "captured")
    # Same function twice in one turn: each result lands on its own call, in order.
    assert [(r[2]["path"], r[3], r[4]) for r in rows] == [
        ("auth/jwt.ts", {"text": "jwt source"}, "captured"),
        ("auth/session.ts", {"text": "session src"}, "captured"),
    ]
    assert len({r[0] for r in rows}) == 1  # one session for the conversation


def test_streamed_calls_split_across_chunks_are_captured_and_matched_by_id(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    events = sse_bytes(
        [
            text_answer("Let me run the tests. "),
            _calls_answer({"id": "call-7", "name": "run_shell", "args": {"command": "pytest"}}),
            _calls_answer({"id": "call-7", "args": {"cwd": "/home/dev/shop"}}),
            _calls_answer({"id": "call-8", "name": "grep_search", "args": {"pattern": "exp"}}),
        ]
    )
    stream = b"".join(events)
    # Cut the byte stream at places that split events and even the "\r\n\r\n" terminators.
    cuts = [0, 7, 40, len(events[0]) + 1, len(events[0]) + len(events[1]) - 2, len(stream)]
    proxy.upstream.queue(
        Scripted(raw_chunks=[stream[a:b] for a, b in zip(cuts, cuts[1:], strict=False)])
    )
    url = f"{proxy.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    headers = {"X-Agmem-Project": PROJECT, "X-Agmem-Session": "ide-session-1"}
    history: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "run the tests"}]}]

    received = httpx.post(url, json={"contents": history}, headers=headers).content
    assert received == stream

    rows = _settled(db, 2, "pending")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("ide-session-1", "run_shell", {"command": "pytest", "cwd": "/home/dev/shop"}),
        ("ide-session-1", "grep_search", {"pattern": "exp"}),
    ]

    model_turn = {
        "role": "model",
        "parts": [
            {"text": "Let me run the tests. "},
            {"functionCall": {"id": "call-7", "name": "run_shell", "args": {"command": "pytest"}}},
            {"functionCall": {"id": "call-8", "name": "grep_search", "args": {"pattern": "exp"}}},
        ],
    }
    answers = {
        "role": "user",
        "parts": [
            # Results in the opposite order: the ids, not the order, decide.
            {"functionResponse": {"id": "call-8", "name": "grep_search", "response": {"n": 3}}},
            {"functionResponse": {"id": "call-7", "name": "run_shell", "response": {"ok": 1}}},
        ],
    }
    proxy.upstream.queue(Scripted(chunks=[text_answer("All green.")]))
    httpx.post(url, json={"contents": [*history, model_turn, answers]}, headers=headers)

    rows = _settled(db, 2, "captured")
    assert [(r[1], r[3]) for r in rows] == [("run_shell", {"ok": 1}), ("grep_search", {"n": 3})]
    session = db.execute(
        "SELECT created_by, user_prompt FROM sessions WHERE id = 'ide-session-1'"
    ).fetchone()
    # The first prompt is the session's task, as for the sessions the proxy names itself: the
    # context block's "**Task**" line (it was left empty for a caller-named session).
    assert session == ("gemini-proxy:caller", "run the tests")


def test_a_retried_request_records_nothing_twice(proxy: Proxy, db: psycopg.Connection[Any]) -> None:
    call = {"name": "read_file", "args": {"path": "a.py"}}
    proxy.upstream.queue(Scripted(body=_calls_answer(call)))
    url = f"{proxy.url}/v1beta/models/m:generateContent"
    headers = {"X-Agmem-Project": PROJECT}
    history = [{"role": "user", "parts": [{"text": "open a.py"}]}]
    httpx.post(url, json={"contents": history}, headers=headers)
    _settled(db, 1, "pending")

    follow_up = [
        *history,
        {"role": "model", "parts": [{"functionCall": call}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
    ]
    for _attempt in range(2):
        httpx.post(url, json={"contents": follow_up}, headers=headers)
    # Capture jobs of one conversation run in order: once a later call is recorded, so are both.
    proxy.upstream.queue(Scripted(body=_calls_answer({"name": "list_dir", "args": {}})))
    httpx.post(url, json={"contents": history}, headers=headers)
    _wait_for(lambda: any(r[1] == "list_dir" for r in _observations(db)))
    rows = _observations(db)
    assert [(r[1], r[4]) for r in rows] == [("read_file", "captured"), ("list_dir", "pending")]


def test_sessions_are_reused_within_the_idle_window_then_ended(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any]
) -> None:
    with start_proxy(proxy_session_idle_seconds=1) as proxy:
        url = f"{proxy.url}/v1beta/models/m:generateContent"
        body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
        headers = {"X-Agmem-Project": PROJECT}
        httpx.post(url, json=body, headers=headers)
        httpx.post(url, json=body, headers=headers)

        def sessions() -> list[tuple[Any, ...]]:
            return db.execute(
                "SELECT id, status, created_by, user_prompt FROM sessions ORDER BY created_at"
            ).fetchall()

        first = _wait_for(sessions)
        assert [(s[1], s[2], s[3]) for s in first] == [("active", "gemini-proxy", "hello")]

        # Idle past the window: the sweep ends it (the worker then summarises it).
        ended = _wait_for(lambda: [s for s in sessions() if s[1] == "ending"])
        assert [s[0] for s in ended] == [first[0][0]]

        httpx.post(url, json=body, headers=headers)
        both = _wait_for(lambda: [s for s in sessions() if s[1] == "active"])
        assert len(both) == 1
        assert both[0][0] != first[0][0]

        # And the contract's own end route ends the proxy's session too.
        reply = httpx.post(f"{proxy.url}/api/session/end", json={"sessionId": both[0][0]})
        assert reply.status_code == 202
        assert sessions()[-1][1] == "ending"


def test_capture_failure_does_not_fail_the_call(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    proxy.upstream.queue(Scripted(body=_calls_answer({"name": "read_file", "args": {"p": 1}})))
    client = proxy.client(**{"X-Agmem-Session": "s" * 300})  # longer than any session id may be
    answer = client.models.generate_content(model="m", contents="open it")
    assert answer.function_calls is not None
    assert answer.function_calls[0].name == "read_file"
    assert "proxy.capture_failed" in _logs_until(capsys, "proxy.capture_failed")
    assert _observations(db) == []


def test_a_project_path_longer_than_stored_still_answers_and_says_why(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/interceptor.md: the call goes through; the log names the field and the bound.
    proxy.upstream.queue(Scripted(body=_calls_answer({"name": "read_file", "args": {"p": 1}})))
    client = proxy.client(**{"X-Agmem-Project": "/" + "a" * 1100})
    answer = client.models.generate_content(model="m", contents="open it")
    assert answer.function_calls is not None
    logged = _logs_until(capsys, "proxy.capture_failed")
    assert "String should have at most 1024 bytes" in logged
    assert _observations(db) == []


def test_a_dead_database_still_answers_without_memory(start_proxy: ProxyFactory) -> None:
    dead = "postgresql+psycopg://agmem@127.0.0.1:9/none"
    with start_proxy(db_url=dead) as proxy:
        proxy.upstream.queue(Scripted(body=text_answer("still here")))
        client = proxy.client()
        assert client.models.generate_content(model="m", contents="hi").text == "still here"
        assert "systemInstruction" not in proxy.upstream.requests[0].body
        assert json.dumps(proxy.upstream.requests[0].body).count("<memory>") == 0


def test_streaming_calls_and_results_with_the_google_genai_client(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    proxy.upstream.queue(
        Scripted(
            chunks=[
                text_answer("Checking. "),
                _calls_answer({"name": "run_shell", "args": {"command": "npm test"}}),
            ]
        ),
        Scripted(chunks=[text_answer("Two tests fail.")]),
    )
    client = proxy.client(**{"X-Agmem-Session": "genai-stream"})
    prompt = types.Content(role="user", parts=[types.Part(text="run the tests")])

    chunks = list(client.models.generate_content_stream(model="m", contents=[prompt]))
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("run_shell", {"command": "npm test"})]
    rows = _settled(db, 1, "pending")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("genai-stream", "run_shell", {"command": "npm test"})
    ]

    parts = [
        part
        for chunk in chunks
        for candidate in chunk.candidates or []
        for part in (candidate.content.parts if candidate.content else None) or []
    ]
    model_turn = types.Content(role="model", parts=parts)
    result = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="run_shell", response={"exit": 1})],
    )
    answer = client.models.generate_content_stream(model="m", contents=[prompt, model_turn, result])
    assert "".join(chunk.text or "" for chunk in answer) == "Two tests fail."
    rows = _settled(db, 1, "captured")
    assert [(r[1], r[3]) for r in rows] == [("run_shell", {"exit": 1})]


def test_a_project_path_that_is_not_ascii_reaches_the_same_project(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    # google-genai (httpx) refuses a non-ASCII header value, so the path comes percent-encoded;
    # curl sends raw UTF-8, which the server read as latin-1. Both were stored garbled.
    client = proxy.client(**{"X-Agmem-Project": "/home/d%C3%A9v/caf%C3%A9", "X-Agmem-Session": "a"})
    client.models.generate_content(model="m", contents="hi")
    httpx.post(
        f"{proxy.url}/v1beta/models/m:generateContent",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers=[(b"x-agmem-project", "/home/dév/café".encode()), (b"x-agmem-session", b"b")],
    )

    def sessions() -> list[tuple[Any, ...]]:
        rows = db.execute("SELECT id, project_path FROM sessions ORDER BY id").fetchall()
        return rows if len(rows) == 2 else []

    assert _wait_for(sessions) == [("a", "/home/dév/café"), ("b", "/home/dév/café")]


def test_a_session_id_of_another_project_captures_nothing_into_it(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # A client sending one X-Agmem-Session ("main") for every project had this project's calls
    # filed in the other project's session.
    db.execute(
        "INSERT INTO sessions (id, project_path, status) VALUES ('main', '/srv/other', 'active')"
    )
    proxy.upstream.queue(Scripted(body=_calls_answer({"name": "read_file", "args": {"p": 1}})))
    client = proxy.client(**{"X-Agmem-Session": "main"})
    assert client.models.generate_content(model="m", contents="open it").function_calls
    assert "SessionIdConflict" in _logs_until(capsys, "proxy.capture_failed")
    assert _observations(db) == []


def test_a_first_call_that_fails_upstream_leaves_no_session(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    failure = {"error": {"code": 502, "message": "bad gateway", "status": "UNAVAILABLE"}}
    proxy.upstream.queue(Scripted(status=502, body=failure), Scripted(status=502, body=failure))
    client = proxy.client()
    named = proxy.client(**{"X-Agmem-Session": "ide-session-9"})

    with pytest.raises(errors.APIError) as raised:
        client.models.generate_content(model="m", contents="first try")
    assert raised.value.code == 502
    with pytest.raises(errors.APIError) as streamed:
        list(named.models.generate_content_stream(model="m", contents="first try"))
    assert streamed.value.code == 502
    _logs_until(capsys, "proxy.no_answer", times=2)  # both calls' capture jobs are done
    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)

    # The retry that is answered opens the conversation's session, with its own prompt.
    proxy.upstream.queue(Scripted(body=text_answer("done")))
    assert client.models.generate_content(model="m", contents="second try").text == "done"
    opened = _wait_for(
        lambda: db.execute("SELECT created_by, user_prompt FROM sessions").fetchall()
    )
    assert opened == [("gemini-proxy", "second try")]


def test_a_stream_that_ends_in_an_error_records_none_of_its_calls(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # The timeout bounds the connect too: at 0.3 s a loaded run (two pytest workers on two
    # cores) once failed the second call's connect to the local fake (502, not 500).
    with start_proxy(proxy_upstream_timeout_seconds=1.0) as proxy:
        cleanup = _calls_answer({"name": "run_shell", "args": {"command": "rm -rf build"}})
        failure = {"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}
        proxy.upstream.queue(
            # The upstream goes silent after the call's chunk: the proxy ends the stream in a 504.
            Scripted(chunks=[cleanup, text_answer("and then")], pause_s=3.0),
            # Gemini itself reports a failure mid-stream as an error event.
            Scripted(raw_chunks=sse_bytes([cleanup, failure])),
            Scripted(chunks=[_calls_answer({"name": "read_file", "args": {"path": "Makefile"}})]),
        )
        client = proxy.client(**{"X-Agmem-Session": "cut-stream"})
        for code in (504, 500):
            with pytest.raises(errors.ServerError) as raised:
                list(client.models.generate_content_stream(model="m", contents="clean up"))
            assert raised.value.code == code
        _logs_until(capsys, "proxy.no_answer", times=2)
        # The client raised both times: the agent ran neither call, and asks again.
        assert _observations(db) == []
        assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)

        retried = list(client.models.generate_content_stream(model="m", contents="clean up"))
        assert retried[0].function_calls[0].name == "read_file"
        rows = _settled(db, 1, "pending")
    assert [(r[0], r[1], r[2]) for r in rows] == [("cut-stream", "read_file", {"path": "Makefile"})]


def test_an_answer_the_client_cannot_read_records_nothing(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_gemini() as fake, start_proxy(upstream_url=fake.url) as proxy:
        # A gateway's HTML page with a 200, and a stream whose second event is cut garbage.
        fake.queue(":generateContent", FakeResponse(raw=b"<html>upstream hiccup</html>"))
        cleanup = _calls_answer({"name": "run_shell", "args": {"command": "rm -rf build"}})
        stream = sse_bytes([cleanup])[0] + b'data: {"candidates": [{"conte\r\n\r\n'
        fake.queue(":streamGenerateContent", FakeResponse(raw=stream))
        client = proxy.client()
        with pytest.raises(json.JSONDecodeError):
            client.models.generate_content(model="m", contents="clean up")
        with pytest.raises(errors.UnknownApiResponseError):
            list(client.models.generate_content_stream(model="m", contents="clean up"))
        _logs_until(capsys, "proxy.no_answer", times=2)

    assert _observations(db) == []
    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_a_tool_loops_results_find_their_calls_in_the_current_session_at_once(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    # proxy28: every turn of a tool loop looked its calls up among the project's five latest
    # proxy sessions (those sessions, then their holders: two queries in a transaction), where
    # the session the conversation resolved to holds them nearly always.
    read = {"name": "read_file", "args": {"path": "auth/jwt.ts"}}
    proxy.upstream.queue(
        Scripted(body=_calls_answer(read)), Scripted(body=text_answer("Off by one."))
    )
    client = proxy.client()
    prompt = types.Content(role="user", parts=[types.Part(text="why do tokens expire early?")])
    first = client.models.generate_content(model="gemini-2.5-flash", contents=[prompt])
    _settled(db, 1, "pending")
    assert first.candidates is not None
    assert first.candidates[0].content is not None
    result = types.Part.from_function_response(name="read_file", response={"text": "source"})
    sent: list[str] = []
    engine = proxy.app.state.agmem.engine.sync_engine

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        client.models.generate_content(
            model="gemini-2.5-flash",
            contents=[
                prompt,
                first.candidates[0].content,
                types.Content(role="user", parts=[result]),
            ],
        )
        rows = _settled(db, 1, "captured")
    finally:
        event.remove(engine, "before_cursor_execute", note)

    assert [(r[1], r[3]) for r in rows] == [("read_file", {"text": "source"})]
    assert not [statement for statement in sent if "ORDER BY created_at DESC" in statement]


@pytest.mark.parametrize(
    "action", [":generateContent", ":streamGenerateContent"], ids=["whole", "stream"]
)
def test_a_call_its_caller_left_before_the_answer_records_nothing_and_is_given_up(
    start_proxy: ProxyFactory,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    action: str,
) -> None:
    # proxy28: the caller (an agent cancelled, a client's own timeout) closed the connection
    # while Gemini thought; the proxy still waited for the answer (up to
    # AGMEM_PROXY_UPSTREAM_TIMEOUT_SECONDS) and a whole one's calls became `pending`
    # observations of calls the agent never received, nor ran, in a session opened for them.
    with fake_gemini() as fake, start_proxy(upstream_url=fake.url) as proxy:
        cleanup = _calls_answer({"name": "run_shell", "args": {"command": "rm -rf build"}})
        fake.queue(action, FakeResponse(body=cleanup, delay_s=10.0))
        url = f"{proxy.url}/v1beta/models/m{action}"
        body = {"contents": [{"role": "user", "parts": [{"text": "clean up"}]}]}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, headers={"X-Agmem-Project": PROJECT}, timeout=0.5)
        log = _logs_until(capsys, "proxy.no_answer")
        proxy.wait_for_capture()

    assert "proxy.caller_gone" in log
    assert _observations(db) == []
    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_two_conversations_in_one_project_session_each_keep_their_calls(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    """Two agent windows on one project share the proxy's session (no X-Agmem-Session). Both
    call `read_file` at the same place in their conversation: the second call got the first's
    id, so it was taken for a retry and dropped, and so was its result."""
    # The fake upstream answers in order: a's call, b's call, then each one's last answer.
    proxy.upstream.queue(
        Scripted(body=_calls_answer({"name": "read_file", "args": {"path": "a.py"}})),
        Scripted(body=_calls_answer({"name": "read_file", "args": {"path": "b.py"}})),
        Scripted(body=text_answer("A done")),
        Scripted(body=text_answer("B done")),
    )
    client = proxy.client()
    # Gemini CLI opens every conversation with the same setup turn (the date, the OS, the
    # folder's listing) and its reply: the conversations differ from their second user turn.
    setup = [
        types.Content(role="user", parts=[types.Part(text="Today's date is Thursday.")]),
        types.Content(role="model", parts=[types.Part(text="Got it. Thanks for the context!")]),
    ]
    histories = {
        name: [*setup, types.Content(role="user", parts=[types.Part(text=f"task {name}")])]
        for name in ("a", "b")
    }
    for history in histories.values():
        history.append(
            client.models.generate_content(model="m", contents=history).candidates[0].content
        )
    for name, history in histories.items():
        result = types.FunctionResponse(name="read_file", response={"output": f"content of {name}"})
        history.append(types.Content(role="user", parts=[types.Part(function_response=result)]))
        client.models.generate_content(model="m", contents=history)

    rows = _settled(db, 2, "captured")
    assert sorted((r[2]["path"], r[3]["output"]) for r in rows) == [
        ("a.py", "content of a"),
        ("b.py", "content of b"),
    ]
    assert len({r[0] for r in rows}) == 1  # one session, as before


def test_a_function_name_holding_a_lone_surrogate_is_captured_cleaned(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    # Gemini's JSON (the answer, and the caller's next request) may carry "\ud800" escapes;
    # `json` reads them as lone surrogates, which the capture's name check refused: the call
    # and its result were lost (`proxy.capture_failed`). Cleaned, as over HTTP.
    call = {"name": "read\ud800", "args": {"path": "a.py"}}
    proxy.upstream.queue(Scripted(body=_calls_answer(call)))
    url = f"{proxy.url}/v1beta/models/m:generateContent"
    headers = {"X-Agmem-Project": PROJECT, "content-type": "application/json"}
    history = [{"role": "user", "parts": [{"text": "open a.py"}]}]
    httpx.post(url, content=json.dumps({"contents": history}), headers=headers)
    _settled(db, 1, "pending")
    result = {"functionResponse": {"name": "read\ud800", "response": {"text": "x"}}}
    follow_up = [*history, {"role": "model", "parts": [{"functionCall": call}]}]
    follow_up.append({"role": "user", "parts": [result]})
    httpx.post(url, content=json.dumps({"contents": follow_up}), headers=headers)

    rows = _settled(db, 1, "captured")
    assert [(r[1], r[4]) for r in rows] == [("read\ufffd", "captured")]


def test_a_call_or_result_capture_refuses_loses_only_itself(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # One answer's calls, and one request's results, were recorded in one transaction: a call
    # the capture refuses (a name over 300 characters) lost its two neighbours too, and a result
    # it refuses (a NaN, which Python's `json` reads) the other result of the request.
    calls = [
        {"name": "read_file", "args": {"path": "a.py"}},
        {"name": "x" * 301, "args": {}},
        {"name": "list_dir", "args": {"path": "."}},
    ]
    proxy.upstream.queue(Scripted(body=_calls_answer(*calls)))
    url = f"{proxy.url}/v1beta/models/m:generateContent"
    headers = {"X-Agmem-Project": PROJECT, "content-type": "application/json"}
    history = [{"role": "user", "parts": [{"text": "look around"}]}]
    httpx.post(url, content=json.dumps({"contents": history}), headers=headers)

    rows = _settled(db, 2, "pending")
    assert [r[1] for r in rows] == ["read_file", "list_dir"]

    results = [
        {"functionResponse": {"name": "read_file", "response": {"size": float("nan")}}},
        {"functionResponse": {"name": "list_dir", "response": {"files": ["a.py"]}}},
    ]
    follow_up = [*history, {"role": "model", "parts": [{"functionCall": c} for c in calls]}]
    follow_up.append({"role": "user", "parts": results})
    httpx.post(url, content=json.dumps({"contents": follow_up}), headers=headers)

    def listed() -> list[tuple[Any, ...]]:
        return [r for r in _observations(db) if r[1] == "list_dir" and r[4] == "captured"]

    assert _wait_for(listed)
    logged = _logs_until(capsys, "proxy.capture_skipped", times=2)
    assert "string_too_long" in logged
    assert "NaN" in logged
    assert {(r[1], r[4]) for r in _observations(db)} == {
        ("read_file", "pending"),
        ("list_dir", "captured"),
    }


def test_a_stream_longer_than_the_upstream_timeout_keeps_its_calls(
    start_proxy: ProxyFactory,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The timeout bounds each read of the upstream, not the answer: a long generation (Gemini's
    # 65k output tokens stream for minutes) goes on as long as chunks keep coming. Capture gave
    # up on the answer at the timeout plus its grace counted from the call, and the calls of
    # the answer's last chunk, which the agent ran, were never recorded.
    with _start_waiting_briefly(start_proxy, monkeypatch, grace_s=0.5) as proxy:
        chunks = [text_answer(f"part {n}. ") for n in range(6)]
        chunks.append(_calls_answer({"name": "run_shell", "args": {"command": "make dist"}}))
        # 7 chunks 0.5 s apart: each read well inside the timeout, the whole 3 s past 1.5 s.
        proxy.upstream.queue(Scripted(chunks=chunks, pause_s=0.5))
        client = proxy.client(**{"X-Agmem-Session": "long-stream"})
        answer = list(client.models.generate_content_stream(model="m", contents="build it"))
        assert answer[-1].function_calls[0].name == "run_shell"
        rows = _settled(db, 1, "pending")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("long-stream", "run_shell", {"command": "make dist"})
    ]
    assert "proxy.capture_failed" not in capsys.readouterr().err


def test_results_after_the_idle_window_attach_to_their_calls_in_the_ended_session(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any]
) -> None:
    # Gemini CLI waits for the user to approve a call for good: approved past the idle window,
    # its result came in a request the proxy filed in the project's next session, where it
    # matched nothing. The call stayed without a result and the result was recorded apart, as
    # a `run_shell` without arguments: two memories, neither saying what happened.
    with start_proxy(proxy_session_idle_seconds=1) as proxy:
        url = f"{proxy.url}/v1beta/models/m:generateContent"
        headers = {"X-Agmem-Project": PROJECT}
        call = {"name": "run_shell", "args": {"command": "make deploy"}}
        proxy.upstream.queue(Scripted(body=_calls_answer(call)), Scripted(body=text_answer("ok")))
        prompt = {"role": "user", "parts": [{"text": "deploy it"}]}
        httpx.post(url, json={"contents": [prompt]}, headers=headers)
        first = _settled(db, 1, "pending")[0][0]
        _wait_for(
            lambda: db.execute(
                "SELECT 1 FROM sessions WHERE id = %s AND status <> 'active'", (first,)
            ).fetchall()
        )

        model = {"role": "model", "parts": [{"functionCall": call}]}
        response = {"name": "run_shell", "response": {"out": "deployed v2"}}
        result = {"role": "user", "parts": [{"functionResponse": response}]}
        httpx.post(url, json={"contents": [prompt, model, result]}, headers=headers)
        proxy.wait_for_capture()
        rows = _observations(db)
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        (first, "run_shell", {"command": "make deploy"}, {"out": "deployed v2"}, "captured")
    ]
    # The answer to the late result is text: it opened a second, empty session, which was
    # summarised as one that "made no tool calls".
    assert db.execute("SELECT id FROM sessions").fetchall() == [(first,)]


def test_a_stream_that_goes_on_holds_the_projects_later_captures_only_to_a_ceiling(
    start_proxy: ProxyFactory,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without X-Agmem-Session, a project's captures share one queue: a stream whose chunks kept
    # coming held every later call's capture (and its body) until it ended, with no ceiling.
    # Idle bound 1 s, so a ceiling of 4 s from the request; the stream runs 8 s.
    with _start_waiting_briefly(start_proxy, monkeypatch, grace_s=0.0) as proxy:
        chunks = [text_answer(f"part {n}. ") for n in range(32)]
        proxy.upstream.queue(
            Scripted(chunks=chunks, pause_s=0.25),
            Scripted(body=_calls_answer({"name": "read_file", "args": {"path": "NOTES"}})),
        )
        client = proxy.client()
        streamed = threading.Event()

        def stream() -> None:
            list(client.models.generate_content_stream(model="m", contents="write it all"))
            streamed.set()

        streamer = threading.Thread(target=stream)
        streamer.start()
        try:
            _wait_for(lambda: proxy.upstream.requests)
            answer = client.models.generate_content(model="m", contents="and read the notes")
            assert answer.function_calls is not None
            rows = _settled(db, 1, "pending")
            # Recorded while the stream still runs: the first job gave up at its ceiling.
            assert not streamed.is_set()
        finally:
            streamer.join()
    assert [(r[1], r[2]) for r in rows] == [("read_file", {"path": "NOTES"})]
    logged = _logs_until(capsys, "proxy.capture_failed")
    assert "error_type=TimeoutError" in logged
