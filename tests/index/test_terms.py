from __future__ import annotations

import asyncio
import random
import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.index.terms import index_terms, search_terms
from app.index.writer import replace_index_text
from tests.sync.helpers import CountingEmbedder, make_project, run_sync

TESTDATA = Path("/work/shared/testdata")
if not TESTDATA.exists():
    TESTDATA = Path(__file__).resolve().parents[3] / "shared" / "testdata"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("call validateToken(req) first", "validate Token req"),
        ("see auth/jwt.ts and validate_token.", "auth jwt ts validate token"),
        ("HTTPServer2Go getUserById", "HTTPServer2 Go get User By Id"),
        ("plain words, nothing (here). Done", ""),
        ("__init__ and api/v1/sessions", "api v1 sessions"),  # the parser splits `__init__`
        ("straße/weg", "straße weg"),
    ],
)
def test_search_terms_split_only_identifier_like_tokens(source: str, expected: str) -> None:
    assert search_terms(source) == expected


def test_replace_index_text_fills_search_terms_and_tsv_finds_the_parts(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    memory_id = uuid.uuid4()

    async def go() -> None:
        engine = make_async_engine(database_url)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                await session.execute(
                    text(
                        "INSERT INTO memories (id, scope, key, value) "
                        "VALUES (:id, 'global', 'k', '1')"
                    ),
                    {"id": memory_id},
                )
                await replace_index_text(
                    session,
                    project_path="/p",
                    source="kv",
                    texts=["we call validateToken in auth/jwt.ts"],
                    memory_id=memory_id,
                )
        finally:
            await engine.dispose()

    asyncio.run(go())
    (terms,) = db.execute("SELECT search_terms FROM memory_chunks").fetchone() or (None,)
    assert terms == "validate Token auth jwt ts"
    for query in ("validate & token", "jwt", "auth"):
        hits = db.execute(
            "SELECT count(*) FROM memory_chunks WHERE tsv @@ to_tsquery('english', %s)", (query,)
        ).fetchone()
        assert hits == (1,), query


def test_sync_fills_search_terms_of_every_chunk(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    (project / "memory" / "code.md").write_text("# Code\n\nThe handler calls parseConfig_v2.\n")

    run_sync(database_url, settings, CountingEmbedder(), project)

    rows = db.execute("SELECT content, search_terms FROM memory_chunks").fetchall()
    assert rows
    # Chunks cut from inside a markdown section also carry its titles, after the parts.
    assert all(terms.startswith(search_terms(content)) for content, terms in rows)
    hit = db.execute(
        "SELECT file_path FROM memory_chunks WHERE tsv @@ to_tsquery('english', 'parse & config')"
    ).fetchall()
    assert [Path(p).name for (p,) in hit] == ["code.md"]


def test_index_terms_add_the_section_titles_and_their_parts() -> None:
    assert index_terms("call validateToken") == search_terms("call validateToken")
    assert index_terms("plain words", "Guide > Error Handling") == "Guide > Error Handling"
    assert index_terms("call validateToken", "Code > parseConfig") == (
        "validate Token Code > parseConfig parse Config"
    )


def test_sync_finds_a_mid_section_chunk_by_its_section_title(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    body = "".join(f"Sentence {n} says how failures are wrapped.\n" for n in range(400))
    (project / "memory" / "guide.md").write_text(f"# Guide\n\n## Retry Budget\n\n{body}")

    run_sync(database_url, settings, CountingEmbedder(), project)

    rows = db.execute(
        "SELECT content FROM memory_chunks WHERE file_path LIKE '%%guide.md' "
        "AND tsv @@ to_tsquery('english', 'retry & budget')"
    ).fetchall()
    assert len(rows) > 1  # the section is longer than one chunk
    assert any("Retry Budget" not in content for (content,) in rows)


def _reference_terms(text: str) -> str:
    """search_terms with the plain three-alternative spot regex the fast one must agree with."""
    spot_regex = re.compile(r"[^\s\w]\w|_\w|[a-z0-9][A-Z]")
    out: list[str] = []
    taken = 0
    for spot in spot_regex.finditer(text):
        at = spot.start()
        if at < taken:
            continue
        low = max(taken, at - 200)
        start = max(low - 1, text.rfind(" ", low, at), text.rfind("\n", low, at)) + 1
        end = re.compile(r"\S*").match(text, at).end()  # type: ignore[union-attr]
        taken = end
        parts = re.sub(r"[\W_]+", " ", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text[start:end]))
        if " " in parts.strip():
            out.append(parts.strip())
    return " ".join(out)


def test_search_terms_agree_with_the_plain_spot_regex_on_real_and_random_text() -> None:
    rng = random.Random(7)
    texts = [p.read_text(encoding="utf-8") for p in sorted(TESTDATA.glob("memory-md/*.md"))]
    # Spaces rare in the second: tokens longer than the 200-character look-back.
    for alphabet in ("aZ_.-/ \n9é日Bq(x)", "aaaaZ_.-/9é日Bq(x)" * 60 + " "):
        texts += ["".join(rng.choices(alphabet, k=rng.randint(0, 600))) for _ in range(250)]
    assert len(texts) > 500
    for source in texts:
        assert search_terms(source) == _reference_terms(source), source[:80]
