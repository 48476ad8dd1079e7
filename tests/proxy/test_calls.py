"""Tool calls are found in answers (whole or in chunks) and results in the following request."""

from __future__ import annotations

from app.proxy.calls import CallCollector, trailing_results


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
