"""Tool calls are found in answers (whole or in chunks) and results in the following request."""

from __future__ import annotations

from app.proxy.calls import (
    CallCollector,
    FunctionCall,
    FunctionResult,
    answered_turn,
    conversation_key,
    match_results,
    next_turn_index,
    observation_ids,
    trailing_results,
)


def _chunk(*parts: dict[str, object]) -> dict[str, object]:
    return {"candidates": [{"content": {"role": "model", "parts": list(parts)}}]}


def test_calls_across_chunks_in_order_and_continuations_merged() -> None:
    collector = CallCollector()
    collector.add_response(_chunk({"text": "let me look"}))
    collector.add_response(_chunk({"functionCall": {"name": "read_file", "args": {"path": "a"}}}))
    collector.add_response(
        _chunk({"functionCall": {"id": "c1", "name": "run", "args": {"cmd": "ls"}}})
    )
    collector.add_response(_chunk({"functionCall": {"id": "c1", "args": {"cwd": "/"}}}))
    collector.add_response("not a response")
    assert [(c.name, c.args, c.call_id) for c in collector.calls] == [
        ("read_file", {"path": "a"}, None),
        ("run", {"cmd": "ls", "cwd": "/"}, "c1"),
    ]


def test_only_results_after_the_last_model_turn_are_new() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "old"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "old", "response": {}}}]},
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "id": "c9"}}]},
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "read_file", "id": "c9", "response": {"a": 1}}},
                    {"function_response": {"name": "grep", "response": {"hits": []}}},
                ],
            },
        ]
    }
    found = [(r.name, r.result, r.call_id) for r in trailing_results(body)]
    assert found == [("read_file", {"a": 1}, "c9"), ("grep", {"hits": []}, None)]
    assert trailing_results({"contents": [{"role": "model", "parts": []}]}) == []


def test_observation_ids_are_stable_per_turn_and_distinct_per_call() -> None:
    calls = [FunctionCall("read_file", {"p": 1}), FunctionCall("read_file", {"p": 2.0})]
    ids = observation_ids("s1", 1, calls)
    assert len(set(ids)) == 2
    assert all(len(i) <= 200 for i in ids)
    echoed = [FunctionCall("read_file", {"p": 1.0}), FunctionCall("read_file", {"p": 2})]
    assert observation_ids("s1", 1, echoed) == ids
    assert observation_ids("s1", 3, calls) != ids
    assert observation_ids("s2", 1, calls) != ids
    assert observation_ids("s1", 1, calls, conversation="other") != ids


def test_a_conversation_is_told_by_the_user_text_before_the_turn() -> None:
    setup = {"role": "user", "parts": [{"text": "Today's date is Thursday."}]}
    reply = {"role": "model", "parts": [{"text": "Got it."}]}
    task = {"role": "user", "parts": [{"text": "task a"}, {"inlineData": {"data": "eA=="}}]}
    calls = {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]}
    result = {"role": "user", "parts": [{"functionResponse": {"name": "read_file"}}]}
    asked = {"contents": [setup, reply, task]}
    answered = {"contents": [setup, {**reply, "parts": [{"text": "re-encoded"}]}, task, calls]}
    # The request that got the calls (turn 3) and the one that brings their results agree.
    assert conversation_key(asked, 3) == conversation_key(
        {"contents": [*answered["contents"], result]}, 3
    )
    other = {"contents": [setup, reply, {"role": "user", "parts": [{"text": "task b"}]}]}
    assert conversation_key(other, 3) != conversation_key(asked, 3)
    assert conversation_key(other, 2) == conversation_key(asked, 2)
    assert conversation_key({"contents": setup}, 1) == conversation_key({"contents": [setup]}, 1)
    assert conversation_key([1], 1) == conversation_key({"contents": []}, 5)


def test_results_match_by_id_first_then_by_name_in_order() -> None:
    calls = [
        FunctionCall("read_file", {}, "a"),
        FunctionCall("read_file", {}, None),
        FunctionCall("grep", {}, None),
    ]
    ids = ["id0", "id1", "id2"]
    results = [
        FunctionResult("read_file", 1, None),
        FunctionResult("read_file", 2, "a"),
        FunctionResult("grep", 3, None),
        FunctionResult("unknown_tool", 4, None),
    ]
    assert match_results(results, calls, ids) == ["id1", "id0", "id2", None]


def test_answered_turn_and_next_index() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "ls"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {}}}]},
        ]
    }
    turn = answered_turn(body)
    assert turn is not None
    assert turn[0] == 1
    assert [c.name for c in turn[1]] == ["ls"]
    assert next_turn_index(body) == 3
    assert answered_turn({"contents": []}) is None
