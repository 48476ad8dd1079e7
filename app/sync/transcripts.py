"""Agent session files into `User: …` / `Assistant: …` text, each entry tied to its file line.

Shapes read: Claude Code (`type` user|assistant with `message.content` as a string or blocks,
plus summary lines), OpenClaw (`type: message`), plain chat (`{role, content}`), Gemini CLI JSONL
(metadata line, `user`/`gemini` records with `toolCalls`, `{"$set": …}` updates) and Gemini's
legacy single-object JSON (`{sessionId, messages: [...]}`). What is not conversation (progress,
snapshots, bad JSON, images, base64) is skipped with a count, never a crash.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app import exactjson
from app.privacy import NestingTooDeep, clean_text, redact_secrets, sanitize_json, sanitize_text

ROLE_LABELS = {
    "user": "User",
    "human": "User",
    "assistant": "Assistant",
    "model": "Assistant",
    "gemini": "Assistant",
    "tool": "Tool",
    "function": "Tool",
    "toolResult": "Tool",  # OpenClaw
}
# Records that carry no conversation: counted and passed over quietly.
IGNORED_TYPES = frozenset(
    {
        "progress",
        "file-history-snapshot",
        "queue-operation",
        "system",
        "info",
        "error",
        "warning",
        "session",
        "model_change",
        "thinking_level_change",
        "custom",
    }
)
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=]{16,}")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{400,}={0,2}")
# A cut text is sanitized before the cut, this far past it, so that a secret across the cut is
# redacted whole: cut first, its fragment was no longer one the rules know. Covers any real
# single-line secret (a JWT, a key).
_CUT_MARGIN = 8192


@dataclass(frozen=True, slots=True)
class Entry:
    line: int  # 1-based line in the session file where this entry's record starts
    text: str  # "User: …", "Assistant: …", "Summary: …"
    at: datetime | None = None  # the record's `timestamp`, when it has a readable one


@dataclass(slots=True)
class Transcript:
    entries: list[Entry] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def parse_transcript(data: str, *, tool_output_chars: int = 2000) -> Transcript:
    """Parse a session file's text (JSONL, or one legacy JSON object) into entries."""
    parser = _Parser(tool_output_chars)
    stripped = data.lstrip()
    if stripped.startswith("{") and _is_legacy_session(stripped):
        parser.legacy(data)
    else:
        parser.jsonl(data)
    return parser.out


def transcript_text(data: bytes) -> tuple[str, int]:
    """The text of a transcript that is not all UTF-8, each line that is not made blank (so that
    every other line keeps its number), and how many were."""
    lines: list[str] = []
    bad = 0
    for line in data.split(b"\n"):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append("")
            bad += 1
    return "\n".join(lines).removeprefix("\ufeff"), bad


def _is_legacy_session(stripped: str) -> bool:
    try:
        value, end = exactjson.raw_decode(stripped)
    except ValueError:
        return False
    return (
        isinstance(value, dict)
        and isinstance(value.get("messages"), list)
        and not stripped[end:].strip()
    )


class _Parser:
    def __init__(self, tool_output_chars: int) -> None:
        self.out = Transcript()
        self.limit = tool_output_chars
        self.at: datetime | None = None  # the time of the record being read

    def jsonl(self, data: str) -> None:
        for number, line in enumerate(data.split("\n"), start=1):
            if not line.strip():
                continue
            for record in self._objects(line):
                self.record(record, number)

    def _objects(self, line: str) -> list[Any]:
        """Every JSON value on the line: writers sometimes run two objects together."""
        values: list[Any] = []
        position, end = 0, len(line)
        while position < end:
            while position < end and line[position] in " \t\r":
                position += 1
            if position >= end:
                break
            try:
                # Numbers exactly (app/exactjson.py): `json` refused a line holding an integer
                # of more than 4,300 digits as invalid (a whole legacy file so), and wrote
                # `1e400` as `Infinity`, `1.50` as `1.5` in the indexed text.
                value, position = exactjson.raw_decode(line, position)
            except ValueError:
                self.out.skipped["invalid JSON"] += 1
                break
            values.append(value)
        return values

    def legacy(self, data: str) -> None:
        session: dict[str, Any] = exactjson.loads(data)
        messages: list[Any] = session["messages"]
        line_starts = _line_starts(data)
        # The pretty-printed file holds each message's id once, in order: where it starts.
        starts: list[int] = []
        cursor = 0
        for message in messages:
            ident = message.get("id") if isinstance(message, dict) else None
            if isinstance(ident, str):
                found = _find_json(data, ident, cursor)
                if found != -1:
                    cursor = found
            starts.append(cursor)
        starts.append(len(data))
        for index, message in enumerate(messages):
            # The message's text is one line of the file (JSON escapes its newlines), a few lines
            # below the id: that line is what a citation must show, or a chunk ending with this
            # message would end its range before the message's words.
            at = starts[index]
            text = _first_text(message.get("content")) if isinstance(message, dict) else None
            if text:
                found = _find_json(data, text[:40], at, prefix=True)
                if found != -1 and found < starts[index + 1]:
                    at = found
            self.record(message, _line_of(line_starts, at))

    def record(self, record: Any, line: int) -> None:
        if not isinstance(record, dict):
            self.out.skipped["not an object"] += 1
            return
        self.at = record_time(record.get("timestamp"))
        kind = record.get("type")
        if "$set" in record or ("sessionId" in record and kind is None and "role" not in record):
            self.out.skipped["metadata"] += 1
            return
        if kind in ("summary", "compaction") and isinstance(record.get("summary"), str):
            self.add(line, "Summary", record["summary"])
            return
        if kind in IGNORED_TYPES:
            self.out.skipped[str(kind)] += 1
            return
        if record.get("isMeta"):
            self.out.skipped["meta"] += 1
            return
        message = record.get("message")
        if isinstance(message, dict) and ("role" in message or "content" in message):
            role = message.get("role") or kind
            label = ROLE_LABELS.get(str(role))
            if label is None:
                self.out.skipped[f"role {role}"] += 1
                return
            if record.get("isSidechain"):
                label += " (sidechain)"
            text = self.content(message.get("content"))
            if label == "Tool":  # a tool's whole output as a message (OpenClaw, plain chat)
                name = message.get("toolName")
                text = (f"[{name}] " if isinstance(name, str) else "") + self.trim(text)
            self.add(line, label, text)
            return
        if kind in ("user", "gemini", "model") or "role" in record:
            role = record.get("role") or kind
            label = ROLE_LABELS.get(str(role))
            if label is None:
                self.out.skipped[f"role {role}"] += 1
                return
            parts = [self.content(record.get("content"))]
            parts.extend(self.gemini_tool_call(call) for call in record.get("toolCalls") or [])
            self.add(line, label, "\n".join(p for p in parts if p))
            return
        self.out.skipped[f"type {kind}"] += 1

    def add(self, line: int, label: str, text: str) -> None:
        text = sanitize_text(text).strip()
        if text:
            self.out.entries.append(Entry(line, f"{label}: {text}", self.at))
        else:
            self.out.skipped["empty"] += 1

    def content(self, content: Any) -> str:
        if isinstance(content, str):
            return self.scrub(content)
        if isinstance(content, dict):
            return self.block(content)
        if isinstance(content, list):
            return "\n".join(filter(None, (self.block(b) for b in content)))
        return ""

    def block(self, block: Any) -> str:
        if isinstance(block, str):
            return self.scrub(block)
        if not isinstance(block, dict):
            return ""
        kind = block.get("type")
        if kind in ("image", "image_url", "input_image", "document") or "inlineData" in block:
            self.out.skipped["image"] += 1
            return ""
        if kind in ("thinking", "redacted_thinking") or block.get("thought") is True:
            self.out.skipped["thinking"] += 1
            return ""
        if kind in ("tool_use", "toolCall") or "functionCall" in block:
            call = block.get("functionCall") or block
            args = call.get("input", call.get("args", call.get("arguments")))
            return f"[tool {call.get('name', '?')}] {self.trim(_compact_json(args))}"
        if kind == "tool_result" or "functionResponse" in block:
            response = block.get("functionResponse")
            inner = response.get("response") if isinstance(response, dict) else block.get("content")
            text = self.content(inner) if not isinstance(inner, dict) else _compact_json(inner)
            return f"[tool result] {self.trim(text)}" if text else ""
        if isinstance(block.get("text"), str):
            return self.scrub(block["text"])
        self.out.skipped[f"block {kind}"] += 1
        return ""

    def gemini_tool_call(self, call: Any) -> str:
        if not isinstance(call, dict):
            return ""
        head = f"[tool {call.get('name', '?')}] {self.trim(_compact_json(call.get('args')))}"
        outputs = []
        for result in call.get("result") or []:
            response = result.get("functionResponse") if isinstance(result, dict) else None
            if isinstance(response, dict):
                body = response.get("response")
                output = body.get("output") if isinstance(body, dict) else body
                outputs.append(output if isinstance(output, str) else _compact_json(output))
        if outputs:
            head += f"\n[tool result] {self.trim(self.scrub(chr(10).join(outputs)))}"
        return head

    def scrub(self, text: str) -> str:
        # Secrets redacted first: a base64 run ending at a key's prefix took the prefix with it.
        # Private spans are left to `add`, on the whole entry: a span may cross content blocks,
        # and stripped block by block, the next block's text up to `</private>` was kept.
        text = redact_secrets(clean_text(text))
        if "base64" in text or len(text) > 400:
            text, uris = _DATA_URI.subn("[base64 omitted]", text)
            text, runs = _BASE64_RUN.subn("[base64 omitted]", text)
            if uris or runs:
                self.out.skipped["base64"] += uris + runs
        return text

    def trim(self, text: str) -> str:
        if len(text) <= self.limit:
            return self.scrub(text)
        # Cut first: scrubbing a megabyte of tool output only to drop most of it is waste; but
        # sanitized before the cut, with a margin (_CUT_MARGIN).
        self.out.skipped["trimmed tool output"] += 1
        head = redact_secrets(clean_text(text[: self.limit + _CUT_MARGIN]))[: self.limit]
        return self.scrub(head) + f" … [{len(text) - self.limit} chars trimmed]"


# A message's time outside these bounds is a writer's bug, not when it was said: the chunk
# takes its file's time instead (the API's rule for a timestamp: not before 1970, at most a
# day ahead).
_LATEST_AHEAD_SECONDS = 86_400
_MILLISECONDS_FROM = 2e10  # as pydantic reads an epoch number: past it, milliseconds


def record_time(value: Any) -> datetime | None:
    """A record's `timestamp` (Claude Code's and Gemini CLI's ISO 8601 text, or epoch seconds or
    milliseconds), in UTC; None when it has none or it cannot be a message's time."""
    try:
        if isinstance(value, str):
            at = datetime.fromisoformat(value.strip())
            at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            seconds = value / 1000 if abs(value) > _MILLISECONDS_FROM else value
            at = datetime.fromtimestamp(seconds, UTC)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    if at.timestamp() < 0 or at.timestamp() > datetime.now(UTC).timestamp() + _LATEST_AHEAD_SECONDS:
        return None
    return at


def _compact_json(value: Any) -> str:
    """`_compact` of a value sanitized as JSON first, as capture sanitizes tool arguments: a
    credential-named key's value is redacted whatever its shape (the text rules, which every
    entry still goes through, know only quoted values without spaces)."""
    try:
        value = sanitize_json(value, refuse_unstorable=False)
    except NestingTooDeep:
        pass  # the text rules still run on the entry
    return _compact(value)


def _compact(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return exactjson.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _find_json(data: str, value: str, start: int, *, prefix: bool = False) -> int:
    """Where a string appears JSON-encoded (as written with or without `ensure_ascii`)."""
    for ascii_only in (False, True):
        encoded = json.dumps(value, ensure_ascii=ascii_only)
        found = data.find(encoded[:-1] if prefix else encoded, start)
        if found != -1:
            return found
    return -1


def _first_text(content: Any) -> str | None:
    """A message's first text: its `content` string, or the first part's `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return str(part["text"])
    return None


def _line_starts(data: str) -> list[int]:
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", data))
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    from bisect import bisect_right

    return bisect_right(starts, offset)
