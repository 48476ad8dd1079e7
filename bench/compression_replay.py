"""The real tool calls in /work/shared/testdata, as sessions to replay through the capture API.

Claude Code transcripts carry `tool_use` blocks (assistant) answered by `tool_result` blocks
(user); Gemini CLI JSONL sessions carry `toolCalls` with their `functionResponse`, whose
`response` is what the proxy records as the result (app/proxy/calls.py). The legacy Gemini JSON
has no tool calls. Each file is one session; its project is the transcript's `cwd` when it names
one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTDATA = Path("/work/shared/testdata")
MAX_PROMPT_CHARS = 300  # the context query's prompt: a user's question, not a pasted brief


@dataclass(slots=True)
class Call:
    id: str
    name: str
    args: Any
    result: Any = None


@dataclass(slots=True)
class Replay:
    name: str  # the transcript's file name
    project_path: str
    prompt: str | None
    transcript_chars: int
    calls: list[Call] = field(default_factory=list)


def _text_of(content: Any) -> str | None:
    """A user turn's typed text (not a tool result, not a command wrapper), if it has one."""
    if isinstance(content, str):
        parts: list[Any] = [content]
    elif isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
    else:
        return None
    # Command wrappers (`<command-name>`, `<ide_opened_file>`), slash commands and system nudges
    # are not what the user asked.
    texts = [
        p.strip()
        for p in parts
        if isinstance(p, str) and p.strip() and not p.strip().startswith(("<", "/", "System:"))
    ]
    return "\n".join(texts)[:MAX_PROMPT_CHARS] if texts else None


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            value = json.loads(line)
            if isinstance(value, dict):
                records.append(value)
    return records


def claude_code(path: Path) -> Replay:
    """One Claude Code transcript: its tool_use/tool_result pairs in order."""
    records = _records(path)
    cwd = next((r["cwd"] for r in records if isinstance(r.get("cwd"), str)), None)
    replay = Replay(path.name, cwd or f"/replay/{path.stem}", None, len(path.read_text()))
    calls: dict[str, Call] = {}
    for record in records:
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if record.get("type") == "user" and replay.prompt is None:
            replay.prompt = _text_of(content)
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "tool_use":
                call = Call(str(part["id"]), str(part["name"]), part.get("input"))
                calls[call.id] = call
                replay.calls.append(call)
            elif part.get("type") == "tool_result" and part.get("tool_use_id") in calls:
                calls[part["tool_use_id"]].result = part.get("content")
    return replay


def gemini_jsonl(path: Path) -> Replay:
    """One Gemini CLI JSONL session: each toolCall with its functionResponse's `response`."""
    records = _records(path)
    project = next((r["projectHash"] for r in records if "projectHash" in r), path.stem)
    replay = Replay(path.name, f"/replay/gemini-{project[:12]}", None, len(path.read_text()))
    for record in records:
        if record.get("type") == "user" and replay.prompt is None:
            replay.prompt = _text_of(record.get("displayContent")) or _text_of(
                record.get("content")
            )
        for tool in record.get("toolCalls") or []:
            responses = [
                part["functionResponse"].get("response")
                for part in tool.get("result") or []
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
            ]
            result = responses[0] if len(responses) == 1 else responses or None
            replay.calls.append(Call(str(tool["id"]), str(tool["name"]), tool.get("args"), result))
    return replay


def replays(root: Path = TESTDATA) -> list[Replay]:
    """Every transcript under `root` that carries tool calls, as one session each."""
    found = [claude_code(p) for p in sorted((root / "claude-code").glob("*.jsonl"))]
    found += [gemini_jsonl(p) for p in sorted((root / "gemini").glob("*.jsonl"))]
    return [replay for replay in found if replay.calls]
