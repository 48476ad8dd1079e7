"""Dependencies shared by the routers: one `Annotated` alias per thing a route needs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.errors import ValidationFailed
from app.privacy import clean_text
from app.projects import canonical_project
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


def refuse_two_spellings(
    camel_name: str,
    camel: str | None,
    snake_name: str,
    snake: str | None,
    *,
    fold: Callable[[str], str] = str,
) -> None:
    """A query parameter sent in both spellings must carry one value (the same once cleaned and
    `fold`ed: `/a/` is `/a`), else ValidationFailed. The camelCase one was used and the other
    dropped without a word: `DELETE /api/memories/k?projectPath=/a&project_path=/b` deleted
    `/a`'s memory (app.api.bodies.refuse_two_spellings says the same of a body)."""
    if camel is None or snake is None:
        return
    first, second = (fold(clean_text(value).strip()) for value in (camel, snake))
    if first and second and first != second:
        raise ValidationFailed(
            f"query: '{camel_name}' and '{snake_name}' name one field and were sent with "
            "different values; send one of them"
        )


async def project_path_query(
    camel: Annotated[str | None, Query(alias="projectPath", max_length=4096)] = None,
    snake: Annotated[
        str | None, Query(alias="project_path", max_length=4096, include_in_schema=False)
    ] = None,
) -> str | None:
    """`?projectPath=`, or its snake_case spelling, as every body and the memories' queries take
    both: `GET /api/sessions?project_path=` was ignored and listed every project's sessions."""
    refuse_two_spellings("projectPath", camel, "project_path", snake, fold=canonical_project)
    if camel is not None and clean_text(camel).strip():  # NUL-only is blank once cleaned
        return camel
    return snake if snake is not None else camel


ProjectPathQuery = Annotated[str | None, Depends(project_path_query)]
