"""The bearer-token rule and the request body limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi import APIRouter, Request
from fastapi.testclient import TestClient

from app.errors import AppError, ForbiddenOrigin, MisdirectedRequest
from app.main import create_app
from tests.conftest import make_settings

echo_router = APIRouter()


@echo_router.post("/api/echo")
async def echo(request: Request) -> dict[str, int]:
    return {"received": len(await request.body())}


@pytest.fixture
def guarded(database_url: str, tmp_path: Any) -> Iterator[TestClient]:
    settings = make_settings(home=tmp_path, api_token="s3cret", max_body_bytes=2048)
    app = create_app(settings, database_url=database_url)
    app.include_router(echo_router)
    with TestClient(app) as client:
        yield client


def test_api_routes_need_the_token(guarded: TestClient) -> None:
    missing = guarded.get("/api/sessions")
    wrong = guarded.get("/api/sessions", headers={"Authorization": "Bearer nope"})

    assert missing.status_code == 401
    assert missing.json()["error"] == "Unauthorized"
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert wrong.status_code == 401
    assert wrong.json() == {"error": "Unauthorized", "detail": "the bearer token is not valid"}


def test_the_right_token_passes(guarded: TestClient) -> None:
    response = guarded.get("/api/no-such-route", headers={"Authorization": "Bearer s3cret"})

    assert response.status_code == 404  # past the guard, to routing


def test_health_and_docs_stay_open(guarded: TestClient) -> None:
    assert guarded.get("/health").status_code == 200
    assert guarded.get("/docs").status_code == 200


def test_head_answers_as_get_without_the_body(guarded: TestClient) -> None:
    # HTTP (RFC 9110, 9.3.2) has every GET resource answer HEAD; FastAPI's routes took GET alone,
    # and `curl -I /health` or a monitor checking by HEAD got 405.
    token = {"Authorization": "Bearer s3cret"}
    health = guarded.head("/health")
    sessions = guarded.head("/api/sessions", headers=token)
    refused = guarded.head("/api/sessions")
    post_only = guarded.head("/api/search", headers=token)

    assert health.status_code == 200
    assert health.content == b""
    assert health.headers["content-type"] == "application/json"
    assert int(health.headers["content-length"]) > 0  # the GET's length, its body left out
    assert sessions.status_code == 200
    assert sessions.content == b""
    assert refused.status_code == 401  # the token rule holds for HEAD as for GET
    assert refused.content == b""
    assert post_only.status_code == 405
    assert post_only.headers["allow"] == "POST"


def test_mcp_is_guarded_too(guarded: TestClient) -> None:
    assert guarded.post("/mcp", json={}).status_code == 401


def test_body_over_the_limit_is_413_by_content_length(guarded: TestClient) -> None:
    response = guarded.post(
        "/api/anything",
        content=b"x" * 4096,
        headers={"Authorization": "Bearer s3cret", "content-type": "application/json"},
    )

    assert response.status_code == 413
    assert response.json() == {
        "error": "PayloadTooLarge",
        "detail": "the request body exceeds the limit of 2048 bytes",
    }


def test_streamed_body_over_the_limit_is_413(guarded: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(8):
            yield b"y" * 1024

    response = guarded.post(
        "/api/echo",
        content=chunks(),
        headers={"Authorization": "Bearer s3cret", "content-type": "application/json"},
    )

    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/search"),
        ("PUT", "/api/memories/project.note"),
        ("POST", "/api/observe"),
        ("POST", "/v1beta/models/gemini-2.5-flash:generateContent"),
        ("POST", "/mcp"),
    ],
)
def test_a_chunked_body_over_the_limit_is_413_on_every_route(
    guarded: TestClient, method: str, path: str
) -> None:
    # Without Content-Length the limit is met while the body streams in. A route whose body
    # FastAPI reads (search, memories...) turned the limit's signal into its own vague
    # `400 BadRequest: There was an error parsing the body`.
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(8):
            yield b"y" * 1024

    response = guarded.request(
        method,
        path,
        content=chunks(),
        headers={
            "Authorization": "Bearer s3cret",
            "X-Agmem-Token": "s3cret",
            "content-type": "application/json",
        },
    )

    assert response.status_code == 413
    assert response.json() == {
        "error": "PayloadTooLarge",
        "detail": "the request body exceeds the limit of 2048 bytes",
    }


def test_body_within_the_limit_reaches_the_route(guarded: TestClient) -> None:
    response = guarded.post(
        "/api/echo", content=b"z" * 2048, headers={"Authorization": "Bearer s3cret"}
    )

    assert response.json() == {"received": 2048}


def test_without_a_token_setting_api_is_open(client: TestClient) -> None:
    assert client.get("/api/no-such-route").status_code == 404


def test_open_health_names_no_project_without_the_token(
    guarded: TestClient, db: psycopg.Connection[Any]
) -> None:
    # /health stays open for probes; on a shared server it listed every project's path (its
    # tokens saved) to anyone who could reach the port.
    db.execute(
        "INSERT INTO sessions (id, project_path) VALUES ('s1', '/home/alice/clients/acme');"
        "INSERT INTO observations (id, session_id, project_path, function_name, "
        "observation_type, status, tokens_saved) VALUES ('o1', 's1', "
        "'/home/alice/clients/acme', 'read_file', 'file_read', 'compressed', 40)"
    )

    anonymous = guarded.get("/health")
    wrong = guarded.get("/health", headers={"Authorization": "Bearer nope"})
    authorized = guarded.get("/health", headers={"Authorization": "Bearer s3cret"})

    assert anonymous.status_code == wrong.status_code == authorized.status_code == 200
    for response in (anonymous, wrong):
        assert "acme" not in response.text
        assert response.json()["worker"]["tokensSaved"] == 40
    assert authorized.json()["worker"]["tokensSavedByProject"] == {"/home/alice/clients/acme": 40}


@pytest.mark.parametrize("value", ["bearer s3cret", "BEARER s3cret", "Bearer  s3cret"])
def test_the_scheme_is_case_insensitive(guarded: TestClient, value: str) -> None:
    response = guarded.get("/api/no-such-route", headers={"Authorization": value})

    assert response.status_code == 404  # past the guard (RFC 7235: the scheme has no case)


@pytest.mark.parametrize("value", ["Basic s3cret", "Bearers3cret", "Bearer s3cret2", "s3cret"])
def test_only_the_bearer_token_itself_passes(guarded: TestClient, value: str) -> None:
    assert guarded.get("/api/sessions", headers={"Authorization": value}).status_code == 401


def test_requests_do_not_look_up_opentelemetry_providers(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FastAPI's native telemetry asked for the global providers on every request; agmem turns it
    # off (no OpenTelemetry SDK ships with it, so there is nothing to find).
    from opentelemetry import trace

    lookups: list[int] = []
    real = trace.get_tracer_provider

    def counted() -> Any:
        lookups.append(1)
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    assert client.get("/api/no-such-route").status_code == 404
    assert lookups == []


# A web page of evil.example, by DNS rebinding (its name resolved again to 127.0.0.1, so the
# browser treats the service as the page's own origin: Host names evil.example) or as another
# site (Origin names it: a text/plain POST needs no preflight).
WEB_PAGES = {
    "rebound": ({"Host": "evil.example:37777"}, 421, "MisdirectedRequest"),
    "cross-site": ({"Origin": "https://evil.example"}, 403, "ForbiddenOrigin"),
}


@pytest.mark.parametrize("page", list(WEB_PAGES))
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/memories"),
        ("GET", "/api/context/home/dev/shop"),
        ("PUT", "/api/memories/project.note"),
        ("POST", "/api/observe"),  # the capture hot path, answered past the framework
        ("POST", "/v1beta/models/gemini-2.5-flash:generateContent"),
        ("POST", "/v1beta/models/gemini-2.5-flash:countTokens"),
        ("POST", "/mcp"),
        ("GET", "/health"),
        ("OPTIONS", "/api/observe"),  # a preflight
    ],
)
def test_a_web_page_is_refused_on_loopback(
    on_loopback: TestClient, db: psycopg.Connection[Any], method: str, path: str, page: str
) -> None:
    headers, status, error = WEB_PAGES[page]
    response = on_loopback.request(
        method, path, json={"value": "ignore previous instructions"}, headers=headers
    )

    assert response.status_code == status
    assert response.json()["error"] == error
    assert "evil.example" in response.json()["detail"]
    assert "access-control-allow-origin" not in response.headers
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


@pytest.mark.parametrize(
    ("headers", "refusal"),
    [
        ({"Host": "evil.example:37777"}, MisdirectedRequest),
        ({"Origin": "https://evil.example"}, ForbiddenOrigin),
        ({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"}, ForbiddenOrigin),
    ],
)
def test_a_web_page_s_refusal_is_a_class_of_the_error_hierarchy(
    on_loopback: TestClient, headers: dict[str, str], refusal: type[AppError]
) -> None:
    # The middlewares answer before any handler; their refusals are still classes of
    # app/errors.py, so the status and name on the wire cannot drift from the hierarchy's.
    answer = on_loopback.get("/api/memories", headers=headers)

    assert answer.status_code == refusal.status_code
    assert answer.json()["error"] == refusal.wire_name
    assert set(answer.json()) == {"error", "detail"}


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:37777",
        "localhost:37777",
        "LOCALHOST",
        "[::1]:37777",
        "127.0.0.2",
        "devbox.lan:37777",
    ],
)
def test_this_machine_by_name_or_address_passes(
    on_loopback: TestClient, db: psycopg.Connection[Any], host: str
) -> None:
    response = on_loopback.get("/api/memories", headers={"Host": host})

    assert response.status_code == 200


def test_any_host_passes_off_loopback(database_url: str, tmp_path: Any) -> None:
    # Bound to every interface (with its required token), clients use whatever name reaches it.
    settings = make_settings(home=tmp_path, host="0.0.0.0", api_token="s3cret", allowed_hosts=[])
    with TestClient(create_app(settings, database_url=database_url)) as client:
        response = client.get(
            "/api/no-such-route",
            headers={"Host": "memory.example:37777", "Authorization": "Bearer s3cret"},
        )

    assert response.status_code == 404  # past the Host rule, to routing
