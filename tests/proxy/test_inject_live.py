"""Memory injection through the live proxy, seen from the upstream's side of the wire."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from google.genai import types

from tests.fakes.gemini import text_answer
from tests.proxy.conftest import PROJECT, Proxy, ProxyFactory
from tests.proxy.upstream import Scripted

SUMMARY = "Fixed the JWT expiry check in auth/jwt.ts; refresh tokens now rotate on every use."


def _remember(db: psycopg.Connection[Any], project: str = PROJECT) -> None:
    db.execute(
        "INSERT INTO sessions (id, project_path, status, summary, user_prompt, ended_at) "
        "VALUES ('earlier', %s, 'summarized', %s, 'fix login', now())",
        (project, SUMMARY),
    )


def _system_texts(proxy: Proxy, index: int = -1) -> list[str]:
    system = proxy.upstream.requests[index].body.get("systemInstruction") or {}
    return [part.get("text", "") for part in system.get("parts", [])]


def test_memory_goes_first_in_the_system_instruction_and_the_answer_is_unchanged(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    proxy.upstream.queue(Scripted(body=text_answer("use the refresh endpoint")))
    client = proxy.client()

    answer = client.models.generate_content(
        model="gemini-2.5-flash",
        contents="why does login fail after an hour?",
        config=types.GenerateContentConfig(system_instruction="Be terse."),
    )

    assert answer.text == "use the refresh endpoint"
    memory, own = _system_texts(proxy)
    assert memory.startswith("<memory>")
    assert memory.endswith("</memory>")
    assert "auth/jwt.ts" in memory
    assert own == "Be terse."
    seen = proxy.upstream.requests[0].body
    assert seen["contents"] == [
        {"role": "user", "parts": [{"text": "why does login fail after an hour?"}]}
    ]


def test_streaming_call_is_injected_too(proxy: Proxy, db: psycopg.Connection[Any]) -> None:
    _remember(db)
    proxy.upstream.queue(Scripted(chunks=[text_answer("a"), text_answer("b")]))
    client = proxy.client()
    texts = [c.text for c in client.models.generate_content_stream(model="m", contents="login?")]
    assert texts == ["a", "b"]
    (memory,) = _system_texts(proxy)
    assert "auth/jwt.ts" in memory


def test_an_earlier_block_is_replaced_not_duplicated(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    client = proxy.client()
    stale = "<memory>\nstale memory from yesterday\n</memory>"
    for _turn in range(3):
        client.models.generate_content(
            model="m",
            contents="login?",
            config=types.GenerateContentConfig(system_instruction=[stale, "Be terse."]),
        )
    for index in range(3):
        texts = _system_texts(proxy, index)
        joined = "\n".join(texts)
        assert joined.count("<memory>") == 1
        assert "stale memory" not in joined
        assert texts[1:] == ["Be terse."]


def test_inject_off_and_no_project_leave_the_request_untouched(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    client = proxy.client(**{"X-Agmem-Inject": "off"})
    client.models.generate_content(model="m", contents="login?")
    assert "systemInstruction" not in proxy.upstream.requests[-1].body

    sent = b'{"contents":[{"role":"user","parts":[{"text":"login?"}]}]}'
    httpx.post(f"{proxy.url}/v1/models/m:generateContent", content=sent)
    assert proxy.upstream.requests[-1].body == {
        "contents": [{"role": "user", "parts": [{"text": "login?"}]}]
    }


def test_default_project_setting_applies_without_the_header(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any]
) -> None:
    _remember(db, "/srv/default")
    with start_proxy(proxy_default_project="/srv/default") as proxy:
        httpx.post(
            f"{proxy.url}/v1beta/models/m:generateContent",
            json={"contents": [{"role": "user", "parts": [{"text": "login?"}]}]},
        )
        assert "auth/jwt.ts" in _system_texts(proxy)[0]


def test_thought_parts_and_signatures_travel_untouched(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    contents = [
        {"role": "user", "parts": [{"text": "fix login"}]},
        {
            "role": "model",
            "parts": [
                {"text": "<memory>not ours</memory>", "thought": True},
                {
                    "functionCall": {"name": "read_file", "args": {"path": "auth/jwt.ts"}},
                    "thoughtSignature": "c2lnbmF0dXJlLWJ5dGVz",
                },
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
    ]
    reply = httpx.post(
        f"{proxy.url}/v1beta/models/m:generateContent",
        json={"contents": contents},
        headers={"X-Agmem-Project": PROJECT},
    )
    assert reply.status_code == 200
    seen = proxy.upstream.requests[0].body
    assert seen["contents"] == contents
    assert "auth/jwt.ts" in seen["systemInstruction"]["parts"][0]["text"]


def test_a_first_call_waits_for_memory_and_later_prompts_fall_back_on_it(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    with start_proxy(proxy_context_timeout_ms=1, proxy_first_context_timeout_ms=10_000) as proxy:
        client = proxy.client()
        client.models.generate_content(model="m", contents="Where were we?")
        # The project's first call has no older block to fall back on, and a conversation's first
        # turn is where memory matters most: it waits for its block (it used to go without).
        assert "auth/jwt.ts" in _system_texts(proxy)[0]
        # 1 ms is too short for any later build: a new prompt goes on with the latest block.
        client.models.generate_content(model="m", contents="login?")
        assert "auth/jwt.ts" in _system_texts(proxy)[0]


def test_without_an_embedder_the_proxy_starts_and_forwards_without_memory(
    start_proxy: ProxyFactory, db: psycopg.Connection[Any]
) -> None:
    _remember(db)
    # The optional sentence-transformers extra is not installed here, so no embedder loads.
    with start_proxy(embedding_provider="sentence-transformers") as proxy:
        client = proxy.client()
        assert client.models.generate_content(model="m", contents="login?").text
        assert "systemInstruction" not in proxy.upstream.requests[0].body


def test_an_injected_call_forwards_the_callers_numbers_as_they_were_sent(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    # The injected body was re-encoded from Python's floats: `1e400` went upstream as
    # `Infinity` (not JSON), `1e-400` as 0.0 and `1.50` as 1.5.
    _remember(db)
    numbers = '{"big": 1e400, "tiny": 1e-400, "scale": 1.50, "neg": -0.0, "n": 7}'
    body = (
        '{"contents": [{"role": "user", "parts": [{"text": "fix login"}]}, '
        '{"role": "user", "parts": [{"functionResponse": {"name": "calc", "response": '
        + numbers
        + "}}]}]}"
    )
    reply = httpx.post(
        f"{proxy.url}/v1beta/models/m:generateContent",
        content=body.encode(),
        headers={"X-Agmem-Project": PROJECT, "content-type": "application/json"},
    )
    assert reply.status_code == 200
    seen = proxy.upstream.requests[0]
    assert "auth/jwt.ts" in seen.body["systemInstruction"]["parts"][0]["text"]
    assert b"Infinity" not in seen.raw
    # The conversation goes as it was sent, byte for byte (app/proxy/body.py).
    assert numbers.encode() in seen.raw
