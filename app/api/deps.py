"""Dependencies shared by the routers: one `Annotated` alias per thing a route needs."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints, TypeAdapter, ValidationError
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


def two_spellings_query(
    camel_name: str,
    snake_name: str,
    *,
    min_length: int | None = None,
    max_length: int | None = None,
    bounds_in_schema: bool = True,
) -> Any:
    """The dependency of a text query parameter taken in both spellings (`?projectPath=`,
    `?project_path=`): its one value (`query_spelling`), every value within the bounds.

    FastAPI checks only the last value of each spelling against a declared bound, so each value
    is checked by the same constraints, and refused in the same words (`query.<spelling>:
    String should have at most N characters`), wherever it comes. The camelCase spelling is in
    the schema; the snake_case one is taken but not shown. `bounds_in_schema=False` checks the
    bounds without showing them (a schema clients already generate from stays as it was)."""
    each_value: TypeAdapter[str] = TypeAdapter(
        Annotated[str, StringConstraints(min_length=min_length, max_length=max_length)]
    )

    async def dependency(
        request: Request, camel: str | None = None, snake: str | None = None
    ) -> str | None:
        params = request.query_params
        for name in (camel_name, snake_name):
            for value in params.getlist(name):
                try:
                    each_value.validate_python(value)
                except ValidationError as error:
                    problems = [{**problem, "loc": ("query", name)} for problem in error.errors()]
                    raise RequestValidationError(problems) from None
        return query_spelling(request, camel_name, snake_name)

    def declared(name: str, alias: str, *, shown: bool) -> inspect.Parameter:
        # Declared for the schema only: the dependency reads and checks every value itself.
        shown_min, shown_max = (min_length, max_length) if bounds_in_schema else (None, None)
        query = Query(
            alias=alias, min_length=shown_min, max_length=shown_max, include_in_schema=shown
        )
        return inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[str | None, query],
        )

    # FastAPI reads a dependency's parameters from its signature; with this module's postponed
    # annotations it would evaluate `Query(alias=camel_name, ...)` as a string in the module's
    # globals, where the factory's arguments are not: the signature is built with them here.
    dependency.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
            ),
            declared("camel", camel_name, shown=True),
            declared("snake", snake_name, shown=False),
        ]
    )
    return Depends(dependency)


# `?projectPath=`, or its snake_case spelling, as every body and the memories' queries take
# both: `GET /api/sessions?project_path=` was ignored and listed every project's sessions.
ProjectPathQuery = Annotated[
    str | None, two_spellings_query("projectPath", "project_path", max_length=PATH_MAX_CHARS)
]
