"""What both MCP transports do to a message before the SDK reads it."""

from __future__ import annotations

from app.mcp.wire import surrogates_cleaned


def test_a_value_nested_too_deep_to_clean_is_left_to_the_sdk() -> None:
    # json.loads took ~950 levels where the recursive cleaning did not: the RecursionError
    # ended the stdio reader thread (no call answered after it, end of input ignored) and was a
    # 500 over /mcp.
    deep = b"[" * 950 + b'"\\ud800"' + b"]" * 950
    message = b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"v": ' + deep + b"}}"
    assert surrogates_cleaned(message) == message
