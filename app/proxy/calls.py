"""Finding tool calls in Gemini answers and tool results in the requests that follow them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from app.privacy import clean_text


@dataclass(slots=True)
class FunctionCall:
    name: str
    args: Any = field(default_factory=dict)
    call_id: str | None = None


@dataclass(slots=True)
class FunctionResult:
    name: str
    result: Any
    call_id: str | None = None


def _parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return []
    return [part for part in content["parts"] if isinstance(part, dict)]


def _field(part: dict[str, Any], camel: str, snake: str) -> Any:
    return part.get(camel, part.get(snake))


def _call_id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class CallCollector:
    """Collects the `functionCall` parts of one answer, whole or spread over stream chunks.

    A call whose id repeats in a later chunk continues the earlier one: its args are merged in.
    """

    def __init__(self) -> None:
        self.calls: list[FunctionCall] = []
        self._by_id: dict[str, FunctionCall] = {}

    def add_response(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        candidates = response.get("candidates")
        for candidate in candidates if isinstance(candidates, list) else []:
            if not isinstance(candidate, dict):
                continue
            for part in _parts(candidate.get("content")):
                call = _field(part, "functionCall", "function_call")
                if isinstance(call, dict):
                    self._add(call)

    def _add(self, call: dict[str, Any]) -> None:
        call_id = _call_id(call.get("id"))
        args = call.get("args")
        args = args if args is not None else {}
        earlier = self._by_id.get(call_id) if call_id else None
        if earlier is not None:
            if isinstance(earlier.args, dict) and isinstance(args, dict):
                earlier.args = {**earlier.args, **args}
            return
        collected = FunctionCall(_name(call.get("name")), args, call_id)
        self.calls.append(collected)
        if call_id:
            self._by_id[call_id] = collected


def _name(value: Any) -> str:
    """A call's or result's function name, cleaned as every name the capture API takes is: a
    JSON body may carry a lone surrogate escape, which `json` keeps and the capture's name
    check refused (the call and its result were lost); "unknown" when there is none."""
    return (clean_text(value) if isinstance(value, str) else "") or "unknown"


def trailing_results(body: Any) -> list[FunctionResult]:
    """The `functionResponse` parts sent since the model's last turn (older ones were seen)."""
    if not isinstance(body, dict):
        return []
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list):
        return []
    trailing: list[Any] = []
    for content in reversed(contents):
        if isinstance(content, dict) and content.get("role") == "model":
            break
        trailing.append(content)
    results: list[FunctionResult] = []
    for content in reversed(trailing):
        for part in _parts(content):
            response = _field(part, "functionResponse", "function_response")
            if not isinstance(response, dict):
                continue
            results.append(
                FunctionResult(
                    _name(response.get("name")),
                    response.get("response"),
                    _call_id(response.get("id")),
                )
            )
    return results


def conversation_key(body: Any, turn_index: int) -> str:
    """A digest of the user's text before the model turn at `turn_index`: what tells two
    conversations in one session apart (two agent windows on one project share the proxy's
    session, and meet at the same turn index calling the same functions).

    The request that got the turn's calls and the one that brings their results both hold that
    history unchanged. The user's text only: a client may re-encode the model's turns. Not only
    the first turn: Gemini CLI opens every conversation with the same setup turn.
    """
    contents = body.get("contents") if isinstance(body, dict) else None
    if isinstance(contents, dict):
        contents = [contents]
    digest = hashlib.sha256()
    for content in contents[:turn_index] if isinstance(contents, list) else []:
        if isinstance(content, dict) and content.get("role") != "model":
            for part in _parts(content):
                if isinstance(part.get("text"), str):
                    digest.update(part["text"].encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


def observation_ids(
    session_id: str, turn_index: int, calls: list[FunctionCall], *, conversation: str = ""
) -> list[str]:
    """Stable observation ids for the calls of one model turn of one conversation.

    The answer that carried the calls and the next request (which echoes that model turn in its
    history) both derive the same ids, so each result lands on its own call even when one turn
    calls the same function twice, and a retried request records nothing twice.
    """
    # Names and Gemini's ids, not args: a client may re-encode args (1.0 as 1) when it echoes them.
    turn = json.dumps(
        [conversation, [[call.name, call.call_id] for call in calls]], separators=(",", ":")
    )
    digest = hashlib.sha256(turn.encode("utf-8", "surrogatepass")).hexdigest()
    return [
        "gemini-"
        + hashlib.sha256(f"{session_id}\x00{turn_index}\x00{digest}\x00{n}".encode()).hexdigest()[
            :40
        ]
        for n in range(len(calls))
    ]


def answered_turn(body: Any) -> tuple[int, list[FunctionCall]] | None:
    """The newest model turn in a request's history, as (its index, its calls)."""
    contents = body.get("contents") if isinstance(body, dict) else None
    if not isinstance(contents, list):
        return None
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        if isinstance(content, dict) and content.get("role") == "model":
            collector = CallCollector()
            collector.add_response({"candidates": [{"content": content}]})
            return index, collector.calls
    return None


def next_turn_index(body: Any) -> int:
    """Where the answer to this request sits in the history the client will send next."""
    contents = body.get("contents") if isinstance(body, dict) else None
    return len(contents) if isinstance(contents, list) else 1


def match_results(
    results: list[FunctionResult], calls: list[FunctionCall], ids: list[str]
) -> list[str | None]:
    """For each result, the id of its call: by Gemini's call id, else the next unused same name."""
    chosen: list[int | None] = [None] * len(results)
    used: set[int] = set()
    for pass_by_id in (True, False):
        for r, result in enumerate(results):
            if chosen[r] is not None:
                continue
            for n, call in enumerate(calls):
                if n in used:
                    continue
                if (pass_by_id and result.call_id and call.call_id == result.call_id) or (
                    not pass_by_id and call.name == result.name
                ):
                    chosen[r] = n
                    used.add(n)
                    break
    return [None if n is None else ids[n] for n in chosen]
