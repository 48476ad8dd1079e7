"""The offline extractive fallback: deterministic, and readable as prose."""

from __future__ import annotations

from app.llm.fallback import ObservationDigest, compress_extractive, summarize_extractive


def digest(name: str, kind: str, compressed: str, files: list[str]) -> ObservationDigest:
    return ObservationDigest(
        function_name=name,
        observation_type=kind,
        status="compressed",
        compressed=compressed,
        files=files,
    )


def test_summary_names_the_task_counts_files_and_results_without_doubled_punctuation() -> None:
    observations = [
        digest("read_file", "file_read", "read_file (file_read)\nResult: const key = 1;", ["a.ts"]),
        digest("replace", "file_write", "replace (file_write)\nResult: OK.", ["a.ts"]),
    ]

    summary = summarize_extractive(
        project_path="/p", user_prompt="fix the bug", observations=observations
    )

    assert summary.startswith(
        'This session in /p on "fix the bug" made 2 tool calls (1 file read, 1 file write).'
    )
    assert "It touched a.ts." in summary
    assert "Notable results: Result: const key = 1; Result: OK." in summary
    assert ";;" not in summary
    assert ".." not in summary


def test_compression_is_deterministic_and_keeps_errors() -> None:
    first = compress_extractive(
        function_name="run_shell_command",
        observation_type="code_execution",
        args={"command": "pytest -q"},
        result="collected 3 items\nE   AssertionError: expected 2\n1 failed, 2 passed",
    )
    again = compress_extractive(
        function_name="run_shell_command",
        observation_type="code_execution",
        args={"command": "pytest -q"},
        result="collected 3 items\nE   AssertionError: expected 2\n1 failed, 2 passed",
    )

    assert first == again
    assert "AssertionError: expected 2" in first


def test_summary_highlights_a_raw_observation_by_its_last_line_with_words() -> None:
    raw = 'Tool: read_file\nResult:\n{\n "content": "export const TTL = 60;"\n}'
    observations = [digest("read_file", "file_read", raw, ["a.ts"])]

    summary = summarize_extractive(project_path="/p", user_prompt=None, observations=observations)

    assert 'Notable results: "content": "export const TTL = 60;".' in summary
    assert "}." not in summary
