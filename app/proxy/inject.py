"""Memory injection into a Gemini request body: find the prompt, replace our `<memory>` block.

Only `systemInstruction` is ever edited. `contents` (with its `thought` parts and
`thoughtSignature` fields) travels untouched, and so do system parts that carry a thought.
"""

from __future__ import annotations

import re
from typing import Any

MEMORY_BLOCK = re.compile(r"<memory>.*?</memory>[ \t]*\n*", re.DOTALL)
_SYSTEM_KEYS = ("systemInstruction", "system_instruction")


def _is_thought(part: dict[str, Any]) -> bool:
    return bool(part.get("thought")) or "thoughtSignature" in part or "thought_signature" in part


def _text_parts(content: Any) -> list[str]:
    if not isinstance(content, dict):
        return []
    parts = content.get("parts")
    if not isinstance(parts, list):
        return []
    return [
        part["text"]
        for part in parts
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not _is_thought(part)
    ]


def strip_memory(text: str) -> str:
    """The text without any `<memory>…</memory>` block (ours, from this or an earlier turn)."""
    return MEMORY_BLOCK.sub("", text)


def last_user_prompt(body: dict[str, Any]) -> str:
    """The text of the newest user turn that has text (a tool-result turn has none)."""
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list):
        return ""
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        text = strip_memory("\n".join(_text_parts(content))).strip()
        if text:
            return text
    return ""


def system_key(body: dict[str, Any]) -> str:
    return next((key for key in _SYSTEM_KEYS if key in body), _SYSTEM_KEYS[0])


def has_memory_block(body: dict[str, Any]) -> bool:
    """True when the system instruction already holds a `<memory>` block."""
    return any(MEMORY_BLOCK.search(text) for text in _text_parts(body.get(system_key(body))))


def inject_memory(body: dict[str, Any], block: str) -> dict[str, Any]:
    """A copy of `body` whose system instruction starts with `block` and holds no older block.

    An empty `block` only removes the older ones. The caller's own system parts keep their order.
    """
    key = system_key(body)
    system = body.get(key)
    if isinstance(system, str):
        system = {"parts": [{"text": system}]}
    system = dict(system) if isinstance(system, dict) else {}
    parts = system.get("parts")
    kept: list[Any] = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not _is_thought(part):
            text = strip_memory(part["text"])
            if text != part["text"]:
                if not text.strip():
                    continue
                part = {**part, "text": text}
        kept.append(part)
    if block:
        kept.insert(0, {"text": block})
    updated = dict(body)
    if not kept:
        updated.pop(key, None)
        return updated
    system["parts"] = kept
    updated[key] = system
    return updated
