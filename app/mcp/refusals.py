"""JSON-RPC errors for the messages the SDK cannot take, alike over stdio and `/mcp`.

JSON-RPC 2.0 answers a message that is not JSON with a Parse error (-32700) and one that is no
JSON-RPC message with an Invalid Request (-32600), both with id null. Over stdio the SDK answered
neither (the client waited for an answer until its own timeout); over HTTP it answered a wrong
Content-Type in plain text and a batch (`[]`) or an object of no message's shape with -32602 and
pydantic's dump of four to eleven validation errors.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData
from pydantic import ValidationError
from starlette.types import Message, Send

NOT_A_MESSAGE = (
    'Invalid Request: not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0" and a '
    '"method", or a "result" or "error" with an "id")'
)
# MCP 2025-06-18 removed JSON-RPC batching; the SDK takes one message at a time.
A_BATCH = "Invalid Request: a batch (JSON array) is not taken; send one JSON-RPC message at a time"


def refusal(error: Exception) -> ErrorData:
    """The error answering a message that the SDK's parser refused with `error`."""
    details: list[Any] = list(error.errors()) if isinstance(error, ValidationError) else []
    for detail in details:
        if detail["type"] == "json_invalid":
            reason = str(detail["msg"]).removeprefix("Invalid JSON: ")
            return ErrorData(code=PARSE_ERROR, message=f"Parse error: {reason}")
    # A union's errors name the member tried (loc of one) and the whole message as their input.
    batch = any(len(d["loc"]) <= 1 and isinstance(d.get("input"), list) for d in details)
    return ErrorData(code=INVALID_REQUEST, message=A_BATCH if batch else NOT_A_MESSAGE)


def too_large(size: int, limit: int) -> ErrorData:
    """The error answering a line on stdin of `size` bytes, over the `limit` it may take."""
    return ErrorData(
        code=INVALID_REQUEST,
        message=(
            f"Invalid Request: the message is {size} bytes, over the limit of {limit} bytes "
            "(AGMEM_MAX_BODY_BYTES and 64 KiB for the JSON-RPC envelope)"
        ),
    )


def refused_id(error: Exception) -> int | str | None:
    """The id of a message the SDK's parser refused, where it can be read (an object's `id`, a
    number or a text): JSON-RPC answers null only for an id that cannot be detected, and a
    client waits on the id it sent."""
    details: list[Any] = list(error.errors()) if isinstance(error, ValidationError) else []
    for detail in details:
        sent = detail.get("input")
        if isinstance(sent, dict):
            found = sent.get("id")
            if isinstance(found, (int, str)) and not isinstance(found, bool):
                return found
    return None


def invalid_request(body: bytes) -> str:
    """What is wrong with `body`, JSON that is no JSON-RPC message."""
    return A_BATCH if body.lstrip()[:1] == b"[" else NOT_A_MESSAGE


def json_rpc_errors(send: Send, body: bytes | str | None) -> Send:
    """`send` for the SDK's answer to the request `body` over `/mcp`, its refusals made JSON-RPC
    errors: a plain-text one (a wrong Content-Type or Accept) carries its text as an Invalid
    Request, and the dump of pydantic's errors for JSON that is no message is one line.
    Answers under 400 pass as they are sent: only an error is held until its end."""
    held: list[Message] = []

    async def send_answer(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            held.append(message)
            return
        if not held:
            await send(message)
            return
        held.append(message)
        if message.get("more_body", False):
            return
        start, parts = held[0], held[1:]
        text = b"".join(part.get("body", b"") for part in parts)
        status, text = _as_json_rpc(start, text, body if isinstance(body, bytes) else None)
        headers = [
            (name, value)
            for name, value in start.get("headers", [])
            if name.lower() not in (b"content-length", b"content-type")
        ]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(text)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": text})

    return send_answer


# The SDK's transport security answers a body that is not JSON by its Content-Type in plain text
# (400), before its own check would (415 and a JSON-RPC error): the latter is answered.
WRONG_CONTENT_TYPE = b"Invalid Content-Type header"
CONTENT_TYPE_MESSAGE = "Unsupported Media Type: Content-Type must be application/json"


def _as_json_rpc(start: Message, text: bytes, body: bytes | None) -> tuple[int, bytes]:
    status = int(start["status"])
    kinds = [value for name, value in start.get("headers", []) if name.lower() == b"content-type"]
    if kinds and kinds[0].split(b";")[0].strip() == b"application/json":
        try:
            answer = json.loads(text)
        except ValueError:
            return status, text
        error = answer.get("error") if isinstance(answer, dict) else None
        # The SDK's -32602 and pydantic's dump, for JSON that is no message: an Invalid Request.
        if (
            isinstance(error, dict)
            and error.get("code") == INVALID_PARAMS
            and str(error.get("message", "")).startswith("Validation error")
            and body is not None
        ):
            error.update(code=INVALID_REQUEST, message=invalid_request(body))
            return status, json.dumps(answer, separators=(",", ":")).encode()
        return status, text
    if text.strip() == WRONG_CONTENT_TYPE:
        status, message = 415, CONTENT_TYPE_MESSAGE
    else:
        message = f"Invalid Request: {text.decode('utf-8', 'replace').strip() or 'refused'}"
    answer = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return status, json.dumps(answer, separators=(",", ":")).encode()
