"""Forwarding through the live proxy: the caller's key, the answer unchanged, errors relayed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from google.genai import errors, types

from app.main import create_app
from app.proxy.forward import make_http_client, upstream_ssl_context
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.proxy.conftest import CALLER_KEY, Proxy, ProxyFactory
from tests.proxy.upstream import Scripted, sse_bytes


@contextlib.contextmanager
def _dead_port() -> Iterator[int]:
    """A port nothing answers on for as long as the block runs: bound, never listening, so a
    connection to it is refused. (A port probed free and closed was taken by another test's
    server between the probe and the request: a 200 where the test expected a 502.)"""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def test_generate_content_reaches_upstream_with_callers_key_and_answer_unchanged(
    proxy: Proxy,
) -> None:
    upstream_answer = text_answer("upstream says hi", prompt_tokens=7, output_tokens=3)
    upstream_answer["modelVersion"] = "gemini-2.5-flash-001"
    proxy.upstream.queue(Scripted(body=upstream_answer))

    client = proxy.client(**{"X-Agmem-Inject": "off"})  # kept: a dropped Client closes itself
    answer = client.models.generate_content(model="gemini-2.5-flash", contents="hello")

    assert answer.text == "upstream says hi"
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.total_token_count == 10
    (seen,) = proxy.upstream.requests
    assert seen.path == "/v1/models/gemini-2.5-flash:generateContent"
    assert seen.headers["x-goog-api-key"] == CALLER_KEY
    assert not [name for name in seen.headers if name.startswith("x-agmem-")]
    assert seen.body["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]


def test_raw_bytes_query_key_and_v1beta_pass_through(proxy: Proxy) -> None:
    upstream_answer = {"candidates": [{"content": {"parts": [{"text": "é ✓"}]}}], "x": 1.5e-7}
    proxy.upstream.queue(Scripted(body=upstream_answer))
    sent = b'{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0.1}}'

    reply = httpx.post(
        f"{proxy.url}/v1beta/models/gemini-2.5-pro:generateContent?key=query-key&x=1",
        content=sent,
        headers={"content-type": "application/json", "X-Agmem-Inject": "off"},
    )

    assert reply.status_code == 200
    assert reply.content == json.dumps(upstream_answer).encode()
    assert reply.headers["x-upstream-marker"] == "fake"
    (seen,) = proxy.upstream.requests
    assert seen.path == "/v1beta/models/gemini-2.5-pro:generateContent?key=query-key&x=1"
    assert json.dumps(seen.body, separators=(",", ":")).encode() == sent


def test_the_answer_carries_one_date_and_one_server_header_ours(proxy: Proxy) -> None:
    # The upstream's were relayed beside the ones our server sets for its own hop: two of each.
    proxy.upstream.queue(Scripted(body=text_answer("hi")))

    reply = httpx.post(
        f"{proxy.url}/v1beta/models/gemini-2.5-flash:generateContent",
        json={"contents": [{"parts": [{"text": "hi"}]}]},
        headers={"X-Agmem-Inject": "off", "x-goog-api-key": CALLER_KEY},
    )

    assert reply.status_code == 200
    assert len(reply.headers.get_list("date")) == 1
    assert reply.headers.get_list("server") == ["uvicorn"]  # the live test server's, not BaseHTTP's
    assert reply.headers["x-upstream-marker"] == "fake"  # the upstream's own headers still come


def test_stream_is_relayed_chunk_by_chunk_without_buffering(proxy: Proxy) -> None:
    chunks = [text_answer(f"part {n} ") for n in range(3)]
    proxy.upstream.queue(Scripted(chunks=chunks, pause_s=0.6))
    url = f"{proxy.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"

    started = time.monotonic()
    arrivals: list[float] = []
    received = b""
    with httpx.stream(
        "POST",
        url,
        json={"contents": [{"parts": [{"text": "go"}]}]},
        headers={"x-goog-api-key": CALLER_KEY},
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        for piece in reply.iter_bytes():
            arrivals.append(time.monotonic() - started)
            received += piece

    assert received == b"".join(sse_bytes(chunks))
    # The first event arrives long before the upstream has finished (it pauses 0.6 s per chunk).
    assert arrivals[0] < 0.5
    assert arrivals[-1] > 1.0


def test_stream_through_google_genai_client(proxy: Proxy) -> None:
    thought = {
        "text": "considering",
        "thought": True,
        "thoughtSignature": "c2lnLTE=",
    }
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [thought]}}]},
        text_answer("Hello "),
        text_answer("world"),
    ]
    proxy.upstream.queue(Scripted(chunks=chunks))
    texts = []
    signatures = []
    client = proxy.client()
    for chunk in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="say hello"
    ):
        for part in chunk.candidates[0].content.parts if chunk.candidates else []:
            if part.thought:
                signatures.append(part.thought_signature)
            elif part.text:
                texts.append(part.text)
    assert "".join(texts) == "Hello world"
    assert signatures == [b"sig-1"]
    (seen,) = proxy.upstream.requests
    assert seen.path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def _text_then_error(
    proxy: Proxy,
) -> tuple[list[str | None], pytest.ExceptionInfo[errors.ServerError]]:
    """A stream's first answer's text through google-genai, and the error its next one raises."""
    client = proxy.client()  # kept: a dropped Client closes itself
    stream = client.models.generate_content_stream(model="gemini-2.5-flash", contents="say hello")
    texts = [next(stream).text]
    with pytest.raises(errors.ServerError) as raised:
        next(stream)
    return texts, raised


def test_a_stream_the_upstream_breaks_off_ends_in_an_error_the_client_raises(
    start_proxy: ProxyFactory,
) -> None:
    # The timeout bounds the connect too: a shorter one fails a loaded run's local connect.
    with start_proxy(proxy_upstream_timeout_seconds=1.0) as proxy:
        # The second chunk comes after the proxy's read timeout: the upstream went silent.
        chunks = [text_answer("Hello "), text_answer("x")]
        proxy.upstream.queue(Scripted(chunks=chunks, pause_s=3.0))
        texts, raised = _text_then_error(proxy)

    assert texts == ["Hello "]
    assert raised.value.code == 504
    assert "broke off the stream (ReadTimeout)" in str(raised.value)


def _calls(name: str) -> dict[str, Any]:
    part = {"functionCall": {"name": name, "args": {"path": "Makefile"}}}
    return {"candidates": [{"content": {"role": "model", "parts": [part]}}]}


def _read_into(received: bytearray, answer: httpx.Response) -> None:
    for chunk in answer.iter_raw():
        received += chunk


def test_a_json_stream_the_upstream_cuts_is_an_incomplete_transfer(
    proxy: Proxy, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # proxy28: without `alt=sse` Gemini streams one JSON array. Cut by the upstream mid-body,
    # it was relayed as a clean end (its last chunk sent): half an array and curl's exit 0,
    # where the upstream itself gave a transfer error (curl 18). Now the answer is cut too.
    first = json.dumps(_calls("read_file")).encode()
    pieces = [b"[" + first, b",\r\n" + first[:20]]
    proxy.upstream.queue(Scripted(raw_chunks=pieces, cut=True))
    url = f"{proxy.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    headers = {"x-goog-api-key": CALLER_KEY, "X-Agmem-Project": "/home/dev/shop"}
    received = bytearray()
    with (
        httpx.Client(timeout=20) as client,
        client.stream("POST", url, json={"contents": []}, headers=headers) as answer,
        pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
    ):
        _read_into(received, answer)

    assert received == b"".join(pieces)
    proxy.wait_for_capture()
    logged = capsys.readouterr()
    assert "proxy.upstream_stream_broken" in logged.out + logged.err
    assert "Traceback" not in logged.out + logged.err
    # A cut answer is no answer: its complete first call is not recorded, as for SSE.
    assert db.execute("SELECT count(*) FROM observations").fetchone() == (0,)


def test_an_sse_stream_the_upstream_cuts_mid_event_ends_in_the_error_event_alone(
    proxy: Proxy,
) -> None:
    # proxy28: the half event was relayed as it came, and the error event's blank line closed
    # it: google-genai raised on that garbage (`UnknownApiResponseError`, "Failed to parse
    # response as JSON"), never on the 502 meant for it. An event's start is now relayed with
    # its end, so a cut leaves none: the client reads the whole events, then the error.
    events = sse_bytes([text_answer("Hello "), text_answer("world")])
    proxy.upstream.queue(Scripted(raw_chunks=[events[0] + events[1][:15]], cut=True))
    texts, raised = _text_then_error(proxy)

    assert texts == ["Hello "]
    assert raised.value.code == 502
    assert "broke off the stream (RemoteProtocolError)" in str(raised.value)


@pytest.mark.parametrize("status", [429, 500])
def test_upstream_errors_are_relayed_unchanged(proxy: Proxy, status: int) -> None:
    body = {"error": {"code": status, "message": f"upstream {status}", "status": "X"}}
    proxy.upstream.queue(Scripted(status=status, body=body), Scripted(status=status, body=body))
    client = proxy.client()

    with pytest.raises(errors.APIError) as raised:
        client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert raised.value.code == status
    assert raised.value.message == f"upstream {status}"
    proxy.upstream.queue(Scripted(status=status, body=body))
    with pytest.raises(errors.APIError) as streamed:
        list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert streamed.value.code == status

    reply = httpx.post(
        f"{proxy.url}/v1beta/models/m:streamGenerateContent?alt=sse",
        json={"contents": [{"parts": [{"text": "hi"}]}]},
    )
    assert reply.status_code == status
    assert reply.json() == body


def test_dead_upstream_is_502_in_the_error_shape_without_the_key(
    start_proxy: ProxyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    with _dead_port() as port, start_proxy(upstream_url=f"http://127.0.0.1:{port}") as proxy:
        for action in ("generateContent", "streamGenerateContent?alt=sse&key=secret-in-query"):
            reply = httpx.post(
                f"{proxy.url}/v1beta/models/m:{action}",
                json={"contents": [{"parts": [{"text": "hi"}]}]},
                headers={"x-goog-api-key": "secret-in-header"},
            )
            assert reply.status_code == 502
            assert reply.json()["error"] == "UpstreamUnavailable"
            assert "could not be reached" in reply.json()["detail"]
            assert "secret" not in reply.text

        client = proxy.client()
        with pytest.raises(errors.APIError) as raised:
            client.models.generate_content(model="m", contents="hi")
        assert raised.value.code == 502
    captured = capsys.readouterr()
    assert "secret" not in captured.out + captured.err


def test_an_upstream_that_does_not_answer_in_time_is_a_504_that_says_so(
    start_proxy: ProxyFactory,
) -> None:
    with (
        fake_gemini() as fake,
        start_proxy(upstream_url=fake.url, proxy_upstream_timeout_seconds=1.0) as proxy,
    ):
        late = FakeResponse(body=text_answer("too late"), delay_s=3.0)
        fake.queue(":generateContent", late)
        fake.queue(":streamGenerateContent", late)
        client = proxy.client()
        with pytest.raises(errors.ServerError) as whole:
            client.models.generate_content(model="m", contents="hi")
        with pytest.raises(errors.ServerError) as streamed:
            list(client.models.generate_content_stream(model="m", contents="hi"))
        # A connection the upstream drops is still "could not be reached".
        fake.queue(":generateContent", FakeResponse(drop=True))
        with pytest.raises(errors.ServerError) as dropped:
            client.models.generate_content(model="m", contents="hi")

    for raised in (whole, streamed):
        assert raised.value.code == 504
        assert raised.value.details == {
            "error": "UpstreamTimeout",
            "detail": "the Gemini upstream 127.0.0.1 did not answer within 1 s "
            "(AGMEM_PROXY_UPSTREAM_TIMEOUT_SECONDS)",
        }
    assert dropped.value.code == 502
    assert "could not be reached (RemoteProtocolError" in dropped.value.details["detail"]


def test_invalid_json_is_forwarded_for_upstream_to_judge(proxy: Proxy) -> None:
    bad = {"error": {"code": 400, "message": "Invalid JSON payload"}}
    proxy.upstream.queue(Scripted(status=400, body=bad))
    reply = httpx.post(
        f"{proxy.url}/v1beta/models/m:generateContent",
        content=b"{not json",
        headers={"X-Agmem-Project": "/p"},
    )
    assert reply.status_code == 400
    assert reply.json() == bad
    assert proxy.upstream.requests[0].body == "{not json"


def test_token_is_required_when_set_and_never_forwarded(start_proxy: ProxyFactory) -> None:
    with start_proxy(api_token="service-token") as proxy:
        url = f"{proxy.url}/v1beta/models/m:generateContent"
        payload = {"contents": [{"parts": [{"text": "hi"}]}]}
        refused = httpx.post(url, json=payload)
        assert refused.status_code == 401
        assert refused.json()["error"] == "ProxyUnauthorized"
        assert httpx.post(url, json=payload, headers={"X-Agmem-Token": "wrong"}).status_code == 401
        assert proxy.upstream.requests == []

        client = proxy.client(**{"X-Agmem-Token": "service-token"})
        answer = client.models.generate_content(
            model="m", contents="hi", config=types.GenerateContentConfig(temperature=0)
        )
        assert answer.text == "default answer"
        assert "x-agmem-token" not in proxy.upstream.requests[0].headers


def test_other_gemini_calls_pass_through_untouched(proxy: Proxy) -> None:
    proxy.upstream.queue(Scripted(body={"totalTokens": 42}))
    client = proxy.client()
    counted = client.models.count_tokens(model="gemini-2.5-flash", contents="how many?")
    assert counted.total_tokens == 42
    (seen,) = proxy.upstream.requests
    assert seen.path == "/v1/models/gemini-2.5-flash:countTokens"
    assert "systemInstruction" not in seen.body
    assert seen.headers["x-goog-api-key"] == CALLER_KEY
    assert not [name for name in seen.headers if name.startswith("x-agmem-")]


def test_head_on_a_gemini_path_is_relayed_upstream_as_head(proxy: Proxy) -> None:
    # The proxy's paths answered HEAD 405 with an `Allow` that listed GET (RFC 9110, 9.3.2: a
    # GET resource answers HEAD); relayed as a HEAD, it asks the upstream for no body.
    proxy.upstream.queue(Scripted(body={"models": []}))

    answer = httpx.head(f"{proxy.url}/v1beta/models?pageSize=5")

    assert answer.status_code == 200, answer.headers
    assert answer.content == b""
    assert answer.headers["x-upstream-marker"] == "fake"
    (seen,) = proxy.upstream.requests
    assert (seen.method, seen.path) == ("HEAD", "/v1beta/models?pageSize=5")


def test_odd_bodies_are_forwarded_not_failed(proxy: Proxy) -> None:
    url = f"{proxy.url}/v1beta/models/m:generateContent"
    headers = {"X-Agmem-Project": "/p", "content-type": "application/json"}
    deep = b"[" * 100_000 + b"]" * 100_000
    lone_surrogate = b'{"contents": [{"role": "user", "parts": [{"text": "bad \\ud800 text"}]}]}'
    # An old block to remove makes the proxy re-encode the body, lone surrogate included.
    rewritten = (
        b'{"systemInstruction": {"parts": [{"text": "<memory>old</memory>"}]},'
        b' "contents": [{"parts": [{"text": "x \\udc00"}]}]}'
    )
    for body in (deep, lone_surrogate, rewritten, b"[1, 2]", b"\xff\xfe"):
        reply = httpx.post(url, content=body, headers=headers)
        assert reply.status_code == 200
    assert len(proxy.upstream.requests) == 5
    assert proxy.upstream.requests[2].body == {"contents": [{"parts": [{"text": "x \udc00"}]}]}


def test_odd_model_names_are_forwarded_as_sent(
    proxy: Proxy,
) -> None:
    # A NUL, a newline or a space decoded from the path is not valid in a URL: the raw path is.
    for model in ("a%00b", "line%0Abreak", "two%20words", "%C3%A9t%C3%A9"):
        reply = httpx.post(
            f"{proxy.url}/v1beta/models/{model}:generateContent",
            json={"contents": [{"parts": [{"text": "hi"}]}]},
            headers={"X-Agmem-Inject": "off"},
        )
        assert reply.status_code == 200, model
        assert proxy.upstream.requests[-1].path == f"/v1beta/models/{model}:generateContent"

    assert len(proxy.upstream.requests) == 4


def test_url_too_long_to_forward_is_400_and_captures_nothing(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Servers limit the request line well below httpx's 64 KiB, so this meets the app directly;
    # the upstream's longer base pushes the forwarded URL past what httpx will send.
    settings = make_settings(
        home=tmp_path / "home", gemini_upstream=f"http://127.0.0.1:9/{'v' * 200}"
    )
    with TestClient(create_app(settings, database_url=database_url)) as client:
        reply = client.post(
            f"/v1beta/models/m:generateContent?x={'a' * 65_400}",
            json={"contents": [{"parts": [{"text": "hi"}]}]},
            headers={"X-Agmem-Project": "/p"},
        )
    assert reply.status_code == 400
    assert reply.json()["error"] == "UnforwardableRequest"
    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_upstream_clients_share_one_tls_context_that_verifies() -> None:
    # Built once per process (loading the CA bundle cost 90-170 ms an app start), never weakened.
    first, second = make_http_client(5.0), make_http_client(5.0)
    try:
        context = upstream_ssl_context()
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
        assert context.cert_store_stats()["x509_ca"] > 0
        for client in (first, second):
            assert client._transport._pool._ssl_context is context  # type: ignore[attr-defined]
    finally:
        for client in (first, second):
            asyncio.run(client.aclose())
