"""Injection edits only the system instruction, replaces older blocks, and spares thoughts."""

from __future__ import annotations

import copy
from typing import Any

from app.proxy.inject import has_memory_block, inject_memory, last_user_prompt

BLOCK = "<memory>\n## Recent\n- fixed the JWT check\n</memory>"


def _body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "contents": [
            {"role": "user", "parts": [{"text": "first question"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "thinking", "thought": True, "thoughtSignature": "c2lnLTE="},
                    {"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "read_file", "response": {}}}],
            },
        ]
    }
    body.update(extra)
    return body


def test_block_is_created_when_there_is_no_system_instruction() -> None:
    body = _body()
    original = copy.deepcopy(body)
    injected = inject_memory(body, BLOCK)
    assert injected["systemInstruction"] == {"parts": [{"text": BLOCK}]}
    assert injected["contents"] == original["contents"]
    assert body == original  # the caller's dict is not changed


def test_block_goes_first_and_an_older_one_is_replaced_not_duplicated() -> None:
    body = _body(
        systemInstruction={
            "role": "system",
            "parts": [{"text": "<memory>old</memory>\n"}, {"text": "Be terse."}],
        }
    )
    once = inject_memory(body, BLOCK)
    twice = inject_memory(once, BLOCK.replace("JWT", "CSRF"))
    parts = twice["systemInstruction"]["parts"]
    assert parts == [{"text": BLOCK.replace("JWT", "CSRF")}, {"text": "Be terse."}]
    assert twice["systemInstruction"]["role"] == "system"


def test_a_block_inside_caller_text_is_cut_out_and_the_rest_kept() -> None:
    body = _body(system_instruction={"parts": [{"text": "Rules.\n<memory>x</memory>\nMore."}]})
    injected = inject_memory(body, BLOCK)
    assert "systemInstruction" not in injected
    assert injected["system_instruction"]["parts"] == [{"text": BLOCK}, {"text": "Rules.\nMore."}]


def test_thought_parts_in_the_system_instruction_are_never_edited() -> None:
    thought = {"text": "<memory>kept</memory>", "thought": True, "thoughtSignature": "c2ln"}
    body = _body(systemInstruction={"parts": [thought]})
    assert inject_memory(body, BLOCK)["systemInstruction"]["parts"] == [{"text": BLOCK}, thought]


def test_empty_block_only_removes_and_drops_an_emptied_instruction() -> None:
    body = _body(systemInstruction={"parts": [{"text": "<memory>old</memory>"}]})
    assert has_memory_block(body)
    assert "systemInstruction" not in inject_memory(body, "")
    assert not has_memory_block(_body())


def test_prompt_is_the_newest_user_text_without_memory() -> None:
    assert last_user_prompt(_body()) == "first question"
    body = _body()
    body["contents"].append(
        {"role": "user", "parts": [{"text": "<memory>m</memory>now fix tests"}, {"text": "fast"}]}
    )
    assert last_user_prompt(body) == "now fix tests\nfast"
    assert last_user_prompt({"contents": "nope"}) == ""
