from __future__ import annotations

import base64
import json

from app.sync.transcripts import parse_transcript
from tests.sync.helpers import TESTDATA


def read(relative: str) -> str:
    return (TESTDATA / relative).read_text(encoding="utf-8")


def lines_of(data: str) -> list[str]:
    return data.split("\n")


def test_claude_code_small_file_without_final_newline() -> None:
    data = read("claude-code/entire_c9883595c929_v2.0.74_small.jsonl")
    assert not data.endswith("\n")

    parsed = parse_transcript(data)

    assert [e.line for e in parsed.entries] == [3, 5, 7, 9]
    assert parsed.entries[0].text.startswith("User: ")
    assert parsed.entries[1].text.startswith("Assistant: [tool Write] {")
    assert parsed.entries[2].text.startswith("User: [tool result] File created successfully")
    assert parsed.entries[3].text.startswith("Assistant: ")
    # The last line (no newline after it) is read like any other.
    assert json.loads(lines_of(data)[8])["message"]["content"][0]["text"][:40] in (
        parsed.entries[3].text
    )
    assert parsed.skipped["queue-operation"] == 1
    assert parsed.skipped["file-history-snapshot"] == 2
    assert parsed.skipped["thinking"] == 2


def test_claude_code_summaries_progress_and_tool_pairs() -> None:
    data = read("claude-code/entire_28a8bc758709_summaries_progress.jsonl")

    parsed = parse_transcript(data)

    summaries = [e for e in parsed.entries if e.text.startswith("Summary: ")]
    assert [e.line for e in summaries] == [1, 2, 7, 8, 9]
    assert parsed.skipped["progress"] == 9
    tool_uses = [e for e in parsed.entries if "[tool " in e.text and "[tool result]" not in e.text]
    results = [e for e in parsed.entries if "[tool result]" in e.text]
    assert len(tool_uses) == len(results) > 5
    # Every entry's line is the line of its own record in the file.
    file_lines = lines_of(data)
    for entry in parsed.entries:
        record = json.loads(file_lines[entry.line - 1])
        assert record["type"] in ("summary", "user", "assistant")


def test_older_claude_code_with_meta_lines_and_tool_use_results() -> None:
    parsed = parse_transcript(
        read("claude-code/ccviewer_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl")
    )
    assert parsed.skipped["meta"] == 1
    # 12 tool results, one of them empty (line 13).
    assert sum("[tool result]" in e.text for e in parsed.entries) == 11
    assert 13 not in [e.line for e in parsed.entries]
    assert sum("[tool TodoWrite]" in e.text for e in parsed.entries) >= 1


def test_gemini_jsonl_with_set_lines_and_tool_calls() -> None:
    data = read("gemini/vct_gemini_session_jsonl_format.jsonl")

    parsed = parse_transcript(data, tool_output_chars=500)

    assert parsed.skipped["metadata"] == 12  # the first line and 11 "$set" updates
    assert parsed.skipped["info"] == 2
    file_lines = lines_of(data)
    for entry in parsed.entries:
        record = json.loads(file_lines[entry.line - 1])
        assert record["type"] in ("user", "gemini")
    assert parsed.entries[0].text.startswith("User: ")
    calls = [e for e in parsed.entries if "[tool read_file]" in e.text]
    assert calls
    assert "[tool result]" in calls[0].text
    assert parsed.skipped["trimmed tool output"] >= 1
    # The 55 KB line's tool outputs are trimmed, so no entry carries them whole.
    assert max(len(e.text) for e in parsed.entries) < 10_000


def test_gemini_legacy_json_maps_each_message_to_its_line() -> None:
    data = read("gemini/vct_gemini_session_legacy_json_2025-10.json")

    parsed = parse_transcript(data)

    assert len(parsed.entries) == 14
    assert parsed.entries[0].text.startswith("User: ## 任務")
    assert all(e.text.startswith("Assistant: ") for e in parsed.entries[1:])
    file_lines = lines_of(data)
    messages = json.loads(data)["messages"]
    # Each message maps to the line holding its text, the line a citation must show (the id's
    # line, three above, left a chunk's range ending before its last message's words).
    for entry, message in zip(parsed.entries, messages, strict=True):
        line = file_lines[entry.line - 1]
        assert line.lstrip().startswith('"content": ')
        assert json.dumps(message["content"], ensure_ascii=False)[:40] in line


def test_openclaw_plain_chat_two_objects_on_a_line_and_bad_lines() -> None:
    openclaw = {
        "type": "message",
        "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    }
    plain = {"role": "assistant", "content": "hello there"}
    lines = [
        json.dumps(openclaw),
        json.dumps(plain) + json.dumps({"role": "user", "content": "second on line 2"}),
        "{not json",
        json.dumps({"type": "mystery", "x": 1}),
        json.dumps({"role": "system", "content": "you are"}),
        "",
        json.dumps({"role": "tool", "content": "tool said"}),
    ]

    parsed = parse_transcript("\n".join(lines))

    assert [(e.line, e.text) for e in parsed.entries] == [
        (1, "User: hi"),
        (2, "Assistant: hello there"),
        (2, "User: second on line 2"),
        (7, "Tool: tool said"),
    ]
    assert parsed.skipped["invalid JSON"] == 1
    assert parsed.skipped["type mystery"] == 1
    assert parsed.skipped["role system"] == 1


def test_images_base64_huge_lines_sidechains_and_privacy() -> None:
    png = base64.b64encode(bytes(range(256)) * 400).decode()
    image_block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png},
    }
    huge = "drwxr-xr-x  2 kaito staff   64 file.txt\n" * 15_000
    lines = [
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [image_block, {"type": "text", "text": "see"}],
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": huge}],
                },
            }
        ),
        json.dumps(
            {
                "type": "assistant",
                "isSidechain": True,
                "message": {
                    "role": "assistant",
                    "content": f"inline data:image/png;base64,{png} end",
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 "
                    "<private>my diary</private> ok",
                },
            }
        ),
    ]
    data = "\n".join(lines)
    assert len(lines[1]) > 500_000

    parsed = parse_transcript(data, tool_output_chars=1000)

    texts = [e.text for e in parsed.entries]
    assert texts[0] == "User: see"
    assert texts[1].startswith("User: [tool result] drwxr-xr-x  2 kaito")
    assert len(texts[1]) < 1100
    assert texts[2] == "Assistant (sidechain): inline [base64 omitted] end"
    assert "my diary" not in texts[3]
    assert "sk-ant-api03-abcdefghijklmnop" not in texts[3]
    assert parsed.skipped["image"] == 1
    assert parsed.skipped["base64"] == 1
    assert parsed.skipped["trimmed tool output"] == 1


def test_garbage_never_crashes() -> None:
    for data in ["", "\n\n", "[1,2]", "null", '{"messages": "nope"}', "\ud800", '{"a":', "{}{}"]:
        parsed = parse_transcript(data)
        assert parsed.entries == []


def test_openclaw_sessions_with_tool_calls_results_and_bookkeeping_lines() -> None:
    records = [
        {"type": "session", "version": 3, "id": "s1", "cwd": "/p"},
        {"type": "model_change", "provider": "anthropic", "modelId": "claude"},
        {
            "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        },
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {
                        "type": "toolCall",
                        "id": "c1",
                        "name": "exec",
                        "arguments": {"command": "ls"},
                    },
                ],
            },
        },
        {
            "type": "message",
            "message": {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "exec",
                "content": [{"type": "text", "text": "a.py\n" * 1000}],
            },
        },
        {"type": "custom", "customType": "model-snapshot", "data": {}},
        {"type": "compaction", "summary": "We listed the files."},
    ]
    data = "\n".join(json.dumps(r) for r in records)

    parsed = parse_transcript(data, tool_output_chars=100)

    assert [(e.line, e.text.split("\n")[0]) for e in parsed.entries] == [
        (3, "User: list files"),
        (4, 'Assistant: [tool exec] {"command":"ls"}'),
        (5, "Tool: [exec] a.py"),
        (7, "Summary: We listed the files."),
    ]
    assert len(parsed.entries[2].text) < 200
    assert parsed.skipped["session"] == parsed.skipped["model_change"] == 1
    assert parsed.skipped["custom"] == parsed.skipped["thinking"] == 1


def test_tool_arguments_are_sanitized_as_json_and_a_cut_never_splits_a_secret() -> None:
    # Arguments were rendered to JSON text first, so a credential-named key's value was
    # redacted only in the shape the text rule knows (quoted, no spaces); and a tool output was
    # cut before it was sanitized, so a key across the cut stayed as a fragment the rules no
    # longer recognise.
    token = "ghp_" + "t" * 36
    output = "build log line\n" * 132 + f"export GH={token} done"
    assert output.index(token) < 2000 < output.index(token) + len(token)
    lines = [
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "name": "login",
                        "input": {"user": "kaito", "password": "correct horse battery"},
                    }
                ],
            },
        },
        {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "tool_result", "content": output}]},
        },
        {"type": "gemini", "content": "", "toolCalls": [{"name": "f", "args": {"apiKey": "ab c"}}]},
    ]

    parsed = parse_transcript("\n".join(json.dumps(line) for line in lines))

    texts = [e.text for e in parsed.entries]
    assert texts[0] == 'Assistant: [tool login] {"user":"kaito","password":"[REDACTED]"}'
    assert "ghp_" not in texts[1]
    assert "tttttt" not in texts[1]
    assert texts[2] == 'Assistant: [tool f] {"apiKey":"[REDACTED]"}'


def test_a_private_span_across_content_blocks_is_not_kept() -> None:
    # Each text block was sanitized alone: a span opened in one block lost its opening tag
    # there, and the next block's text up to `</private>` was stored.
    record = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {"type": "text", "text": "my creds <private>user: bob"},
                {"type": "text", "text": "pass: hunter22</private> thanks"},
            ],
        },
    }
    entries = parse_transcript(json.dumps(record) + "\n").entries
    text = "\n".join(entry.text for entry in entries)
    assert "hunter22" not in text
    assert "bob" not in text
    assert "thanks" in text


def test_numbers_json_cannot_round_trip_keep_their_line_and_their_digits() -> None:
    # A tool call's integer of 5,000 digits made its line "invalid JSON" (and a whole legacy
    # file so); `1e400` was indexed as `Infinity`, `1e-400` as `0.0`, `1.50` as `1.5`.
    digits = "9" * 5000
    calls = [
        '{"n": ' + digits + "}",
        '{"n": 1e400, "m": -1e400, "k": 1e-400, "d": 1.50, "i": 7}',
    ]
    lines = [json.dumps({"type": "user", "message": {"role": "user", "content": "first"}})]
    for number, call in enumerate(calls):
        use = f'{{"type": "tool_use", "id": "t{number}", "name": "calc", "input": {call}}}'
        lines.append(
            '{"type": "assistant", "message": {"role": "assistant", "content": [' + use + "]}}"
        )
    lines.append(json.dumps({"type": "user", "message": {"role": "user", "content": "last"}}))

    parsed = parse_transcript("\n".join(lines))

    assert [e.line for e in parsed.entries] == [1, 2, 3, 4]
    # Kept (its digits are a run the base64 rule omits, as any such run).
    assert parsed.entries[1].text.startswith('Assistant: [tool calc] {"n":')
    assert parsed.entries[2].text == (
        'Assistant: [tool calc] {"n":1E+400,"m":-1E+400,"k":1E-400,"d":1.50,"i":7}'
    )
    assert "invalid JSON" not in parsed.skipped

    legacy = {
        "sessionId": "s",
        "messages": [
            {"id": "m1", "type": "user", "content": "hello"},
            {"id": "m2", "type": "gemini", "content": "the answer", "tokens": 1},
        ],
    }
    data = json.dumps(legacy, indent=2).replace('"tokens": 1', '"tokens": ' + digits)
    parsed = parse_transcript(data)
    assert [e.text for e in parsed.entries] == ["User: hello", "Assistant: the answer"]
    assert "invalid JSON" not in parsed.skipped
