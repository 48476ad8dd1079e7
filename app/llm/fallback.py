"""Deterministic, extractive compression and summaries: no model, no network, same input gives
the same text. Used when no GEMINI_API_KEY is set, when Gemini keeps failing, when the daily
budget is spent, and for tools on the skip list."""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

EXTRACTIVE = "extractive"

_PATH_KEY = re.compile(r"path|file|dir|target|uri", re.IGNORECASE)
_ERROR_LINE = re.compile(
    r"\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|cannot)\b",
    re.IGNORECASE,
)
_OLD_KEYS = ("old_string", "oldString", "old_str", "TargetContent", "old")
_NEW_KEYS = (
    "new_string",
    "newString",
    "new_str",
    "ReplacementContent",
    "content",
    "CodeContent",
    "contents",
    "new",
)
MAX_LINE = 160


def strings_in(value: Any) -> Iterator[str]:
    """Every string leaf of a JSON value, depth first, in document order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def target_files(args: Any) -> list[str]:
    """Paths named by the call's arguments (keys that say path/file/dir/target), in order."""
    found: list[str] = []

    def visit(value: Any, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, str(k))
        elif isinstance(value, list):
            for v in value:
                visit(v, key)
        elif isinstance(value, str) and _PATH_KEY.search(key) and value and "\n" not in value:
            if len(value) <= 300 and value not in found:
                found.append(value)

    visit(args, "")
    return found


def _short(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def key_lines(result: Any, *, limit: int = 3) -> tuple[list[str], list[str]]:
    """(error lines, first meaningful lines) of a tool result, each shortened to one line."""
    lines = [ln for s in strings_in(result) for ln in s.splitlines() if ln.strip()]
    if not lines and result is not None and not isinstance(result, str):
        lines = [json.dumps(result, ensure_ascii=False, sort_keys=True)]
    errors = [_short(ln) for ln in lines if _ERROR_LINE.search(ln)][:limit]
    firsts = [_short(ln) for ln in lines if not _ERROR_LINE.search(ln)][:limit]
    return errors, firsts


def _first_key(args: Any, keys: Sequence[str]) -> str | None:
    if not isinstance(args, dict):
        return None
    for key in keys:
        value = args.get(key)
        if isinstance(value, str):
            return value
    return None


def diff_summary(args: Any) -> str | None:
    """`+added/-removed lines` for a write or edit, from its old and new text arguments."""
    new = _first_key(args, _NEW_KEYS)
    if new is None:
        return None
    old = _first_key(args, _OLD_KEYS) or ""
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return f"+{added}/-{removed} lines"


def compress_extractive(
    *, function_name: str, observation_type: str, args: Any, result: Any
) -> str:
    """A few structured lines: the call, its files, errors, key result lines, a diff summary."""
    files = target_files(args)
    lines = [f"{function_name} ({observation_type})"]
    if files:
        lines.append("Files: " + ", ".join(files[:5]) + (" …" if len(files) > 5 else ""))
    if observation_type == "file_write":
        diff = diff_summary(args)
        if diff:
            lines.append(f"Diff: {diff}")
    elif not files:
        arg_lines = [_short(s) for s in strings_in(args) if s.strip()][:2]
        if arg_lines:
            lines.append("Args: " + " | ".join(arg_lines))
    errors, firsts = key_lines(result)
    if errors:
        lines.append("Errors: " + " | ".join(errors))
    if firsts:
        lines.append("Result: " + " | ".join(firsts))
    elif result is None:
        lines.append("Result: none")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ObservationDigest:
    """What a session summary needs from one observation."""

    function_name: str
    observation_type: str
    status: str
    compressed: str | None
    files: list[str]


# (one, many): the summary is injected into prompts as prose, so "1 file read", not "1 file reads".
_TYPE_WORDS = {
    "file_read": ("file read", "file reads"),
    "file_write": ("file write", "file writes"),
    "code_execution": ("command", "commands"),
    "search": ("search", "searches"),
    "web": ("web call", "web calls"),
    "other": ("other call", "other calls"),
}


def _count(kind: str, n: int) -> str:
    one, many = _TYPE_WORDS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def _highlight(compressed: str) -> str:
    """The last line of a compressed observation that says something. A short observation is
    kept raw, as indented JSON whose last line is a lone `}`; a bracket is no result."""
    for line in reversed(compressed.splitlines()):
        if any(ch.isalnum() for ch in line):
            # Trailing punctuation is dropped so that joining results never reads "x;; y.".
            return _short(line).rstrip(" ;.,")
    return ""


def summarize_extractive(
    *, project_path: str, user_prompt: str | None, observations: Sequence[ObservationDigest]
) -> str:
    """Three or four sentences built from the session's prompt and its compressed observations."""
    total = len(observations)
    counts = Counter(o.observation_type for o in observations)
    kinds = ", ".join(_count(t, n) for t, n in sorted(counts.items()))
    goal = f' on "{_short(user_prompt)}"' if user_prompt and user_prompt.strip() else ""
    sentences = [
        f"This session in {project_path}{goal} made {total} tool call"
        f"{'' if total == 1 else 's'}{f' ({kinds})' if kinds else ''}."
    ]
    files: list[str] = []
    for o in observations:
        files.extend(f for f in o.files if f not in files)
    if files:
        more = f" and {len(files) - 6} more" if len(files) > 6 else ""
        sentences.append(f"It touched {', '.join(files[:6])}{more}.")
    highlights = [h for o in observations if o.compressed and (h := _highlight(o.compressed))]
    if highlights:
        sentences.append(f"Notable results: {'; '.join(highlights[:2])}.")
    failed = sum(1 for o in observations if o.status == "failed")
    if failed:
        sentences.append(
            f"{failed} observation{'' if failed == 1 else 's'} could not be compressed."
        )
    return " ".join(sentences)
