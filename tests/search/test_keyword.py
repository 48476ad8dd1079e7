"""The keyword branch: code-aware matching, OR semantics, ranking, prefixes, hostile input."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.search.queries import (
    SearchFilters,
    all_tsquery_text,
    keyword_terms,
    search_statement,
    strict_tsquery_text,
    tsquery_text,
)
from tests.search.seed import Chunk, add_chunks, in_session

CODE = [
    Chunk("export function validateToken(raw: string) { return verify(raw) }", path="a.ts"),
    Chunk("def validate_token(value):\n    return decode(value)", path="b.py"),
    Chunk("The signing helpers live in auth/jwt.ts next to the session code.", path="c.md"),
    Chunk("We deploy the frontend with a blue green switch on Fridays.", path="d.md"),
    Chunk("Unrelated paragraph about coffee and the office plants.", path="e.md"),
]


def keyword(client: TestClient, query: str, **extra: Any) -> list[dict[str, Any]]:
    response = client.post(
        "/api/search", json={"query": query, "mode": "keyword", "projectPath": "/p", **extra}
    )
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def paths(results: list[dict[str, Any]]) -> list[str]:
    return [result["path"] for result in results]


def test_code_identifiers_and_paths_are_found_by_their_parts(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CODE)
    assert set(paths(keyword(client, "validate token"))[:2]) == {"a.ts", "b.py"}
    assert set(paths(keyword(client, "token"))) == {"a.ts", "b.py"}
    assert paths(keyword(client, "jwt")) == ["c.md"]
    assert paths(keyword(client, "auth/jwt.ts")) == ["c.md"]
    assert set(paths(keyword(client, "validateToken"))[:2]) == {"a.ts", "b.py"}


def test_natural_questions_use_or_semantics_ranked_by_matches(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CODE)
    # No chunk holds every word of the question; an AND query would return nothing.
    results = keyword(client, "how do we deploy the frontend to production servers?")
    assert paths(results)[0] == "d.md"
    assert results[0]["keywordRank"] == 1
    assert results[0]["vectorRank"] is None
    assert "**deploy**" in results[0]["snippet"]


def test_snippet_highlights_do_not_nest_with_the_texts_own_bold(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, [Chunk("## Limits\n\n**Rate limiting** applies per API key.")])
    (result,) = keyword(client, "rate limiting")
    assert "**Rate** **limiting** applies" in result["snippet"]
    assert "***" not in result["snippet"]
    assert result["content"].startswith("## Limits\n\n**Rate limiting**")  # content untouched


def test_a_row_whose_text_lacks_the_query_words_shows_its_opening_not_eight_words(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # Without a match in the text, ts_headline returns its first MinWords (8) words: a row found
    # by its vector alone, or by an identifier's parts (`refreshSessionCookie` is one word to the
    # english parser, its parts are in `search_terms`), was shown as eight words.
    coffee = (
        "The coffee machine on the third floor is descaled every Monday morning by the "
        "facilities team, and the office plants are watered on Thursdays."
    )
    code = (
        "export function refreshSessionCookie(res: Response) { return rotate(res) } "
        "// called after each privileged action, before the answer is sent"
    )
    add_chunks(database_url, [Chunk(coffee, path="e.md"), Chunk(code, path="a.ts")])
    for mode in ("vector", "hybrid", "weighted"):
        response = client.post("/api/search", json={"query": "espresso maker", "mode": mode})
        by_path = {result["path"]: result for result in response.json()["results"]}
        assert by_path["e.md"]["snippet"] == coffee, mode
    (found,) = keyword(client, "refresh session cookie")
    assert found["snippet"] == code
    long = "word " * 100 + "refreshSessionCookie"
    add_chunks(database_url, [Chunk(long, path="f.md")])
    snippets = {r["path"]: r["snippet"] for r in keyword(client, "refresh session cookie")}
    assert snippets["f.md"] == long[:300]
    (highlighted,) = keyword(client, "privileged")  # a match in the text is highlighted as before
    assert "**privileged**" in highlighted["snippet"]


def test_an_unhighlighted_snippet_drops_the_texts_own_bold(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # `**` in a snippet marks a matching word; the text's own bold read as matches that were not.
    text = "## Quota\n\nThe TUI shows **live remaining quota** for each provider, every minute."
    add_chunks(database_url, [Chunk(text, path="q.md")])
    plain = text.replace("**", "")
    for query in ("usage limits dashboard", "🔥 ✅"):  # by its vector alone; a query of no words
        response = client.post("/api/search", json={"query": query, "mode": "vector"})
        (result,) = response.json()["results"]
        assert result["snippet"] == plain, query
        assert result["content"] == text


def test_more_matching_terms_rank_higher(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(
        database_url,
        [
            Chunk("retry the upload", path="one.md"),
            Chunk("retry the upload with exponential backoff", path="all.md"),
        ],
    )
    assert paths(keyword(client, "upload retry backoff")) == ["all.md", "one.md"]


def test_last_word_matches_as_a_prefix(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CODE)
    assert paths(keyword(client, "frontend deplo")) == ["d.md"]
    assert paths(keyword(client, "deplo frontend")) == ["d.md"]  # only the last word widens
    assert keyword(client, "deplo") == [] or paths(keyword(client, "deplo")) == ["d.md"]


@pytest.mark.parametrize(
    "query",
    [
        "'",
        '"validate token"',
        "token & | ! ( ) : * ",
        "jwt:* | !token",
        "back\\slash \\\\ token\\",
        "🔥🔥 token 🚀",
        "🔥",
        "<->",
        "a' OR 1=1; --",
        "(((((",
        "x" * 3900,
        "naïve café token",
        "\x00nul",
    ],
)
def test_hostile_queries_are_answered_not_crashed(
    client: TestClient, database_url: str, db: psycopg.Connection[Any], query: str
) -> None:
    add_chunks(database_url, CODE)
    for mode in ("keyword", "hybrid", "vector", "weighted"):
        response = client.post("/api/search", json={"query": query, "mode": mode})
        assert response.status_code == 200, (mode, response.text)
        assert isinstance(response.json()["results"], list)
    if "token" in query:
        assert {"a.ts", "b.py"} <= set(paths(keyword(client, query)))


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_queries_are_a_clear_400(client: TestClient, query: str) -> None:
    response = client.post("/api/search", json={"query": query})
    assert response.status_code == 400
    assert response.json()["error"] == "EmptySearchQuery"


def test_query_terms_never_carry_operators() -> None:
    terms = keyword_terms("validateToken('x') && !auth/jwt.ts:* \\ 'q'")
    assert terms == ["validate", "token", "x", "auth", "jwt", "ts", "q"]
    assert tsquery_text(["deploy", "fron"]) == "'deploy' | 'fron':*"
    assert tsquery_text(["deploy", "fr"]) == "'deploy' | 'fr'"
    assert tsquery_text([]) == ""


def test_stop_word_list_matches_postgres(db: psycopg.Connection[Any]) -> None:
    from app.search.queries import ENGLISH_STOP_WORDS

    rows = db.execute(
        "SELECT w FROM unnest(%s::text[]) AS w WHERE to_tsvector('english', w) = ''::tsvector",
        (sorted(ENGLISH_STOP_WORDS),),
    ).fetchall()
    assert {row[0] for row in rows} == ENGLISH_STOP_WORDS


def test_rows_matching_more_words_outrank_single_word_matches(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(
        database_url,
        [Chunk("cache " * 30, path=f"cache{n}.md") for n in range(5)]
        + [Chunk("the cache warmup runs lazily", path="both.md")],
    )
    results = keyword(client, "why is the cache warmup slow")
    assert paths(results)[0] == "both.md"
    assert len(results) == 6
    assert strict_tsquery_text(["why", "cache", "warmup", "slow"]) == (
        "('cache' & 'warmup') | ('cache' & 'slow':*) | ('warmup' & 'slow':*)"
    )
    assert strict_tsquery_text(["the", "cache"]) == ""


TIERS = [Chunk(f"invoice retry backoff note {n}", path=f"all{n}.md") for n in range(5)] + [
    Chunk("invoice retry without the third word", path="two.md"),
    Chunk("invoice only", path="one.md"),
]


def test_tiers_rank_all_words_then_two_then_one(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, TIERS)
    found = paths(keyword(client, "invoice retry backoff"))
    assert set(found[:5]) == {f"all{n}.md" for n in range(5)}
    assert found[5:] == ["two.md", "one.md"]


def test_a_full_all_words_tier_skips_the_pair_and_single_word_scans(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The OR of every pair is the costly GIN scan; with enough rows holding every word it must
    # not run at all.
    add_chunks(database_url, TIERS)
    terms = keyword_terms("invoice retry backoff")
    shape = SearchFilters("/p").shape()
    statement = search_statement("keyword", "m", 256, shape, False, True, True)
    params = {
        **SearchFilters("/p").params(),
        "qvec": None,
        "tsq": tsquery_text(terms),
        "tsq_strict": strict_tsquery_text(terms),
        "tsq_all": all_tsquery_text(terms),
        "tsq_loose": tsquery_text(terms),
        "limit": 1,
        "candidates": 4,
        "min_score": -1.0,
        "vector_floor": 0.0,
        "keyword_floor": 0.0,
        "rrf_k": 60.0,
        "w_vector": 1.0,
        "w_keyword": 1.0,
        "rank_norm": 5,
        "rank_scale": 1.0,
    }

    async def explain(session: AsyncSession) -> Any:
        explained = text("EXPLAIN (ANALYZE, FORMAT JSON) " + str(statement))
        rows = await session.execute(explained, params)
        return rows.scalar_one()[0]["Plan"]

    def scans(node: dict[str, Any]) -> list[tuple[str, int]]:
        """(tsquery condition, loops) of every node that tests `tsv @@`."""
        found = [
            (str(value), node["Actual Loops"])
            for key, value in node.items()
            if key in {"Filter", "Recheck Cond", "Index Cond"} and "tsv @@" in str(value)
        ]
        for child in node.get("Plans", []):
            found.extend(scans(child))
        return found

    tested = scans(in_session(database_url, explain))
    ran = {cond for cond, loops in tested if loops > 0}
    assert any("''invoic'' & ''retri'' & ''backoff''" in cond for cond in ran), tested
    assert not any(" | " in cond for cond in ran), tested  # neither the pairs nor the OR ran
    assert any(" | " in cond for cond, _ in tested), tested


def test_a_short_text_is_shown_whole_with_its_matches_highlighted(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # ts_headline's fragments start at a word of the match's cover: a one-line observation was
    # shown as "shell_command cargo test backup …" (its tool's `run_` cut off), a one-line note as
    # "note about Kafka …" (its first word gone), though the whole text fit in a snippet.
    observation = "run_shell_command cargo test backup\nErrors: FAILED: SlowDown 503 from S3"
    note = "## New note about Kafka consumer lag tuning"
    add_chunks(database_url, [Chunk(observation, path="o.txt"), Chunk(note, path="n.md")])

    (shell,) = keyword(client, "throttled backup")
    (kafka,) = keyword(client, "kafka lag")

    assert shell["snippet"] == (
        "run_shell_command cargo test **backup**\nErrors: FAILED: SlowDown 503 from S3"
    )
    assert kafka["snippet"] == "## New note about **Kafka** consumer **lag** tuning"
