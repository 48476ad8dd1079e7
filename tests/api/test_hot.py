"""observe and observe/result answered past the framework's layers (app/api/hot.py): the same
answers as through the full stack, the same token rule, body limit and error shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.capture import service
from app.main import create_app
from tests.conftest import make_settings

JSON = {"content-type": "application/json"}
SESSION = {"projectPath": "/p", "id": "hot-session"}


def _client(database_url: str, home: Any, *, hot: bool, **settings: Any) -> TestClient:
    app = create_app(make_settings(home=home, **settings), database_url=database_url)
    if not hot:
        app.hot_routes = {}  # every request takes the full stack
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def both(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> Iterator[tuple[TestClient, TestClient]]:
    with (
        _client(database_url, tmp_path / "a", hot=True) as hot,
        _client(database_url, tmp_path / "b", hot=False) as full,
    ):
        assert hot.post("/api/session/start", json=SESSION).status_code == 201
        yield hot, full


def _call(**fields: Any) -> bytes:
    return json.dumps({"sessionId": "hot-session", "functionName": "bash"} | fields).encode()


OBSERVE, RESULT = "/api/observe", "/api/observe/result"
TEXT = {"content-type": "text/plain"}

# (path, body, headers): every kind of answer the two routes give.
CASES: list[tuple[str, bytes, dict[str, str]]] = [
    (OBSERVE, _call(functionArgs={}, id="o-a"), JSON),  # 201, then 200
    (OBSERVE, _call(functionArgs={}, id="o-b"), {}),  # no content type: JSON
    (OBSERVE, _call(functionArgs=1, id="o-c"), TEXT),  # 422: not declared JSON
    (OBSERVE, _call(sessionId="nobody", functionArgs={}), JSON),  # 404
    (OBSERVE, _call(), JSON),  # 422: functionArgs missing
    (OBSERVE, _call(functionArgs={}, timestamp=-1), JSON),  # 422: timestamp
    (OBSERVE, _call(sessionId="excluded-x", functionArgs={}), JSON),  # 200: excluded
    (OBSERVE, b'{"sessionId": "hot-session", "functionName": ', JSON),  # 400
    (OBSERVE, b'{"sessionId":"\\ud800","functionName":"b","functionArgs":{}}', JSON),  # 404
    (RESULT, _call(result="x", observationId="o-a"), JSON),  # 200 matched, then repeated
    (RESULT, _call(result="y", observationId="o-a"), JSON),  # 409: another result
    (RESULT, _call(sessionId="nobody", result="x"), JSON),  # 404
    (RESULT, b"[]", JSON),  # 422
]


@pytest.mark.parametrize(("path", "body", "headers"), CASES)
def test_the_short_path_answers_as_the_full_stack(
    both: tuple[TestClient, TestClient], path: str, body: bytes, headers: dict[str, str]
) -> None:
    hot, full = both
    first = hot.post(path, content=body, headers=headers)
    # The same request again through the full stack sees what the first one stored, so it is
    # compared with a repeat through the short path, which sees the same.
    again = hot.post(path, content=body, headers=headers)
    other = full.post(path, content=body, headers=headers)
    assert (other.status_code, other.json()) == (again.status_code, again.json())
    assert first.status_code < 500


def test_the_token_rule_applies(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    with _client(database_url, tmp_path, hot=True, api_token="s3cret") as client:
        body = {"sessionId": "s", "functionName": "bash", "functionArgs": {}}
        refused = client.post("/api/observe", json=body)
        assert refused.status_code == 401
        assert refused.json()["error"] == "Unauthorized"
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/api/observe", json=body, headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
        passed = client.post("/api/observe", json=body, headers={"Authorization": "Bearer s3cret"})
        assert passed.status_code == 404  # past the rule: the session is unknown
        assert passed.json()["error"] == "SessionNotFound"


def test_the_body_limit_applies(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    with _client(database_url, tmp_path, hot=True, max_body_bytes=2048) as client:
        big = b'{"sessionId":"s","functionName":"bash","functionArgs":"' + b"x" * 4000 + b'"}'
        declared = client.post("/api/observe", content=big, headers=JSON)
        assert (declared.status_code, declared.json()["error"]) == (413, "PayloadTooLarge")

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams
            for start in range(0, len(big), 512):
                yield big[start : start + 512]

        streamed = client.post("/api/observe/result", content=chunks(), headers=JSON)
        assert (streamed.status_code, streamed.json()["error"]) == (413, "PayloadTooLarge")


def test_a_bug_is_a_500_in_shape(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(service, "record_observation", broken)
    with _client(database_url, tmp_path, hot=True) as client:
        body = {"sessionId": "s", "functionName": "bash", "functionArgs": {}}
        response = client.post("/api/observe", json=body)
    assert response.status_code == 500
    assert response.json() == {
        "error": "InternalError",
        "detail": "an unexpected error occurred; it has been logged",
    }


def test_a_bug_answered_to_an_allowed_origin_carries_its_cors_headers(
    database_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The capture routes' own stack sent its 500 inside the origin rule, without them: the
    # interceptor's fetch saw an opaque network failure instead of the error's shape.
    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(service, "record_observation", broken)
    origin = "chrome-extension://abcdefghijklmnop"
    with _client(database_url, tmp_path, hot=True) as client:
        body = {"sessionId": "s", "functionName": "bash", "functionArgs": {}}
        response = client.post("/api/observe", json=body, headers={"Origin": origin})
    assert response.status_code == 500
    assert response.json()["error"] == "InternalError"
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["vary"] == "Origin"


def test_other_methods_take_the_full_stack(both: tuple[TestClient, TestClient]) -> None:
    hot, _ = both
    response = hot.get("/api/observe")
    assert (response.status_code, response.json()["error"]) == (405, "MethodNotAllowed")
