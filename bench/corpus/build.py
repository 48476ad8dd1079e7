"""The relevance corpus as chunks: the shared testdata memory files and transcripts (chunked the
way sync does: markdown-aware, ~400 tokens with 80 overlap) plus the written observations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_text_splitters import MarkdownTextSplitter

from app.sync.chunking import SectionTitles
from bench.corpus.observations import KV, OBSERVATIONS, SUMMARIES

TESTDATA = Path(__file__).resolve().parents[2] / ".." / ".." / "shared" / "testdata"
CHARS_PER_TOKEN = 4


@dataclass(slots=True)
class CorpusChunk:
    key: str  # observation / summary id, `kv:<key>`, or `<file>#<n>` for file chunks
    source: str
    content: str
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    headings: str = ""  # the enclosing markdown section titles, as sync indexes them


def testdata_dir() -> Path:
    for candidate in (Path("/work/shared/testdata"), TESTDATA.resolve()):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("shared testdata folder not found")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def markdown_chunks(path: Path, tokens: int) -> list[CorpusChunk]:
    text = path.read_text(encoding="utf-8")
    splitter = MarkdownTextSplitter(
        chunk_size=tokens * CHARS_PER_TOKEN, chunk_overlap=tokens // 5 * CHARS_PER_TOKEN
    )
    chunks, cursor = [], 0
    sections = SectionTitles(text)
    for n, piece in enumerate(splitter.split_text(text)):
        start = text.find(piece[:200], max(0, cursor - tokens * CHARS_PER_TOKEN))
        start = start if start >= 0 else cursor
        cursor = start + 1
        chunks.append(
            CorpusChunk(
                f"{path.name}#{n}",
                "memory",
                piece,
                path.name,
                _line_of(text, start),
                _line_of(text, start + len(piece) - 1),
                sections.around(start),
            )
        )
    return chunks


def _entry_text(record: dict[str, Any]) -> str:
    """The conversational text of one transcript record (Claude Code or Gemini CLI JSONL)."""
    kind = record.get("type")
    if kind == "summary":
        return f"Summary: {record.get('summary', '')}"
    message = record.get("message")
    content: Any = message.get("content") if isinstance(message, dict) else record.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("text"):
                parts.append(str(block["text"]))
            elif block.get("type") == "tool_use":
                parts.append(f"[{block.get('name')}] {json.dumps(block.get('input'))[:600]}")
            elif block.get("type") == "tool_result":
                parts.append(str(block.get("content"))[:600])
    for call in record.get("toolCalls") or []:
        parts.append(f"[{call.get('name')}] {json.dumps(call.get('args'))[:600]}")
    label = {"user": "User", "assistant": "Assistant", "gemini": "Assistant"}.get(str(kind))
    text = "\n".join(part for part in parts if part.strip())
    return f"{label}: {text}" if label and text else ""


def transcript_chunks(path: Path, tokens: int) -> list[CorpusChunk]:
    """Consecutive entries grouped up to `tokens`, lines being the .jsonl file's own."""
    limit = tokens * CHARS_PER_TOKEN
    entries: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        text = _entry_text(record) if isinstance(record, dict) else ""
        if text:
            entries.append((number, text[:limit]))
    chunks: list[CorpusChunk] = []
    group: list[tuple[int, str]] = []

    def flush() -> None:
        if group:
            body = "\n\n".join(text for _, text in group)
            chunks.append(
                CorpusChunk(
                    f"{path.name}#{len(chunks)}",
                    "sessions",
                    body,
                    path.name,
                    group[0][0],
                    group[-1][0],
                )
            )
            group.clear()

    for entry in entries:
        if group and sum(len(t) for _, t in group) + len(entry[1]) > limit:
            flush()
        group.append(entry)
    flush()
    return chunks


def build_corpus(*, memory_tokens: int = 400, transcript_tokens: int = 400) -> list[CorpusChunk]:
    root = testdata_dir()
    chunks: list[CorpusChunk] = []
    for path in sorted((root / "memory-md").glob("*.md")):
        chunks.extend(markdown_chunks(path, memory_tokens))
    for path in sorted(
        [*(root / "claude-code").glob("*.jsonl"), *(root / "gemini").glob("*.jsonl")]
    ):
        chunks.extend(transcript_chunks(path, transcript_tokens))
    chunks.extend(CorpusChunk(key, "observation", text) for key, text in OBSERVATIONS)
    chunks.extend(
        CorpusChunk(key, "summary", f"{task}. {summary}") for key, task, summary in SUMMARIES
    )
    chunks.extend(CorpusChunk(f"kv:{key}", "kv", f"{key}: {value}") for key, value in KV)
    return chunks
