"""A proxied body parsed once and injected by splicing: the caller's bytes kept outside the
system instruction, and what cannot be spliced read as before."""

from __future__ import annotations

import json

from app.proxy.body import injected, parse_body

BLOCK = "<memory>\nfresh</memory>\n"


def test_an_injected_body_keeps_the_callers_bytes_outside_the_system_instruction() -> None:
    # It was parsed twice and encoded whole: a 7.6 MB call held the event loop for up to
    # 290 ms, and the conversation went upstream re-encoded (escapes, spacing, numbers).
    contents = '[ {"role":"user" , "parts":[{"text":"caf\\u00e9 \\ud83d\\ude00", "n": 1.50}]} ]'
    raw = (
        '{ "contents" : ' + contents + ',\n "systemInstruction": {"parts": '
        '[{"text": "<memory>old</memory>\\nBe brief."}]} }'
    ).encode()
    body = parse_body(raw)
    assert body is not None
    assert body.parsed == json.loads(raw)
    sent = injected(body, raw, BLOCK)
    assert sent.startswith(b'{ "contents" : ' + contents.encode() + b',\n "systemInstruction": ')
    assert sent.endswith(b" }")
    assert json.loads(sent)["systemInstruction"] == {
        "parts": [{"text": BLOCK}, {"text": "Be brief."}]
    }


def test_a_body_without_a_system_instruction_gets_one_first() -> None:
    raw = b'{"contents": [{"parts": [{"text": "hi"}]}]}'
    body = parse_body(raw)
    assert body is not None
    sent = injected(body, raw, BLOCK)
    assert sent.endswith(b',"contents": [{"parts": [{"text": "hi"}]}]}')
    assert json.loads(sent) == {
        "systemInstruction": {"parts": [{"text": BLOCK}]},
        "contents": [{"parts": [{"text": "hi"}]}],
    }
    empty = parse_body(b"{ }")
    assert empty is not None
    assert json.loads(injected(empty, b"{ }", BLOCK)) == {
        "systemInstruction": {"parts": [{"text": BLOCK}]}
    }


def test_what_cannot_be_spliced_is_read_as_json_loads_reads_it() -> None:
    # A repeated key: json keeps the last; a splice would have sent both.
    twice = b'{"systemInstruction": "a", "systemInstruction": "<memory>x</memory>b"}'
    body = parse_body(twice)
    assert body is not None
    assert body.parsed == {"systemInstruction": "<memory>x</memory>b"}
    assert json.loads(injected(body, twice, BLOCK)) == {
        "systemInstruction": {"parts": [{"text": BLOCK}, {"text": "b"}]}
    }
    # A system instruction left empty once the older block goes is dropped.
    only = b'{"systemInstruction": {"parts": [{"text": "<memory>x</memory>"}]}, "contents": []}'
    body = parse_body(only)
    assert body is not None
    assert json.loads(injected(body, only, "")) == {"contents": []}
    for unreadable in (b"[1]", b'{"a": 1} x', b'{"a" 1}', b"\xff{}", b"{" * 100_000):
        assert parse_body(unreadable) is None
    utf16 = json.dumps({"contents": []}).encode("utf-16")
    body = parse_body(utf16)
    assert body is not None
    assert body.parsed == {"contents": []}
