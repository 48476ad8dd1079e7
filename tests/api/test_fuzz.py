"""Property-based fuzzing of every operation in the app's OpenAPI schema, on the real database.

Schemathesis generates requests (path, query, headers, bodies) that fit the schema and that break
it; whatever they are, the answer is never a 5xx, and every error has the contract's shape. The
run here is small and derandomized, so it is cheap and repeatable; `AGMEM_FUZZ_EXAMPLES=300`
runs it hard (see docs/architecture.md, "Robustness").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation.modes import GenerationMode

from app.main import create_app
from tests.conftest import make_settings
from tests.proxy.upstream import fake_upstream

# What httpx itself refuses to send (a URL over 64 KiB, a header that is not ASCII): no request.
CLIENT_REFUSALS = {"InvalidURL", "UnicodeEncodeError", "LocalProtocolError"}
EXAMPLES = int(os.environ.get("AGMEM_FUZZ_EXAMPLES", "3"))


@pytest.fixture
def fuzz_client(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> Iterator[TestClient]:
    """The real app; the Gemini proxy's upstream is a local fake, so proxy calls are fuzzed too."""
    with fake_upstream() as upstream:
        app_settings = make_settings(home=tmp_path / "home", gemini_upstream=upstream.url)
        app = create_app(app_settings, database_url=database_url)
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client


def send(client: TestClient, case: Any) -> Any:
    """Send a generated case through the app's own test client (httpx, in process)."""
    request = case.as_transport_kwargs(base_url="http://testserver")
    request.pop("cookies", None)
    if "data" in request:
        request["content"] = request.pop("data")
    return client.request(**request)


def off_contract(response: Any) -> str | None:
    """Why an answer breaks "never a 500, every error in one shape", or None when it keeps it."""
    if response.status_code >= 500:
        return f"status {response.status_code}"
    if response.status_code < 400:
        return None
    if not response.headers.get("content-type", "").startswith("application/json"):
        return f"error answered as {response.headers.get('content-type')!r}"
    body = response.json()
    if not (isinstance(body, dict) and set(body) == {"error", "detail"}):
        return f"error body {body!r} is not {{error, detail}}"
    if not all(isinstance(body[key], str) and body[key] for key in ("error", "detail")):
        return "error or detail is not a non-empty string"
    return None


def can_be_invalid(definition: dict[str, Any]) -> bool:
    """Whether anything of an operation can be invalid: a body, or a parameter that is not any text.

    Hypothesis would search (seconds) before giving up on the others, `GET /health` for one.
    """
    if "requestBody" in definition:
        return True
    for parameter in definition.get("parameters", []):
        schema = parameter.get("schema", {})
        if schema.get("type") != "string" or set(schema) - {"type", "title", "description"}:
            return True
    return False


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_5xx_or_off_shape(
    fuzz_client: TestClient, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_dict(fuzz_client.app.openapi())  # type: ignore[attr-defined]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    failures: list[str] = []

    def fuzz(operation: Any) -> None:
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def one(data: st.DataObject) -> None:
            case = data.draw(operation.as_strategy(generation_mode=mode))
            try:
                response = send(fuzz_client, case)
            except Exception as error:
                if type(error).__name__ in CLIENT_REFUSALS:
                    return
                raise
            problem = off_contract(response)
            if problem is not None:
                failures.append(
                    f"{operation.label}: {problem}; path={case.path_parameters!r:.200} "
                    f"query={case.query!r:.200} body={case.body!r:.200} -> {response.text[:200]}"
                )

        one()

    for operation in operations:
        if mode == GenerationMode.NEGATIVE and not can_be_invalid(operation.definition.raw):
            continue
        fuzz(operation)
    assert not failures, "\n".join(failures[:20])
