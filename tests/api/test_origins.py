"""The browser-origin rule: a web page of another site gets nothing, an extension gets CORS."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.origins import OriginPolicy
from app.main import create_app
from tests.conftest import make_settings


@pytest.mark.parametrize(
    "origin",
    [
        "null",  # a sandboxed iframe or a data: URL, which any page can open
        "https://127.0.0.1.evil.example",
        "http://localhost.evil.example:37777",
        "https://app.example.evil",
        "chrome-extension-evil://abc",
    ],
)
def test_look_alike_origins_are_refused(on_loopback: TestClient, origin: str) -> None:
    response = on_loopback.get("/api/memories", headers={"Origin": origin})

    assert response.status_code == 403


@pytest.mark.parametrize(
    "origin",
    [
        "chrome-extension://abcdefghijklmnopabcdefghijklmnop",  # the interceptor's background
        "moz-extension://0b6f1b8e-9a3a-4c1e-8f3e-1d2a3b4c5d6e",
        "http://localhost:5173",  # a page this machine serves
        "http://127.0.0.1:37777",  # the service's own /docs
        "http://[::1]:8080",
        "https://app.example",  # AGMEM_ALLOWED_ORIGINS
    ],
)
def test_extensions_and_this_machine_s_pages_get_cors(on_loopback: TestClient, origin: str) -> None:
    response = on_loopback.get("/api/memories", headers={"Origin": origin})

    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == origin
    assert "Origin" in response.headers["vary"]


def test_the_hot_path_answers_an_extension_with_cors(on_loopback: TestClient) -> None:
    origin = "chrome-extension://abcdefghijklmnopabcdefghijklmnop"
    response = on_loopback.post("/api/observe", json={}, headers={"Origin": origin})

    assert response.status_code == 422  # past the rule, to the route
    assert response.headers["access-control-allow-origin"] == origin


def test_a_preflight_from_an_allowed_origin_is_answered(on_loopback: TestClient) -> None:
    # A content script's or page's JSON POST is preflighted; Chrome adds the Private Network
    # Access question for a public page calling 127.0.0.1. Both were a 405 (no OPTIONS route).
    response = on_loopback.options(
        "/api/observe",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,authorization,x-agmem-project",
            "Access-Control-Request-Private-Network": "true",
        },
    )

    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed = response.headers["access-control-allow-headers"]
    assert allowed == "content-type,authorization,x-agmem-project"
    assert response.headers["access-control-allow-private-network"] == "true"


def test_a_preflight_needs_no_token(database_url: str, tmp_path: Any) -> None:
    # A browser never sends credentials with a preflight: a 401 there failed every call.
    settings = make_settings(home=tmp_path, api_token="s3cret")
    with TestClient(create_app(settings, database_url=database_url)) as client:
        origin = "chrome-extension://abcdefghijklmnopabcdefghijklmnop"
        preflight = client.options(
            "/api/memories", headers={"Origin": origin, "Access-Control-Request-Method": "GET"}
        )
        without = client.get("/api/memories", headers={"Origin": origin})

    assert preflight.status_code == 204
    assert without.status_code == 401


def test_requests_without_an_origin_are_not_concerned(on_loopback: TestClient) -> None:
    # curl, the CLI, SDKs and IDE hooks send no Origin.
    response = on_loopback.get("/api/memories")

    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_allowed_origins_setting_reads_a_comma_list(tmp_path: Any) -> None:
    settings = make_settings(home=tmp_path, allowed_origins=" https://A.example/ ,, null")

    assert settings.allowed_origins == ["https://a.example", "null"]


def test_a_preflight_allows_every_method_the_proxy_forwards(on_loopback: TestClient) -> None:
    # google-genai's caches.update is a PATCH, which the proxy's passthrough forwards.
    response = on_loopback.options(
        "/v1beta/cachedContents/abc",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "PATCH"},
    )

    assert response.status_code == 204
    assert "PATCH" in response.headers["access-control-allow-methods"].split(", ")
    # RFC 9110 8.6: a 204 carries no Content-Length.
    assert "content-length" not in response.headers


def test_only_a_star_is_a_wildcard_in_allowed_origins() -> None:
    # fnmatch read `[fd00::5]` as a character class and `?` as any character.
    policy = OriginPolicy(
        ["http://[fd00::5]:3000", "https://a?b.example", "https://*.corp.example"]
    )
    host = b"127.0.0.1:37777"

    assert policy.allows(b"http://[fd00::5]:3000", host)
    assert not policy.allows(b"http://f:3000", host)
    assert policy.allows(b"https://a?b.example", host)
    assert not policy.allows(b"https://axb.example", host)
    assert policy.allows(b"https://wiki.corp.example", host)


@pytest.mark.parametrize("destination", ["image", "script", "iframe", "empty"])
def test_another_site_s_page_cannot_read_a_memory_without_an_origin(
    on_loopback: TestClient, destination: str
) -> None:
    # An <img> or <script> GET carries no Origin, but the browser says where it comes from; such
    # a GET of a memory counted as a read (accessCount, accessedAt), and its answer's status told
    # the page whether the key exists.
    key = f"current.task.{destination}"
    on_loopback.put(f"/api/memories/{key}", json={"value": "ship it", "scope": "global"})
    cross_site = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": destination}

    response = on_loopback.get(f"/api/memories/{key}?scope=global", headers=cross_site)
    read = on_loopback.get(f"/api/memories/{key}?scope=global").json()

    assert response.status_code == 403
    assert response.json()["error"] == "ForbiddenOrigin"
    assert read["accessCount"] == 1


@pytest.mark.parametrize(
    "fetch",
    [{"Sec-Fetch-Site": "none"}, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "document"}],
)
def test_the_user_s_own_navigation_is_answered(
    on_loopback: TestClient, fetch: dict[str, str]
) -> None:
    # Typed in the address bar, or a link followed to the service's /docs: the user sees it.
    response = on_loopback.get("/api/memories", headers=fetch)

    assert response.status_code == 200
