"""What the proxy's capture logs: one line per batch of calls or results, with its counts right."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
import structlog
from structlog.testing import LogCapture
from structlog.typing import EventDict

from app.proxy import capture as proxy_capture
from app.proxy import record as proxy_record
from tests.fakes.gemini import text_answer
from tests.proxy.conftest import PROJECT, Proxy
from tests.proxy.upstream import Scripted

SESSION = "ide-session-deleted"


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[EventDict]:
    """The capture's log events, debug ones included, of this test only (the capture runs in
    the live server's thread: the global configuration is left alone)."""
    capture = LogCapture()
    for module in (proxy_capture, proxy_record):
        logger = structlog.wrap_logger(
            None,
            processors=[capture],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        )
        monkeypatch.setattr(module, "log", logger)
    return capture.entries


def _calls_answer(*names: str) -> dict[str, Any]:
    parts = [{"functionCall": {"name": name, "args": {"path": f"{name}.py"}}} for name in names]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}


def _results(*names: str) -> dict[str, Any]:
    parts = [{"functionResponse": {"name": n, "response": {"text": n}}} for n in names]
    return {"role": "user", "parts": parts}


def _wait_for(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def _events(logged: list[EventDict], event: str) -> list[EventDict]:
    return [entry for entry in logged if entry["event"] == event]


def _post(proxy: Proxy, contents: list[dict[str, Any]]) -> None:
    url = f"{proxy.url}/v1beta/models/m:generateContent"
    headers = {
        "X-Agmem-Project": PROJECT,
        "X-Agmem-Session": SESSION,
        "content-type": "application/json",
    }
    answer = httpx.post(url, content=json.dumps({"contents": contents}), headers=headers)
    assert answer.status_code == 200, answer.text
    proxy.wait_for_capture()


def test_a_batch_for_a_deleted_session_logs_one_line_per_batch(
    proxy: Proxy,
    db: psycopg.Connection[Any],
    logged: list[EventDict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The session was deleted while the proxy still knew it (its memo of the conversation's
    # session): every call and every result of the batch was skipped, one warning line each,
    # and `proxy.captured` counted them as captured.
    monkeypatch.setattr(proxy_capture, "_SESSION_MEMO_S", 3600.0)  # however slow the machine
    calls = ("read_a", "read_b", "read_c")
    proxy.upstream.queue(
        Scripted(body=_calls_answer(*calls)), Scripted(body=_calls_answer("list_x", "list_y"))
    )
    history = [{"role": "user", "parts": [{"text": "look around"}]}]
    _post(proxy, history)
    assert _wait_for(lambda: db.execute("SELECT count(*) FROM observations").fetchone() == (3,))
    db.execute("DELETE FROM sessions WHERE id = %s", (SESSION,))
    logged.clear()

    model_turn = _calls_answer(*calls)["candidates"][0]["content"]
    _post(proxy, [*history, model_turn, _results(*calls)])

    skipped = _events(logged, "proxy.capture_skipped")
    assert [(e["what"], e["captured"], e["skipped"]) for e in skipped] == [
        ("result", 0, 3),
        ("call", 0, 2),
    ]
    assert all(e["session_id"] == SESSION for e in skipped)
    assert [e["functions"] for e in skipped] == [list(calls), ["list_x", "list_y"]]
    assert all(e["errors"] == [f"SessionNotFound: no session with id {SESSION!r}"] for e in skipped)
    assert _events(logged, "proxy.captured") == []  # nothing was
    assert db.execute("SELECT count(*) FROM observations").fetchone() == (0,)


def test_captured_counts_leave_out_the_skipped_items(
    proxy: Proxy, db: psycopg.Connection[Any], logged: list[EventDict]
) -> None:
    # A call the capture refuses (a name over 300 characters) and a result it refuses (a NaN)
    # were counted in `proxy.captured` as captured.
    long_name = "x" * 301
    proxy.upstream.queue(
        Scripted(body=_calls_answer("read_a", long_name, "read_b")),
        Scripted(body=text_answer("done")),
    )
    history = [{"role": "user", "parts": [{"text": "look around"}]}]
    _post(proxy, history)
    model_turn = _calls_answer("read_a", long_name, "read_b")["candidates"][0]["content"]
    results = _results("read_a", "read_b")
    results["parts"][0]["functionResponse"]["response"] = {"size": float("nan")}
    _post(proxy, [*history, model_turn, results])

    captured = _events(logged, "proxy.captured")
    assert [(e["calls"], e["results"], e["skipped"]) for e in captured] == [(2, 0, 1), (0, 1, 1)]
    skipped = _events(logged, "proxy.capture_skipped")
    assert [(e["what"], e["captured"], e["skipped"]) for e in skipped] == [
        ("call", 2, 1),
        ("result", 1, 1),
    ]
    assert "string_too_long" in skipped[0]["errors"][0]
    assert "NaN" in skipped[1]["errors"][0]
    statuses = db.execute("SELECT function_name, status FROM observations ORDER BY seq").fetchall()
    assert statuses == [("read_a", "pending"), ("read_b", "captured")]
