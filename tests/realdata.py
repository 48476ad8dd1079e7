"""Real tool calls from /work/shared/testdata (see its SOURCES.md), for compression tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TESTDATA = Path("/work/shared/testdata")
# A Claude Code session fixing a doubled error prefix in a Go CLI (CC 2.1.12).
GO_SESSION = TESTDATA / "claude-code/entire_28a8bc758709_summaries_progress.jsonl"
GO_PROJECT = "/Users/gtrrz-victor/wks/gtrrz-victor/improve-status-cmd-output"
GO_CONFIG = f"{GO_PROJECT}/cmd/entire/cli/config.go"
LINT_CALL = "toolu_01UDCJ7nXNksJ3rDjEuzZXW1"  # Bash `mise run lint`: "0 issues."
FMT_LINT_CALL = "toolu_014BtLv7UEAoKLVEpEQpQzse"  # Bash `mise run fmt && mise run lint`: fails
READ_CALL = "toolu_01Ln8gKtjTJ826Ptm75TtwUT"  # Read config.go from line 225
GREP_CALL = "toolu_01CR4GHdCvzQ27BTRDRa3ASu"  # Grep -C 3 `reading settings file`: 2 matches
FAILED_EDIT_CALL = "toolu_01HGAZudBVAkDXs767ZHG5CX"  # Edit refused: "Found 2 matches ..."
LAST_EDIT_CALL = "toolu_01MVc4aUcpAhwdpDXbaM77sb"  # Edit: `return nil, err` wrapped again
# A Claude Code session (CC 1.0.98) asked to write a CLAUDE.md, with a to-do list.
CLAUDE_MD_SESSION = TESTDATA / "claude-code/ccviewer_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
TODO_CALL = "toolu_01PbUvZLKxR3ysWR9vhm6PSH"  # TodoWrite: four items done, one in progress
LAST_TODO_CALL = "toolu_01WG87BhAT5yVaRwP1gU9Uxz"  # TodoWrite: its one item done (~80 tokens)
DENIED_WRITE_CALL = "toolu_01LM7vfs6eMdhHJokVajzJA1"  # Write CLAUDE.md: permission not granted
# A Gemini CLI session writing a GEMINI.md for a Python Discord bot.
GEMINI_SESSION = TESTDATA / "gemini/vct_gemini_session_jsonl_format.jsonl"


def tool_call(path: Path, call_id: str) -> tuple[str, Any, Any]:
    """(name, input, result content) of one tool_use/tool_result pair of a Claude Code file."""
    name = args = result = None
    for line in path.read_text(encoding="utf-8").splitlines():
        content = json.loads(line).get("message", {}).get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "tool_use" and part["id"] == call_id:
                name, args = part["name"], part["input"]
            elif part.get("type") == "tool_result" and part.get("tool_use_id") == call_id:
                result = part.get("content")
    assert name is not None, call_id
    return name, args, result


def gemini_call(path: Path, call_id: str) -> tuple[str, Any, Any]:
    """(name, args, functionResponse.response) of one toolCall of a Gemini CLI JSONL session:
    the result as the proxy records it."""
    for line in path.read_text(encoding="utf-8").splitlines():
        for tool in json.loads(line).get("toolCalls") or []:
            if tool["id"] == call_id:
                (part,) = tool["result"]
                return tool["name"], tool["args"], part["functionResponse"]["response"]
    raise AssertionError(call_id)


def tool_calls(path: Path) -> list[tuple[str, Any, Any]]:
    """Every tool_use/tool_result pair of a Claude Code file, in order."""
    ids: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        content = json.loads(line).get("message", {}).get("content")
        ids.extend(
            part["id"]
            for part in (content if isinstance(content, list) else [])
            if part.get("type") == "tool_use"
        )
    return [tool_call(path, call_id) for call_id in ids]


# A Gemini CLI session (legacy JSON) renaming a Rust project, its answers in Chinese.
GEMINI_CJK_SESSION = TESTDATA / "gemini/vct_gemini_session_legacy_json_2025-10.json"


def gemini_answers() -> list[str]:
    """Every text Gemini wrote in the two Gemini CLI sessions (its answers and the descriptions
    of its thoughts): English prose naming files, versions and URLs, and Chinese prose."""
    records: list[Any] = json.loads(GEMINI_CJK_SESSION.read_text(encoding="utf-8"))["messages"]
    lines = GEMINI_SESSION.read_text(encoding="utf-8").splitlines()
    records += [json.loads(line) for line in lines]
    texts: list[str] = []
    for record in records:
        if record.get("type") != "gemini":
            continue
        if isinstance(record.get("content"), str):
            texts.append(record["content"])
        texts += [thought.get("description", "") for thought in record.get("thoughts") or []]
    return [text for text in texts if text.strip()]
