"""Request bodies of the capture API: camelCase as interceptors send it, snake_case accepted too."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from app.api.bodies import StrictBody, SurrogatesReplaced
from app.api.limits import PATH_MAX_CHARS, StoredProjectPath
from app.api.times import EpochMs

Id = Annotated[str, StringConstraints(min_length=1, max_length=200)]
FunctionName = Annotated[str, StringConstraints(min_length=1, max_length=300)]
# What observe and result may send to say whether a project is excluded: never stored.
ProjectPath = Annotated[str, StringConstraints(min_length=1, max_length=PATH_MAX_CHARS)]


class CaptureModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


# Session start and end are parsed by FastAPI; observe and result by `parse_body`, which replaces
# lone surrogates itself on the one path a body holding one takes (a check per field there cost
# ~0.4 µs a request on the hot path).
class SessionStartIn(SurrogatesReplaced, CaptureModel):
    project_path: StoredProjectPath = Field(min_length=1)
    user_prompt: str | None = None
    id: Id | None = None
    created_by: Annotated[str, StringConstraints(max_length=200)] | None = None
    metadata: dict[str, Any] | None = None


class SessionEndIn(SurrogatesReplaced, CaptureModel):
    session_id: Id


class ObserveIn(CaptureModel):
    session_id: Id
    function_name: FunctionName
    function_args: Any
    timestamp: EpochMs | None = None
    id: Id | None = None
    # Optional, beyond the contract: lets a client that knows its project skip excluded ones early.
    project_path: ProjectPath | None = None


class ObserveResultIn(CaptureModel):
    session_id: Id
    function_name: FunctionName
    result: Any
    observation_id: Id | None = None
    timestamp: EpochMs | None = None
    project_path: ProjectPath | None = None


# Not the interceptor stream: a request to re-queue work, whose unknown fields are refused.
class CompressIn(StrictBody):
    observation_id: Id


class SummarizeIn(StrictBody):
    session_id: Id
