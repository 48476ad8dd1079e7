"""The SSE reader finds every event however the network splits the bytes."""

from __future__ import annotations

import json

from app.proxy.sse import SseReader, parse_json_array_stream


def _stream(*payloads: object, sep: bytes = b"\r\n\r\n") -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + sep for p in payloads)


def test_events_split_at_every_byte_are_all_found() -> None:
    raw = _stream({"a": 1}, {"b": [2, 3]}, {"c": "x\ny"})
    reader = SseReader()
    found = []
    for index in range(len(raw)):
        found += reader.feed(raw[index : index + 1])
    found += reader.close()
    assert found == [{"a": 1}, {"b": [2, 3]}, {"c": "x\ny"}]


def test_lf_and_cr_separators_and_multiline_data() -> None:
    raw = b'data: {"a":\ndata: 1}\n\n' + b'data: {"b": 2}\r\r' + b": comment\n\n"
    reader = SseReader()
    assert reader.feed(raw) + reader.close() == [{"a": 1}, {"b": 2}]


def test_a_final_event_without_blank_line_is_kept_and_bad_json_counted() -> None:
    reader = SseReader()
    assert reader.feed(b'data: not json\n\ndata: {"z": 0}') == []
    assert reader.close() == [{"z": 0}]
    assert reader.malformed == 1


def test_json_array_stream() -> None:
    assert parse_json_array_stream(b'[{"a": 1},\r\n{"b": 2}]') == [{"a": 1}, {"b": 2}]
    assert parse_json_array_stream(b'{"a": 1}') == [{"a": 1}]
    assert parse_json_array_stream(b"[{") is None
