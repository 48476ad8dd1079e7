"""Per-row write costs behind the sync rate: `uv run python -m bench.sync_rows [--rows N]`.

Inserts the same N chunk-sized texts (with their wordllama vectors) into scratch tables that each
maintain one part of what `memory_chunks` maintains, so the share of every part is measured in
one run on one server: the generated `tsv` (old all-SQL split vs. terms split in Python), its GIN
index, the model's HNSW index, INSERT … unnest vs. COPY. Also times the Python side (embedding,
computing search terms). Uses DATABASE_URL when set, else a throwaway embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from app.db.embedded import start_embedded_postgres
from app.db.models import TSVECTOR_EXPRESSION
from app.index.embedding import vector_literal
from app.index.terms import search_terms
from app.llm.embeddings import local_embedder
from bench.scratch import scratch_folder
from bench.sync import markdown

OLD_TSV = (
    "to_tsvector('english'::regconfig, content) || "
    "to_tsvector('english'::regconfig, regexp_replace(regexp_replace(content, "
    "'([a-z0-9])([A-Z])', '\\1 \\2', 'g'), '[^[:alnum:]]+', ' ', 'g'))"
)
BATCH = 500

IDENTIFIERS = (
    "validateToken validate_token auth/jwt.ts src/app/main.py getUserById HTTPServer "
    "parse_config.yaml retryWithBackoff api/v1/sessions"
).split()


def texts(count: int, seed: int) -> list[str]:
    """Chunk-sized (~1.6 KB) markdown texts with a few identifiers, like the sync benchmark's."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        body = markdown(rng, 2)
        words = body.split(" ")
        for _ in range(4):
            words.insert(rng.randrange(len(words)), rng.choice(IDENTIFIERS))
        out.append(" ".join(words)[:1600])
    return out


@contextmanager
def database() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url.replace("postgresql+psycopg://", "postgresql://")
        return
    with scratch_folder("agmem-bench-rows-pg-") as folder:
        yield start_embedded_postgres(folder / "pgdata")


def table_ddl(name: str, *, tsv: str | None, gin: str | None, hnsw: bool) -> list[str]:
    columns = "id bigserial PRIMARY KEY, content text NOT NULL, search_terms text, "
    columns += "embedding vector, model varchar(200)"
    if tsv:
        columns += f", tsv tsvector GENERATED ALWAYS AS ({tsv}) STORED"
    ddl = ["CREATE EXTENSION IF NOT EXISTS vector", f"DROP TABLE IF EXISTS {name}"]
    ddl.append(f"CREATE TABLE {name} ({columns})")
    if gin is not None:
        ddl.append(f"CREATE INDEX ON {name} USING gin (tsv) {gin}")
    if hnsw:
        ddl.append(
            f"CREATE INDEX ON {name} USING hnsw ((embedding::halfvec(256)) halfvec_cosine_ops) "
            "WITH (m = 16, ef_construction = 64) WHERE model = 'm'"
        )
    return ddl


def insert_unnest(cur: psycopg.Cursor, name: str, rows: list[tuple[str, str, str | None]]) -> None:
    contents, terms, vectors = (list(c) for c in zip(*rows, strict=True))
    cur.execute(
        f"INSERT INTO {name} (content, search_terms, embedding, model) "
        "SELECT c, t, CAST(v AS vector), CASE WHEN v IS NULL THEN NULL ELSE 'm' END "
        "FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(c, t, v)",
        (contents, terms, vectors),
    )


def insert_copy(cur: psycopg.Cursor, name: str, rows: list[tuple[str, str, str | None]]) -> None:
    with cur.copy(f"COPY {name} (content, search_terms, embedding, model) FROM STDIN") as copy:
        for content, terms, vector in rows:
            copy.write_row((content, terms, vector, "m" if vector is not None else None))


def timed(
    url: str,
    name: str,
    ddl: list[str],
    rows: list[tuple[str, str, str | None]],
    write: Callable[[psycopg.Cursor, str, list[tuple[str, str, str | None]]], None],
    after: list[str],
) -> float:
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        for statement in ddl:
            cur.execute(statement)
        started = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            with conn.transaction():
                write(cur, name, rows[start : start + BATCH])
        for statement in after:
            cur.execute(statement)
        seconds = time.perf_counter() - started
        cur.execute(f"DROP TABLE {name}")
    return seconds


def main(args: argparse.Namespace) -> None:
    corpus = texts(args.rows, args.seed)
    embedder = local_embedder()
    started = time.perf_counter()
    vectors = [vector_literal(v) for v in embedder.embed_documents(corpus)]
    embed_s = time.perf_counter() - started
    started = time.perf_counter()
    terms = [search_terms(t) for t in corpus]
    terms_s = time.perf_counter() - started
    n = len(corpus)
    print(
        f"{n} texts, mean {sum(map(len, corpus)) / n:.0f} chars, search_terms mean "
        f"{sum(map(len, terms)) / n:.0f} chars"
    )
    print(f"{'python: embed (wordllama)':<48} {n / embed_s:9.0f} rows/s")
    print(f"{'python: search_terms':<48} {n / terms_s:9.0f} rows/s")
    with_vec: list[tuple[str, str, str | None]] = list(zip(corpus, terms, vectors, strict=True))
    without: list[tuple[str, str, str | None]] = [
        (c, t, None) for c, t in zip(corpus, terms, strict=True)
    ]
    variants: list[tuple[str, dict[str, object], list[tuple[str, str, str | None]], bool]] = [
        ("plain: no tsv, no index", {"tsv": None, "gin": None, "hnsw": False}, without, False),
        ("old tsv, no index", {"tsv": OLD_TSV, "gin": None, "hnsw": False}, without, False),
        (
            "new tsv, no index",
            {"tsv": TSVECTOR_EXPRESSION, "gin": None, "hnsw": False},
            without,
            False,
        ),
        ("old tsv + GIN", {"tsv": OLD_TSV, "gin": "", "hnsw": False}, without, False),
        ("new tsv + GIN", {"tsv": TSVECTOR_EXPRESSION, "gin": "", "hnsw": False}, without, False),
        (
            "new tsv + GIN (fastupdate off)",
            {"tsv": TSVECTOR_EXPRESSION, "gin": "WITH (fastupdate = off)", "hnsw": False},
            without,
            False,
        ),
        ("vector + HNSW only", {"tsv": None, "gin": None, "hnsw": True}, with_vec, False),
        (
            "old schema: old tsv + GIN + HNSW",
            {"tsv": OLD_TSV, "gin": "", "hnsw": True},
            with_vec,
            False,
        ),
        (
            "new schema: new tsv + GIN + HNSW",
            {"tsv": TSVECTOR_EXPRESSION, "gin": "", "hnsw": True},
            with_vec,
            False,
        ),
        ("new schema, COPY", {"tsv": TSVECTOR_EXPRESSION, "gin": "", "hnsw": True}, with_vec, True),
        # The HNSW index created after the load (timed), as a bulk build instead of inserts.
        (
            "new schema, COPY, HNSW built after the load",
            {"tsv": TSVECTOR_EXPRESSION, "gin": "", "hnsw": False},
            with_vec,
            True,
        ),
    ]
    with database() as url:
        for label, options, rows, copy in variants:
            ddl = table_ddl("bench_rows", **options)  # type: ignore[arg-type]
            after = table_ddl("bench_rows", tsv=None, gin=None, hnsw=True)[-1:]
            built_after = label.endswith("after the load")
            seconds = timed(
                url,
                "bench_rows",
                ddl,
                rows,
                insert_copy if copy else insert_unnest,
                after if built_after else [],
            )
            print(f"{label:<48} {n / seconds:9.0f} rows/s  {seconds / n * 1000:6.3f} ms/row")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=11)
    main(parser.parse_args())
