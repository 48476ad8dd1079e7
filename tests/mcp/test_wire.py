"""What both MCP transports do to a message before the SDK reads it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from app.mcp.server import sent_arguments
from app.mcp.wire import MESSAGE_TEXT, surrogates_cleaned


def test_a_value_nested_too_deep_to_clean_is_left_to_the_sdk() -> None:
    # json.loads took ~950 levels where the recursive cleaning did not: the RecursionError
    # ended the stdio reader thread (no call answered after it, end of input ignored) and was a
    # 500 over /mcp.
    deep = b"[" * 950 + b'"\\ud800"' + b"]" * 950
    message = b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"v": ' + deep + b"}}"
    assert surrogates_cleaned(message) == message


def test_a_call_holding_a_float_not_found_in_its_message_is_refused_not_changed() -> None:
    # The SDK made 0.0 of `1e-400`: with no `tools/call` of that id in the message's text to read
    # it again from, the float was stored as the SDK made it.
    message = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "write_memory",'
        b' "arguments": {"key": "k", "value": [1e-400]}}}'
    )
    token = MESSAGE_TEXT.set(message)
    try:
        assert sent_arguments("write_memory", {"key": "k", "value": [0.0]}, 1) == {
            "key": "k",
            "value": [Decimal("1e-400")],
        }
        for request_id in (2, "1"):
            with pytest.raises(ToolError) as refused:
                sent_arguments("write_memory", {"key": "k", "value": [0.0]}, request_id)
            assert str(refused.value).startswith(
                "Error executing tool write_memory: InvalidJSON: the call's numbers could not be "
                "read as sent"
            ), refused.value
        # Without a float there is nothing to read again.
        assert sent_arguments("write_memory", {"key": "k", "value": [1]}, 2) == {
            "key": "k",
            "value": [1],
        }
    finally:
        MESSAGE_TEXT.reset(token)
    # A client in the same process sends no text: its floats are its own, as it made them.
    assert sent_arguments("write_memory", {"value": 0.5}, None) == {"value": 0.5}
