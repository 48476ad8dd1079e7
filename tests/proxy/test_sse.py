"""The SSE reader finds every event however the network splits the bytes."""

from __future__ import annotations

import json

import pytest

from app.proxy.sse import EventHolder, SseReader, events_end, parse_json_array_stream
from tests.test_privacy import _assert_linear


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


# Every separator, split across reads at every place: "\r\n\r\n" cut after its first byte
# leaves 3 of its bytes held, the most the holder rescans.
_MIXED = b"data: 1\r\n\r\ndata: 2\n\ndata: 3\r\rdata: 4\r\n\r\n: c\r\r\ndata: 5"


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
def test_the_holder_releases_what_a_whole_buffer_scan_finds(size: int) -> None:
    for offset in range(size):
        reads = [_MIXED[:offset]] + [
            _MIXED[at : at + size] for at in range(offset, len(_MIXED), size)
        ]
        holder = EventHolder()
        released = b""
        for read in reads:
            released += holder.take(read)
            # What a scan of everything read so far would hold back, no more, no less.
            assert len(released) == events_end(released + holder.held)
        assert released + holder.held == _MIXED


def test_holding_back_a_long_event_costs_linear_work() -> None:
    # One big event in small reads: every read rescanned the whole held event (the relay of a
    # 10 MB event took 58 s of the event loop in 16 KiB reads).
    def relay(n: int) -> None:
        holder = EventHolder()
        event = b"data: " + b"a\r" * (87_381 * n) + b"\n\n"
        for at in range(0, len(event), 4096):
            holder.take(event[at : at + 4096])
        assert not holder.held

    _assert_linear(relay)
