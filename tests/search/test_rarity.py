"""Common words stay out of the costly OR scans: pair and single-word tiers use the rare words."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.llm.embeddings import local_embedder
from app.search.queries import (
    COMMON_TERM_ROWS,
    all_tsquery_text,
    loose_tsquery_text,
    rare_terms,
    strict_tsquery_text,
)
from app.search.schemas import SearchRequest
from app.search.service import search
from app.search.term_stats import TERM_STATS, TermStats, lexeme
from tests.search.seed import in_session

SHARES = {"session": 0.4, "file": 0.2, "checkout": 0.01}


def test_rare_terms_leave_common_words_out_and_put_the_rarest_first() -> None:
    terms = ["why", "session", "checkout", "file", "zebra"]
    assert rare_terms(terms, SHARES) == ["zebra", "checkout"]
    assert rare_terms(terms) == ["session", "checkout", "file", "zebra"]  # no statistics


def test_pair_and_single_word_queries_use_only_rare_words() -> None:
    terms = ["session", "checkout", "file", "zebra"]
    assert strict_tsquery_text(terms, prefix_last=False, shares=SHARES) == (
        "('zebra' & 'checkout')"
    )
    assert loose_tsquery_text(terms, shares=SHARES) == "'zebra':* | 'checkout'"
    # Every word common: the single-word tier scans only the least common one, and a last word
    # that many rows hold is a whole word, not a prefix (as a prefix it adds every longer lexeme).
    assert loose_tsquery_text(["session", "file"], shares=SHARES) == "'file'"
    assert loose_tsquery_text(["zebra", "checkout"], shares=SHARES) == "'zebra' | 'checkout'"
    assert loose_tsquery_text(["checkout", "zebra"], shares=SHARES) == "'zebra':* | 'checkout'"
    assert strict_tsquery_text(["session", "file"], shares=SHARES) == ""
    # Past the two rarest, pair words are kept while together they are held by at most
    # PAIR_SHARE_BUDGET of the rows: the pair scan's cost grows with their postings x pairs.
    budget = {"alpha": 0.0, "beta": 0.02, "gamma": 0.02, "delta": 0.02, "omega": 0.03}
    assert strict_tsquery_text(list(budget), prefix_last=False, shares=budget) == (
        "('alpha' & 'beta') | ('alpha' & 'gamma') | ('beta' & 'gamma')"
    )
    assert strict_tsquery_text(["beta", "omega"], prefix_last=False, shares=budget) == (
        "('beta' & 'omega')"
    )
    # The all-words tier still requires every word; a prefix only for a one-word query.
    assert all_tsquery_text(terms) == "'session' & 'checkout' & 'file' & 'zebra'"
    assert all_tsquery_text(["deplo"]) == "'deplo':*"


@pytest.fixture
def common_word_index(db: psycopg.Connection[Any]) -> None:
    rows = COMMON_TERM_ROWS + 200
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, content, hash) "
        "SELECT '/p', 'memory', 'session note number ' || g || ' about ' || "
        "CASE WHEN g %% 100 = 0 THEN 'checkout' ELSE 'nothing' END, md5(g::text) "
        "FROM generate_series(1, %s) AS g",
        (rows,),
    )
    db.execute("ANALYZE memory_chunks")
    # The service caches the statistics per process for minutes; earlier tests read an empty
    # index's.
    TERM_STATS.snapshots.clear()


@pytest.mark.usefixtures("common_word_index")
def test_term_stats_read_shares_from_the_analyzed_index(database_url: str) -> None:
    stats = TermStats()

    async def shares(session: AsyncSession) -> dict[str, float]:
        return await stats.shares(session, ["sessions", "checkout", "zebra", "the"])

    found = in_session(database_url, shares)
    assert found["sessions"] == pytest.approx(1.0)  # stemmed to `session`, held by every row
    # `checkout` is in 1% of the rows: 12 rows, far below the cost bound, so it counts as rare.
    assert found["checkout"] == 0.0
    assert found["zebra"] == 0.0
    assert found["the"] == 0.0


def test_python_stems_match_postgres_english_stemmer(db: psycopg.Connection[Any]) -> None:
    words = ["sessions", "running", "entire", "handle", "using", "files", "order123", "bought"]
    rows = db.execute(
        "SELECT t, (ts_lexize('english_stem', t))[1] FROM unnest(%s::text[]) AS t", (words,)
    ).fetchall()
    assert {word: lexeme(word) for word in words} == dict(rows)


@pytest.mark.usefixtures("common_word_index")
def test_keyword_search_skips_rows_holding_only_a_common_word(database_url: str) -> None:
    async def run(session: AsyncSession) -> list[str]:
        request = SearchRequest(
            query="session checkout", project_path="/p", mode="keyword", limit=20
        )
        response = await search(session, request=request, embedder=local_embedder())
        return [r.content for r in response.results]

    found = in_session(database_url, run)
    # The 12 rows holding both words fill the all-words tier; the rest, holding only the common
    # `session`, are not candidates for the single-word tier either.
    assert len(found) == 12
    assert all("checkout" in content for content in found)
