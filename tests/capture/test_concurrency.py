"""Idempotency under concurrent retries: many identical requests at once make one row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.main import create_app
from tests.capture.builders import count, observation
from tests.conftest import make_settings

PARALLEL = 16


@asynccontextmanager
async def _client(database_url: str, home: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(home=home, db_pool_size=PARALLEL), database_url=database_url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


async def _burst(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    responses = await asyncio.gather(*(client.post(path, json=body) for _ in range(PARALLEL)))
    return [(response.status_code, response.json()) for response in responses]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_concurrent_retries_are_idempotent(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    async def scenario() -> dict[str, list[Any]]:
        async with _client(database_url, tmp_path) as client:
            start = await _burst(client, "/api/session/start", {"projectPath": "/p", "id": "s"})
            call = {"sessionId": "s", "functionName": "bash", "functionArgs": {"c": 1}, "id": "o"}
            observed = await _burst(client, "/api/observe", call)
            result_body = {
                "sessionId": "s",
                "functionName": "bash",
                "result": "ok",
                "observationId": "o",
            }
            results = await _burst(client, "/api/observe/result", result_body)
            late_body = {
                "sessionId": "s",
                "functionName": "bash",
                "result": "late",
                "observationId": "late",
            }
            late = await _burst(client, "/api/observe/result", late_body)
            return {"start": start, "observe": observed, "result": results, "late": late}

    answers = run(scenario())
    assert sorted(code for code, _ in answers["start"]) == [200] * (PARALLEL - 1) + [201]
    assert len({body["id"] for _, body in answers["start"]}) == 1
    assert sorted(code for code, _ in answers["observe"]) == [200] * (PARALLEL - 1) + [201]
    assert {body["id"] for _, body in answers["observe"]} == {"o"}
    assert {code for code, _ in answers["result"]} == {200}
    assert {body["status"] for _, body in answers["result"]} == {"captured"}
    assert sorted(code for code, _ in answers["late"]) == [200] * (PARALLEL - 1) + [201]
    assert count(db, "sessions") == 1
    assert count(db, "observations") == 2
    assert observation(db, "o")["result"] == "ok"


def test_concurrent_results_take_distinct_pending_calls(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    async def scenario() -> list[Any]:
        async with _client(database_url, tmp_path) as client:
            await client.post("/api/session/start", json={"projectPath": "/p", "id": "s"})
            for index in range(PARALLEL):
                await client.post(
                    "/api/observe",
                    json={"sessionId": "s", "functionName": "grep", "id": f"g{index}"},
                )
            responses = await asyncio.gather(
                *(
                    client.post(
                        "/api/observe/result",
                        json={"sessionId": "s", "functionName": "grep", "result": index},
                    )
                    for index in range(PARALLEL)
                )
            )
            return [(r.status_code, r.json()) for r in responses]

    answers = run(scenario())
    assert all(code in (200, 201) for code, _ in answers)
    # Every result is kept: each took its own pending call or, if all were taken, a new row.
    rows = db.execute("SELECT result FROM observations WHERE status = 'captured'").fetchall()
    assert sorted(row[0] for row in rows) == list(range(PARALLEL))


@pytest.mark.parametrize("different", ["functionArgs", "sessionId"])
def test_concurrent_conflicting_bodies_store_one(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, different: str
) -> None:
    async def scenario() -> list[int]:
        async with _client(database_url, tmp_path) as client:
            for session_id in ("s", "t"):
                await client.post(
                    "/api/session/start", json={"projectPath": "/p", "id": session_id}
                )
            bodies = []
            for index in range(PARALLEL):
                body: dict[str, Any] = {
                    "sessionId": "s",
                    "functionName": "f",
                    "functionArgs": {},
                    "id": "o",
                }
                body[different] = (
                    {"n": index % 2} if different == "functionArgs" else "st"[index % 2]
                )
                bodies.append(body)
            responses = await asyncio.gather(
                *(client.post("/api/observe", json=body) for body in bodies)
            )
            return [r.status_code for r in responses]

    codes = run(scenario())
    assert codes.count(201) == 1
    assert codes.count(409) == PARALLEL // 2
    assert count(db, "observations") == 1


def test_a_result_racing_its_calls_commit_is_applied_not_dropped(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The call's insert is still uncommitted in another transaction (another writer lane, the
    # proxy) when its result arrives: the result's match cannot see it, and its insert of the
    # same id waits for that transaction. Once the call commits, the result must be applied to
    # it, not answered as if it repeated a stored result.
    other = psycopg.connect(db.info.dsn, password=db.info.password)

    async def scenario() -> tuple[int, Any]:
        async with _client(database_url, tmp_path) as client:
            await client.post("/api/session/start", json={"projectPath": "/p", "id": "s"})
            other.execute(
                "INSERT INTO observations (id, session_id, project_path, function_name,"
                " function_args, observation_type, status)"
                " VALUES ('o', 's', '/p', 'bash', '{}', 'other', 'pending')"
            )
            body = {"sessionId": "s", "functionName": "bash", "observationId": "o", "result": "ok"}
            answer = asyncio.create_task(client.post("/api/observe/result", json=body))
            while not _waits_on_a_lock(db):  # the result's insert waits for the call's commit
                await asyncio.sleep(0.01)
            other.commit()
            response = await answer
            return response.status_code, response.json()

    try:
        status, body = run(scenario())
    finally:
        other.close()
    assert (status, body["status"]) == (200, "captured")
    stored = observation(db, "o")
    assert (stored["status"], stored["result"]) == ("captured", "ok")
    assert count(db, "observations") == 1


def _waits_on_a_lock(db: psycopg.Connection[Any]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = 'agmem-capture' AND wait_event_type = 'Lock'"
    ).fetchone()
    return row is not None and row[0] > 0
