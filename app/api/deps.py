"""Dependencies shared by the routers: one `Annotated` alias per thing a route needs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.limits import PATH_MAX_CHARS
from app.api.spellings import one_value
from app.config import Settings
from app.errors import ValidationFailed
from app.state import AppState


# Dependencies are `async def` even when they do not await: FastAPI runs a plain `def` dependency
# in a worker thread, a thread hand-off per request that showed up in the capture profile.
async def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.agmem
    return state


StateDep = Annotated[AppState, Depends(get_state)]


async def get_settings_dep(state: StateDep) -> Settings:
    return state.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def get_db(state: StateDep) -> AsyncIterator[AsyncSession]:
    """The request edge owns the transaction: commit when the route returns, roll back on error."""
    async with state.sessionmaker() as session, session.begin():
        yield session


# scope="function": FastAPI's default runs a yield dependency's exit *after* the response is sent,
# which would acknowledge a write before its COMMIT (lost on a crash, and a failed commit would
# follow a 2xx). Function scope commits first, then answers.
DbDep = Annotated[AsyncSession, Depends(get_db, scope="function")]


def query_spelling(request: Request, camel_name: str, snake_name: str) -> str | None:
    """The value of a query parameter sent in either spelling, each maybe more than once, by the
    bodies' rule (`app.api.spellings.one_value`): real values that differ are ValidationFailed.
    Every value is read: FastAPI keeps the last, so `?projectPath=/a&projectPath=/b` acted on
    `/b` though the client named `/a` first."""
    params = request.query_params
    try:
        value: str | None = one_value(
            camel_name, params.getlist(camel_name), snake_name, params.getlist(snake_name)
        )
    except ValueError as error:
        raise ValidationFailed(f"query: {error}") from None
    return value


async def project_path_query(
    request: Request,
    # Declared for the schema and the last value's length; `query_spelling` reads them all.
    camel: Annotated[str | None, Query(alias="projectPath", max_length=PATH_MAX_CHARS)] = None,
    snake: Annotated[
        str | None,
        Query(alias="project_path", max_length=PATH_MAX_CHARS, include_in_schema=False),
    ] = None,
) -> str | None:
    """`?projectPath=`, or its snake_case spelling, as every body and the memories' queries take
    both: `GET /api/sessions?project_path=` was ignored and listed every project's sessions."""
    value = query_spelling(request, "projectPath", "project_path")
    if value is not None and len(value) > PATH_MAX_CHARS:
        # Only the last value met `max_length`; the one kept may be an earlier one.
        raise ValidationFailed(f"query: 'projectPath' is longer than {PATH_MAX_CHARS} characters")
    return value


ProjectPathQuery = Annotated[str | None, Depends(project_path_query)]
