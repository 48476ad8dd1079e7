"""Request and response shapes of key/value memories: camelCase on the wire, snake_case too."""

from __future__ import annotations

import unicodedata
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from app import exactjson
from app.api.bodies import CamelModel, StrictBody
from app.api.limits import KEY_MAX_BYTES, TAG_MAX_CHARS, StoredProjectPath, utf8_size
from app.api.numbers import BodyInt
from app.privacy import (
    DEFAULT_MAX_DEPTH,
    NestingTooDeep,
    clean_text,
    sanitize_json,
    sanitize_text,
)
from app.projects import canonical_project

Scope = Literal["global", "project", "session", "shared"]
SCOPES: tuple[Scope, ...] = ("global", "project", "session", "shared")

MAX_KEY_LENGTH = 500
TOO_DEEP = f"nested deeper than {DEFAULT_MAX_DEPTH} levels of arrays and objects"
# A value sent as JSON text nested past the parser: deeper than any write takes.
_PAST_THE_PARSER = object()
MAX_TAGS = 50
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
# The session id a memory is scoped to, in a body or a query (the column's width).
SESSION_ID_MAX_CHARS = 200


def check_key(key: str) -> str:
    """A key is non-empty, at most 500 characters and 800 bytes of UTF-8 (it is indexed beside
    a project path and a session id), and holds no `*` (the wildcard); it is read and stored
    NFC, as project paths are: `project.café` typed and sent by a macOS tool (NFD) were two
    memories that look the same."""
    key = unicodedata.normalize("NFC", clean_text(key).strip())
    if not key:
        raise ValueError("the key must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"the key is longer than {MAX_KEY_LENGTH} characters")
    if utf8_size(key) > KEY_MAX_BYTES:
        raise ValueError(
            f"the key is longer than {KEY_MAX_BYTES} bytes in UTF-8 ({utf8_size(key)}; "
            "the database indexes it)"
        )
    if "*" in key:
        raise ValueError("a key cannot contain '*', which is the wildcard of patterns")
    return key


# Control characters, and the line and paragraph separators U+2028 and U+2029.
_LINE_BREAKING = frozenset({"Cc", "Zl", "Zp"})
# Embeddings and overrides (LRE RLE PDF LRO RLO), isolates (LRI RLI FSI PDI).
_BIDI_CONTROLS = frozenset(
    [chr(code) for code in range(0x202A, 0x202F)] + [chr(code) for code in range(0x2066, 0x206A)]
)


def not_one_line(name: str) -> str | None:
    """Why `name` (a key, a tag) cannot be printed as the one line it is listed on, or None.

    A control character or U+2028/9 splits `agmem memory list`'s `key<TAB>scope<TAB>value`
    lines and the context block's facts; a bidi override or isolate shows it in another order
    than it is written (an RLO: `project.a\u202egnp.exe` listed as `project.aexe.png`)."""
    if any(unicodedata.category(char) in _LINE_BREAKING for char in name):
        return "holds a control character (a line break, a tab, an escape)"
    if any(char in _BIDI_CONTROLS for char in name):
        return (
            "holds a bidirectional control (U+202A-U+202E, U+2066-U+2069), which shows it in "
            "another order than it is written"
        )
    return None


def check_tags(tags: list[str] | None) -> list[str] | None:
    """Tags as stored (and as a filter matches them): sanitized as values are, a tag that was
    all `<private>` span dropped; an empty tag refused."""
    if tags is None:
        return None
    stored = _stored_tags(_sanitized_tags(tags))
    # `?tags=a,b` is "a and b" (`routes._tags`): a tag holding a comma could be stored, and no
    # HTTP listing could ask for it.
    for tag in stored:
        if "," in tag:
            raise ValueError(f"a tag cannot hold ',', where ?tags= splits a filter: {tag!r}")
        # Listed on one line with its memory, as a key is (`not_one_line`).
        if (why := not_one_line(tag)) is not None:
            raise ValueError(f"the tag {tag!r} {why}: a tag is a name of one line")
    return stored


def tag_filter(tags: list[str] | None) -> list[str] | None:
    """The tags a listing's memories must all carry, as stored (None: no filter).

    A filter tag sanitizing leaves nothing of (all `<private>` span) is carried by no memory:
    it becomes the empty tag, which none carries either (`check_tags` refuses it). Dropped, it
    took the filter with it and every memory was listed."""
    if not tags:
        return None
    sanitized = _sanitized_tags(tags)
    kept = _stored_tags(sanitized)
    return [*kept, ""] if "" in sanitized else kept


def _sanitized_tags(tags: list[str]) -> list[str]:
    """Each tag sanitized once, in order; "" for a tag that was all `<private>` span."""
    trimmed = [clean_text(tag).strip() for tag in tags]
    if "" in trimmed:
        raise ValueError("tags must not be empty strings")
    return [sanitize_text(tag).strip() for tag in trimmed]


def _stored_tags(sanitized: list[str]) -> list[str]:
    cleaned = [tag for tag in dict.fromkeys(sanitized) if tag]
    if len(cleaned) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    longest = max(cleaned, key=len, default="")
    if len(longest) > TAG_MAX_CHARS:
        # Each tag is an entry of the tags' GIN index, which Postgres bounds at ~2.7 KB.
        raise ValueError(f"a tag has at most {TAG_MAX_CHARS} characters, not {len(longest)}")
    return cleaned


def refuse_session_outside_its_scope(scope: str, session_id: str | None, name: str) -> None:
    """A ValueError for a write naming a session (`name`: the field as the client spells it)
    in a scope that has none. The default scope, project, dropped the session id without a
    word: a note meant for one session reached every agent of the project. Inferring scope
    `session` (as `agmem memory set --session` does) would silently change what a body the
    API documents as project-scoped by default means, so the conflict is named instead."""
    if scope != "session" and session_id and session_id.strip():
        raise ValueError(
            f"{name} names the session of a session memory: send scope 'session' with it, or "
            f"leave it out for a {scope} memory"
        )


class MemoryWrite(StrictBody):
    """The body of `PUT /api/memories/{key}`. Omitted tags/ttl keep their stored values."""

    # `expiresAt` is when the memory read expires; a write sets its expiry with `ttl`. Echoed
    # with the `ttl` it came with, it is ignored; alone, it asks for an expiry this body cannot set.
    EXPIRY_ECHO: ClassVar[tuple[str, str]] = ("expiresAt", "expires_at")

    @classmethod
    def echoed(cls) -> frozenset[str]:
        return READ_ONLY_FIELDS

    @model_validator(mode="before")
    @classmethod
    def _expiry_needs_ttl(cls, data: Any) -> Any:
        if isinstance(data, dict):
            expiry = next((name for name in cls.EXPIRY_ECHO if data.get(name) is not None), None)
            if expiry and data.get("ttl") is None:
                raise ValueError(
                    f"'{expiry}' is read-only (when the memory read expires); set the expiry "
                    "with 'ttl', in seconds from this write"
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def _parse_json_text(cls, data: Any) -> Any:
        # A read answers a value no parse reads back as it is with its JSON text and this flag;
        # sent back as read (tags changed, say), the flag ignored made it a jsonb string.
        if not isinstance(data, dict):
            return data
        flag = next((name for name in cls.JSON_TEXT_FLAG if name in data), None)
        if flag is None or data[flag] is not True or "value" not in data:
            return data
        try:
            parsed = exactjson.parse_written_text(data["value"])
        except exactjson.TextTooDeep:
            parsed = _PAST_THE_PARSER  # refused by `_sanitize_value`, as a value sent too deep
        return {**data, "value": parsed}

    JSON_TEXT_FLAG: ClassVar[tuple[str, str]] = ("valueIsJsonText", "value_is_json_text")

    value: Any
    # True: `value` is the value's exact JSON text, as a read answers one (`exactjson.JsonText`).
    value_is_json_text: StrictBool | None = None
    scope: Scope = "project"
    project_path: StoredProjectPath | None = None
    session_id: str | None = Field(default=None, max_length=SESSION_ID_MAX_CHARS)
    ttl: BodyInt | None = Field(default=None, ge=1, le=MAX_TTL_SECONDS)
    tags: list[str] | None = None
    created_by: str | None = Field(default=None, max_length=200)
    if_version: BodyInt | None = Field(default=None, ge=0)

    @field_validator("value")
    @classmethod
    def _sanitize_value(cls, value: Any) -> Any:
        # Memories are searched and injected into prompts: privacy rules apply as to captures.
        try:
            if value is _PAST_THE_PARSER:
                raise NestingTooDeep(TOO_DEEP)
            return exactjson.check_numbers(sanitize_json(value))
        except NestingTooDeep:
            raise ValueError(TOO_DEEP) from None

    @field_validator("project_path", "session_id")
    @classmethod
    def _clean_strings(cls, value: str | None) -> str | None:
        return clean_text(value).strip() or None if value is not None else None

    @model_validator(mode="after")
    def _session_needs_its_scope(self) -> MemoryWrite:
        refuse_session_outside_its_scope(self.scope, self.session_id, "sessionId")
        return self

    @field_validator("created_by")
    @classmethod
    def _sanitize_author(cls, value: str | None) -> str | None:
        # Free text returned on every read: the privacy rules apply as to values. Cut to the
        # column's 200 characters: redaction can lengthen a short secret ("-pab1").
        return sanitize_text(value)[:200].strip() or None if value is not None else None

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, value: list[str] | None) -> list[str] | None:
        return check_tags(value)


def _unset(flag: bool | None) -> bool:
    return flag is None


# On a memory or version whose stored value is given as its exact JSON text (see
# `exactjson.JsonText`: nested past Python's parser, or holding a number no double holds);
# absent from every other, which keep the shape they had.
_JSON_TEXT_FLAG = Field(default=None, exclude_if=_unset)


class _ValueAsRead(CamelModel):
    if TYPE_CHECKING:  # declared by each model, where it stands in the answer
        value: Any
        value_is_json_text: bool | None

    @model_validator(mode="before")
    @classmethod
    def _flag_json_text(cls, data: Any) -> Any:
        # `valueIsJsonText` by the one helper that makes such flags (capture's and MCP's too),
        # on a copy, so the caller's mapping is left as it was; only such a value pays for the
        # copy (every row of a listing paid ~0.16 µs for one, ~2% of the answer's CPU).
        if isinstance(data, dict) and isinstance(data.get("value"), exactjson.JsonText):
            return exactjson.flag_json_text(dict(data), "value")
        return data


class Memory(_ValueAsRead):
    id: uuid.UUID
    key: str
    value: Any
    value_is_json_text: bool | None = _JSON_TEXT_FLAG
    scope: Scope
    project_path: str | None
    session_id: str | None
    created_by: str | None
    updated_by: str | None
    tags: list[str]
    ttl: int | None
    expires_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime | None
    access_count: int


class MemoryList(CamelModel):
    memories: list[Memory]
    # More memories follow this page: ask again with `?cursor=<nextCursor>` (null: none left).
    has_more: bool = False
    next_cursor: str | None = None


class MemoryVersion(_ValueAsRead):
    version: int
    value: Any
    value_is_json_text: bool | None = _JSON_TEXT_FLAG
    written_by: str | None
    written_at: datetime


class MemoryWithHistory(Memory):
    """A memory with the values it held before, newest first (`?history=true`)."""

    history: list[MemoryVersion]


# What a memory read carries beyond the write's fields (id, version, times, `history`, ...): a
# client that GETs a memory and PUTs it back sends them, and they are ignored.
READ_ONLY_FIELDS = frozenset(
    spelling
    for name, field in MemoryWithHistory.model_fields.items()
    if name not in MemoryWrite.model_fields
    for spelling in (name, field.alias or name)
)


class Deleted(CamelModel):
    deleted: bool


class ResumeRequest(StrictBody):
    project_path: str | None = None
    session_id: str | None = None
    budget: BodyInt = Field(default=500, ge=50, le=20_000)

    @field_validator("project_path", "session_id")
    @classmethod
    def _clean_strings(cls, value: str | None) -> str | None:
        return clean_text(value).strip() or None if value is not None else None

    @field_validator("project_path")
    @classmethod
    def _canonical(cls, value: str | None) -> str | None:
        return canonical_project(value) if value is not None else None


class ResumeContext(CamelModel):
    project: list[Memory]
    current: list[Memory]
    shared: list[Memory]


class LastSession(CamelModel):
    id: str
    summary: str
    summarized_at: datetime | None


class Resume(CamelModel):
    briefing: str
    briefing_by: Literal["gemini", "template"]
    context: ResumeContext
    last_session: LastSession | None
    token_count: int
    budget: int
