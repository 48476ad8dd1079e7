"""Request and response bodies of `POST /api/sync` and `GET /api/sync/{runId}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from app.api.bodies import StrictBody
from app.api.limits import PATH_MAX_CHARS, SpelledProjectPath


def _no_nul(folder: str) -> str:
    if "\x00" in folder:
        raise ValueError("a folder name holds no NUL character")
    return folder


ForgetDir = Annotated[
    str, StringConstraints(min_length=1, max_length=PATH_MAX_CHARS), AfterValidator(_no_nul)
]


class SyncIn(StrictBody):
    project_path: SpelledProjectPath = Field(min_length=1)
    memory_dir: str | None = Field(default=None, max_length=PATH_MAX_CHARS)
    sessions_dir: str | None = Field(default=None, max_length=PATH_MAX_CHARS)
    # Roots whose indexed files the run drops (a run deletes only its own roots' otherwise).
    # Not looked up on disk (a forgotten folder may be gone) but stored with the run: a NUL,
    # which Postgres refuses in text, is refused here.
    forget_dirs: list[ForgetDir] = Field(default_factory=list, max_length=100)
    # Strict: pydantic's lax mode took "yes", "on", "1" and 1 for true (and "no", 0 for false),
    # where every other wrong type is a 422.
    force: StrictBool = False
    reembed: StrictBool = False


class SyncQueued(BaseModel):
    run_id: str = Field(serialization_alias="runId")


class SyncRunOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    run_id: str = Field(serialization_alias="runId")
    project_path: str = Field(serialization_alias="projectPath")
    status: Literal["queued", "running", "done", "failed"]
    files_scanned: int = Field(0, serialization_alias="filesScanned")
    files_changed: int = Field(0, serialization_alias="filesChanged")
    files_deleted: int = Field(0, serialization_alias="filesDeleted")
    chunks_written: int = Field(0, serialization_alias="chunksWritten")
    embeddings_computed: int = Field(0, serialization_alias="embeddingsComputed")
    embeddings_cached: int = Field(0, serialization_alias="embeddingsCached")
    transcript_items_skipped: dict[str, int] = Field(
        default_factory=dict, serialization_alias="transcriptItemsSkipped"
    )
    skipped: int = 0
    skipped_files: list[dict[str, Any]] = Field(
        default_factory=list, serialization_alias="skippedFiles"
    )
    errors: list[Any] = Field(default_factory=list)
    # Added beside `errors`, which held them before: a client reading `errors` alone still works.
    warnings: list[str] = Field(default_factory=list)
    created_at: str = Field(serialization_alias="createdAt")
    started_at: str | None = Field(None, serialization_alias="startedAt")
    finished_at: str | None = Field(None, serialization_alias="finishedAt")
