"""`agmem search` against the test database."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.fakes.gemini import FakeResponse, fake_gemini
from tests.search.seed import Chunk, add_chunks


@pytest.fixture
def env(database_url: str, db: psycopg.Connection[Any], tmp_path: Any) -> dict[str, str]:
    add_chunks(
        database_url,
        [
            Chunk(
                "export function validateToken(raw) {}",
                path="src/auth.ts",
                start_line=3,
                end_line=9,
            ),
            Chunk("Garden notes: tomatoes (トマト) need sun.", path="garden.md", project="/other"),
        ],
    )
    return {"DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path), "AGMEM_LOG_LEVEL": "error"}


def test_prints_ranked_results_with_paths_and_lines(env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["search", "validate token", "--project", "/p"], env=env)
    assert result.exit_code == 0, result.output
    assert " 1. " in result.output
    assert "src/auth.ts#L3-L9" in result.output
    assert "garden.md" not in result.output


def test_a_project_search_finds_a_global_memory(env: dict[str, str]) -> None:
    runner = CliRunner()
    runner.invoke(
        cli, ["memory", "set", "ai.style", "tokens stay short", "--scope", "global"], env=env
    )

    result = runner.invoke(cli, ["search", "validate token", "--project", "/p"], env=env)

    assert result.exit_code == 0, result.output
    assert "ai.style: **tokens** stay short" in result.output  # the snippet, highlighted
    assert "src/auth.ts#L3-L9" in result.output


def test_a_kv_hit_is_cited_by_its_key(env: dict[str, str]) -> None:
    runner = CliRunner()
    # A key may hold `: `, so the citation cannot be read off the content's `key: value`.
    runner.invoke(cli, ["memory", "set", "deploy: step", "rsync the wheels", "-p", "/p"], env=env)

    result = runner.invoke(cli, ["search", "rsync wheels", "--project", "/p"], env=env)

    assert result.exit_code == 0, result.output
    assert "[kv] kv:deploy: step" in result.output
    body = json.loads(runner.invoke(cli, ["search", "rsync wheels", "--json"], env=env).output)
    assert body["results"][0]["path"] is None  # the contract's fields are unchanged
    assert "key" not in body["results"][0]


def test_json_output_and_modes(env: dict[str, str]) -> None:
    result = CliRunner().invoke(
        cli, ["search", "tomatoes", "--mode", "keyword", "--limit", "3", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert [hit["path"] for hit in body["results"]] == ["garden.md"]
    assert body["results"][0]["keywordRank"] == 1
    assert "(トマト)" in result.output  # as the API sends it, not as \u escapes


def test_terminal_escapes_in_a_result_do_not_reach_the_terminal(
    database_url: str, env: dict[str, str]
) -> None:
    # A transcript's tool output keeps its colour codes, a fetched page whatever it held: printed
    # raw, a result cleared the screen, retitled the window, or (cut at 200 characters inside a
    # colour) left the rest of the terminal red.
    add_chunks(
        database_url,
        [
            Chunk(
                "The flaky run printed \x1b[31mFAIL\x1b[0m in checkout_spec,\nthen \x1b[2J"
                "\x1b]0;retitled\x07\x1b[1m zebra quokka \x9b31m\x07 done",
                path="notes/\x1b[2Jbuild.md",
            )
        ],
    )

    result = CliRunner().invoke(cli, ["search", "zebra quokka", "-p", "/p"], env=env, color=True)

    assert result.exit_code == 0, result.output
    assert "notes/build.md#L1-L5" in result.output
    assert "printed FAIL in checkout_spec, then" in result.output
    assert "**quokka** done" in result.output
    assert not any(ord(ch) < 32 and ch != "\n" or 127 <= ord(ch) < 160 for ch in result.output)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "x", "--mode", "fuzzy"], "Invalid value for '--mode'"),
        (["search", "x", "--limit", "500"], "Invalid value for '--limit'"),
        (["search", "   "], "the query is empty"),
    ],
)
def test_user_errors_are_one_line(env: dict[str, str], args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_relative_project_is_made_absolute(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sync stores projects under their absolute path; `--project p` run from / means /p.
    monkeypatch.chdir("/")
    result = CliRunner().invoke(cli, ["search", "validate token", "--project", "p"], env=env)
    assert result.exit_code == 0, result.output
    assert "src/auth.ts#L3-L9" in result.output


def test_a_keyword_only_ranking_is_said_on_stderr(env: dict[str, str]) -> None:
    with fake_gemini() as fake:
        fake.on(
            ":batchEmbedContents",
            lambda _r: FakeResponse(503, {"error": {"code": 503, "message": "busy"}}),
        )
        gemini = {
            "GEMINI_API_KEY": "k",
            "AGMEM_GEMINI_BASE_URL": fake.url,
            "AGMEM_EMBEDDING_PROVIDER": "gemini",
        }
        result = CliRunner().invoke(cli, ["search", "validateToken"], env=env | gemini)

    assert result.exit_code == 0, result.output
    assert "src/auth.ts#L3-L9" in result.stdout
    assert "agmem: warning: keyword ranking only" in result.stderr


def test_no_results_for_a_project_folder_that_is_not_there_says_so(
    env: dict[str, str], tmp_path: Any
) -> None:
    # A mistyped --project was a plain "no results", exit 0: the same as a real project with
    # nothing on the subject. (The folder need not exist: rows keep the path a client sent.)
    typo = str(tmp_path / "shpo")

    result = CliRunner().invoke(cli, ["search", "validate token", "-p", typo], env=env)
    found = CliRunner().invoke(cli, ["search", "validate token", "-p", "/p"], env=env)
    nothing = CliRunner().invoke(cli, ["search", "validate token", "-p", str(tmp_path)], env=env)

    assert result.exit_code == 0
    assert result.stdout == "no results\n"
    assert result.stderr == (
        f"agmem: warning: there is no folder {typo}: is the --project path right?\n"
    )
    # Results, or a folder that is there: no second guessing.
    assert found.stderr == ""
    assert "src/auth.ts" in found.stdout
    assert nothing.stdout == "no results\n"
    assert nothing.stderr == ""
