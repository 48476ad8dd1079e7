from __future__ import annotations

import os
import random
import shutil
import string
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.config import Settings
from app.sync import queries, reading
from tests.sync.helpers import TESTDATA, CountingEmbedder, make_project, run_sync


def chunk_rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT file_path, source, start_line, end_line, hash, model, embedding IS NOT NULL "
        "FROM memory_chunks ORDER BY file_path, start_line, id"
    ).fetchall()


def test_initial_sync_indexes_memory_and_transcripts_with_vectors(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()

    report = run_sync(database_url, settings, embedder, project)

    assert report.files_scanned == 6
    assert report.files_changed == 6
    assert report.errors == []
    files = db.execute(
        "SELECT path, source, chunk_count FROM memory_files ORDER BY path"
    ).fetchall()
    assert {(Path(p).name, s) for p, s, _ in files} == {
        ("MEMORY.md", "memory"),
        ("a.md", "memory"),
        ("nftbk_memory-bank_progress.md", "memory"),
        ("nftbk_memory-bank_systemPatterns.md", "memory"),
        ("small.jsonl", "sessions"),
        ("legacy.json", "sessions"),
    }
    assert all(Path(p).is_absolute() for p, _, _ in files)
    rows = chunk_rows(db)
    assert len(rows) == report.chunks_written == sum(c for _, _, c in files)
    assert all(r[5] == embedder.identity and r[6] for r in rows)
    hashes = db.execute(
        "SELECT hash, encode(sha256(convert_to(content, 'UTF8')), 'hex') FROM memory_chunks"
    )
    assert all(a == b for a, b in hashes)
    # Chunk lines point into the file on disk: the chunk's first line is on its start line.
    for path, _source, start, _end, content_first in db.execute(
        "SELECT file_path, source, start_line, end_line, split_part(content, E'\\n', 1) "
        "FROM memory_chunks WHERE source = 'memory'"
    ):
        lines = Path(path).read_text().split("\n")
        assert content_first.strip() in lines[start - 1]
    transcript = db.execute(
        "SELECT min(start_line), max(end_line) FROM memory_chunks "
        "WHERE file_path LIKE '%small.jsonl'"
    ).fetchone()
    assert transcript == (3, 9)


def test_no_change_resync_reads_nothing_writes_nothing_and_embeds_nothing(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    calls = embedder.calls
    xid = db.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()

    report = run_sync(database_url, settings, embedder, project)

    assert embedder.calls == calls
    assert (report.files_scanned, report.files_changed, report.files_touched) == (6, 0, 0)
    assert (report.files_deleted, report.chunks_written, report.embeddings_computed) == (0, 0, 0)
    # No transaction that wrote anything: the xid counter moved only by our own probe.
    xid_after = db.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert xid is not None
    assert xid_after is not None
    assert xid_after[0] == xid[0] + 1


def test_touched_but_unchanged_file_only_records_its_mtime(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    ids_before = [r[0] for r in db.execute("SELECT id FROM memory_chunks ORDER BY id")]
    target = project / "memory" / "a.md"
    os.utime(target, (1_000_000, 1_000_000))

    report = run_sync(database_url, settings, embedder, project)

    assert (report.files_changed, report.files_touched, report.chunks_written) == (0, 1, 0)
    assert [r[0] for r in db.execute("SELECT id FROM memory_chunks ORDER BY id")] == ids_before
    mtime = db.execute("SELECT mtime FROM memory_files WHERE path = %s", (str(target),))
    assert mtime.fetchone() == (1_000_000.0,)


def test_changed_file_replaces_only_its_chunks_and_cache_serves_unchanged_text(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    target = project / "memory" / "a.md"
    other = db.execute(
        "SELECT id FROM memory_chunks WHERE file_path <> %s ORDER BY id", (str(target),)
    ).fetchall()
    old_text = target.read_text()
    # A line added on top moves every chunk down a line: none is kept as it was, and their
    # texts come from the cache.
    target.write_text(
        "Updated today.\n" + old_text + "\n\n## Added\n\nThe deploy key rotates on Fridays.\n"
    )
    embedded = embedder.texts_embedded

    report = run_sync(database_url, settings, embedder, project)

    assert (report.files_changed, report.files_deleted) == (1, 0)
    assert report.embeddings_computed == embedder.texts_embedded - embedded
    assert report.embeddings_computed <= 2  # the unchanged sections come from the cache
    assert report.embeddings_cached >= 1
    assert (
        db.execute(
            "SELECT id FROM memory_chunks WHERE file_path <> %s ORDER BY id", (str(target),)
        ).fetchall()
        == other
    )
    last = db.execute(
        "SELECT content, end_line FROM memory_chunks WHERE file_path = %s ORDER BY start_line DESC "
        "LIMIT 1",
        (str(target),),
    ).fetchone()
    assert last is not None
    assert "Fridays" in last[0]
    assert last[1] == len(target.read_text().split("\n")) - 1


def test_edit_keeps_the_rows_of_the_chunks_it_did_not_change(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    target = project / "memory" / "a.md"
    query = "SELECT id, start_line, end_line, hash FROM memory_chunks WHERE file_path = %s"
    before = db.execute(query + " ORDER BY start_line, id", (str(target),)).fetchall()
    assert len(before) > 2
    target.write_text(target.read_text() + "\n## Added\n\nThe deploy key rotates on Fridays.\n")
    embedded = embedder.texts_embedded

    report = run_sync(database_url, settings, embedder, project)

    after = db.execute(query + " ORDER BY start_line, id", (str(target),)).fetchall()
    kept = [row for row in after if row in before]
    written = [row for row in after if row not in before]
    assert report.chunks_kept == len(kept) >= len(before) - 1
    assert report.chunks_written == len(written) >= 1
    assert embedder.texts_embedded - embedded == report.embeddings_computed <= len(written)
    # The file's rows are exactly what a full re-chunk gives: only unchanged ones were kept.
    forced = run_sync(database_url, settings, embedder, project, force=True)
    rewritten = db.execute(query + " ORDER BY start_line, id", (str(target),)).fetchall()
    assert [r[1:] for r in rewritten] == [r[1:] for r in after]
    assert not set(rewritten) & set(after)  # --force rewrites every row
    assert forced.chunks_kept == 0
    count = db.execute("SELECT chunk_count FROM memory_files WHERE path = %s", (str(target),))
    assert count.fetchone() == (len(after),)


def test_a_renamed_heading_rewrites_the_rows_whose_section_titles_changed(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "memory").mkdir(parents=True)
    note = project / "memory" / "note.md"
    paragraphs = "\n\n".join(
        f"Paragraph {n} about the deploy pipeline, its retries and its queue. " * 6
        for n in range(12)
    )
    note.write_text(f"# Alpha\n\n## Part one\n\n{paragraphs}\n")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    terms = "SELECT count(*), count(*) FILTER (WHERE search_terms LIKE %s) FROM memory_chunks"
    count, alpha = db.execute(terms, ("%Alpha%",)).fetchone() or (0, 0)
    assert count > 3
    assert alpha >= count - 1  # the first chunk holds the heading in its text, not its terms

    note.write_text(note.read_text().replace("# Alpha", "# Gamma"))  # same lines, same text below
    report = run_sync(database_url, settings, embedder, project)

    assert db.execute(terms, ("%Alpha%",)).fetchone() == (count, 0)
    assert db.execute(terms, ("%Gamma%",)).fetchone() == (count, alpha)
    assert report.chunks_kept == 0  # every chunk's section titles changed
    assert report.embeddings_computed <= 1  # only the first chunk's text changed


def test_kept_rows_without_a_vector_get_one_after_an_edit(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    embedder.fail = True
    run_sync(database_url, settings, embedder, project)
    target = project / "memory" / "a.md"
    query = "SELECT id FROM memory_chunks WHERE file_path = %s AND embedding IS NULL ORDER BY id"
    unembedded = db.execute(query, (str(target),)).fetchall()
    assert len(unembedded) > 2
    embedder.fail = False
    target.write_text(target.read_text() + "\n## Added\n\nThe deploy key rotates on Fridays.\n")

    report = run_sync(database_url, settings, embedder, project)

    assert report.chunks_kept >= len(unembedded) - 1
    assert report.errors == []
    # The kept rows (same ids) now have vectors, and so does every other chunk of the project.
    assert db.execute(
        "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL OR model IS NULL"
    ).fetchone() == (0,)
    kept = db.execute(
        "SELECT count(*) FROM memory_chunks WHERE id = ANY(%s)", ([r[0] for r in unembedded],)
    ).fetchone()
    assert kept == (report.chunks_kept,)


def test_deleted_file_removes_its_chunks(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    run_sync(database_url, settings, CountingEmbedder(), project)
    (project / "sessions" / "small.jsonl").unlink()

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert report.files_deleted == 1
    left = db.execute("SELECT count(*) FROM memory_chunks WHERE file_path LIKE '%small.jsonl'")
    assert left.fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (5,)


def test_identical_chunks_in_two_files_cost_one_embedding(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "memory").mkdir(parents=True)
    source = TESTDATA / "memory-md" / "gemini-cli_GEMINI.md"
    shutil.copy(source, project / "memory" / "one.md")
    shutil.copy(source, project / "memory" / "two.md")
    embedder = CountingEmbedder()

    report = run_sync(database_url, settings, embedder, project)

    rows = db.execute("SELECT count(*), count(DISTINCT hash) FROM memory_chunks").fetchone()
    assert rows is not None
    assert rows[0] == 2 * rows[1]
    assert embedder.texts_embedded == rows[1] == report.embeddings_computed


def test_force_rewrites_everything_from_the_cache(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    first = run_sync(database_url, settings, embedder, project)
    calls = embedder.calls

    again = run_sync(database_url, settings, embedder, project, force=True)

    assert again.files_changed == 6
    assert again.chunks_written == first.chunks_written
    assert embedder.calls == calls
    assert again.embeddings_cached == first.embeddings_computed


def test_provider_failure_writes_chunks_without_vectors_and_reports_it(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    embedder.fail = True

    report = run_sync(database_url, settings, embedder, project)

    assert report.chunks_written > 0
    assert len(report.errors) == 1
    assert "provider down" in report.errors[0]
    rows = db.execute(
        "SELECT count(*) FILTER (WHERE embedding IS NULL), count(*) FROM memory_chunks"
    )
    row = rows.fetchone()
    assert row is not None
    assert row[0] == row[1] == report.chunks_written


def test_file_grown_over_the_cap_loses_its_chunks_and_is_reported(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from tests.conftest import make_settings

    project = make_project(tmp_path / "proj")
    (project / "sessions" / "legacy.json").unlink()  # the one test file over 8,000 bytes
    settings = make_settings(home=tmp_path / "h", sync_max_file_bytes=8000)
    first = run_sync(database_url, settings, CountingEmbedder(), project)
    assert first.skipped == []
    big = project / "memory" / "a.md"
    big.write_text(big.read_text() + "x" * 1000)

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert [(s.path, s.reason) for s in report.skipped] == [
        (str(big), f"over the size cap ({big.stat().st_size} > 8000 bytes)")
    ]
    assert report.files_deleted == 1
    left = db.execute("SELECT count(*) FROM memory_chunks WHERE file_path = %s", (str(big),))
    assert left.fetchone() == (0,)


def test_private_span_across_chunks_is_not_indexed_and_lines_hold(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A span longer than a chunk: stripped chunk by chunk, the chunks after the one holding
    # `<private>` showed its inside (chunks overlap and each was sanitized alone).
    project = tmp_path / "proj"
    project.mkdir()
    secret = [f"line {i}: the zebracorn password is hunter{i} and more words" for i in range(60)]
    lines = ["# Notes", "", "Use `<private>` tags to hide text.", "Ours: `<memory>x</memory>`."]
    lines += ["<private>", *secret]
    lines += ["</private>", "", "## After", "", "Public text after the span."]
    (project / "MEMORY.md").write_text("\n".join(lines) + "\n")

    run_sync(database_url, settings, CountingEmbedder(), project)

    rows = db.execute("SELECT content, start_line, end_line FROM memory_chunks").fetchall()
    text = "\n".join(r[0] for r in rows)
    assert "zebracorn" not in text
    assert "Use `<private>` tags to hide text." in text  # a tag in a code span is text
    assert "<memory>" not in text  # our own block goes anyway: it would nest in the context
    # The span's lines are blank, not gone: later lines keep their numbers.
    assert [end for content, _, end in rows if "Public text after" in content] == [len(lines)]


def test_private_key_longer_than_a_chunk_is_not_indexed_and_lines_hold(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A 4096-bit RSA key is ~3.2 KB, two chunks: redacted chunk by chunk, the chunk holding
    # `-----BEGIN` hid the rest of itself, and the next ones stored the key's other lines.
    project = tmp_path / "proj"
    project.mkdir()
    shapes = random.Random(11)
    body = [
        "".join(shapes.choice(string.ascii_letters + string.digits + "+/") for _ in range(64))
        for _ in range(50)
    ]
    lines = ["# Deploy", "", "The deploy key:", "", "```", "-----BEGIN RSA PRIVATE KEY-----"]
    lines += [*body, "-----END RSA PRIVATE KEY-----", "```", "", "## After", "", "Public text."]
    (project / "MEMORY.md").write_text("\n".join(lines) + "\n")

    run_sync(database_url, settings, CountingEmbedder(), project)

    stored = db.execute("SELECT content, start_line, end_line FROM memory_chunks").fetchall()
    text = "\n".join(r[0] for r in stored)
    assert [line for line in body if line in text] == []
    assert "[REDACTED]" in text
    # The key's lines are blank, not gone: later lines keep their numbers.
    assert [end for content, _, end in stored if "Public text." in content] == [len(lines)]


def test_a_secret_in_a_file_of_lone_cr_line_ends_keeps_later_lines_numbered(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Redaction keeps only the \n a match held; a lone CR, a line end for the chunker, was
    # dropped with the key, and every later line's number was off by the key's length.
    project = tmp_path / "proj"
    project.mkdir()
    key = ["-----BEGIN RSA PRIVATE KEY-----", *["QUJD" * 16] * 6, "-----END RSA PRIVATE KEY-----"]
    lines = ["# Deploy", "", *key, "", "## After", "", "echo target line"]
    (project / "MEMORY.md").write_bytes("\r".join(lines).encode() + b"\r")

    run_sync(database_url, settings, CountingEmbedder(), project)

    stored = db.execute("SELECT content, start_line, end_line FROM memory_chunks").fetchall()
    assert "QUJD" not in "\n".join(r[0] for r in stored)
    assert [end for content, _, end in stored if "echo target line" in content] == [len(lines)]


def test_a_lone_cr_in_an_lf_file_keeps_citations_on_grep_lines(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A progress line's lone CR counted as a line end: the file's last line, line 4 to
    # `grep -n`, was cited as line 5.
    project = tmp_path / "proj"
    project.mkdir()
    (project / "MEMORY.md").write_bytes(b"# T\n\nprogress 50%\r100%\nthe capybara line\n")

    run_sync(database_url, settings, CountingEmbedder(), project)

    stored = db.execute("SELECT start_line, end_line FROM memory_chunks").fetchall()
    assert stored == [(1, 4)]


def test_a_path_too_long_for_the_index_skips_that_file_only(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # Postgres's btree over (project_path, path) holds 2704 bytes: such a file failed the whole
    # run (ProgramLimitExceeded), every other file of its transaction unwritten.
    names = random.Random(7)

    def name(length: int) -> str:  # names that do not compress: Postgres indexes them as they are
        return "".join(names.choice(string.ascii_letters + string.digits) for _ in range(length))

    project = tmp_path.joinpath(*(name(200) for _ in range(3)))
    deep = project.joinpath("memory", *(name(240) for _ in range(6)))
    deep.mkdir(parents=True)
    too_long = deep / "notes.md"
    too_long.write_text("# Deep\n\nA note far down.\n")
    # As long, but repetitive: Postgres compresses the value and indexes it.
    repetitive = project.joinpath("memory", *("a" * 240 for _ in range(6)))
    repetitive.mkdir(parents=True)
    (repetitive / "notes.md").write_text("# Also deep\n\nIndexed all the same.\n")
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    assert len(str(project)) + len(str(too_long)) > 2704

    for run in range(2):  # and again: still that file alone, reported each run
        embedder = CountingEmbedder()
        report = run_sync(database_url, settings, embedder, project)

        assert report.errors == []
        assert [(s.path, s.reason.split(" (")[0]) for s in report.skipped] == [
            (str(too_long), "path too long to index")
        ]
        # Decided before its chunks are embedded: a re-sync with nothing changed embedded it
        # again each time (and counted it), and the rollback lost its cache rows.
        expected = (0, 0, 0) if run else (2, 2, 2)
        assert (report.files_changed, report.embeddings_computed, embedder.texts_embedded) == (
            expected
        )
    indexed = db.execute("SELECT path FROM memory_files ORDER BY path").fetchall()
    assert indexed == [(str(project / "MEMORY.md"),), (str(repetitive / "notes.md"),)]


def test_the_index_row_size_is_counted_as_postgres_counts_it(db: psycopg.Connection[Any]) -> None:
    from app.sync.queries import INDEX_ROW_MAX_BYTES, index_row_bytes

    # Paths that do not compress, at Postgres's limit and 8 bytes (one alignment step) over it.
    letters = "".join(random.Random(3).choices(string.ascii_letters, k=4000))
    for project in ("/p", "/" + "é" * 62, "/" + letters[-700:]):
        path = max(
            (project + "/" + letters[:k] for k in range(3000)),
            key=lambda p: (index_row_bytes(project, p) <= INDEX_ROW_MAX_BYTES, len(p)),
        )
        assert index_row_bytes(project, path) == INDEX_ROW_MAX_BYTES
        for file_path, fits in ((path, True), (path + "y" * 8, False)):
            insert = (
                "INSERT INTO memory_files (project_path, path, source, hash, mtime, size) "
                "VALUES (%s, %s, 'memory', 'h', 0, 0)"
            )
            try:
                with db.transaction(force_rollback=True):
                    db.execute(insert, (project, file_path))
                refused = False
            except psycopg.errors.ProgramLimitExceeded:
                refused = True
            assert refused is not fits, (len(project), len(file_path))


def test_a_file_indexed_under_older_rules_is_rechunked_by_the_next_sync(
    database_url: str,
    db: psycopg.Connection[Any],
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A secret no rule caught when the file was indexed: unchanged since, the file was never
    # read again (only a change or --force re-chunked it), so the secret stayed searchable.
    project = make_project(tmp_path / "proj")
    target = project / "memory" / "a.md"
    target.write_text(target.read_text() + "\n## Database\n\npassword: hunter2\n")
    embedder = CountingEmbedder()
    monkeypatch.setattr(reading, "redact_secrets_lines", lambda text: text)
    monkeypatch.setattr(queries, "RULES_VERSION", "older")  # the sync's one reader and writer
    run_sync(database_url, settings, embedder, project)
    leaked = "SELECT count(*) FROM memory_chunks WHERE content LIKE '%%hunter2%%'"
    assert db.execute(leaked).fetchone() != (0,)
    monkeypatch.undo()
    rows = db.execute("SELECT count(*) FROM memory_chunks").fetchone()

    report = run_sync(database_url, settings, embedder, project)

    assert db.execute(leaked).fetchone() == (0,)
    assert report.files_changed == 6  # every file was indexed under the older rules
    assert report.chunks_written >= 1
    assert report.chunks_kept >= (rows or (0,))[0] - 2  # the rest kept as they were
    # And once indexed under today's rules, a file is not read again.
    again = run_sync(database_url, settings, embedder, project)
    assert (again.files_changed, again.chunks_written) == (0, 0)


def _cjk_session(lines: int) -> bytes:
    return "".join(
        f'{{"role": "user", "content": "配置文件在哪里 question {i}"}}\n' for i in range(lines)
    ).encode()


def test_a_transcript_read_mid_write_of_a_wide_character_keeps_its_chunks(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # An agent appends its transcript as the sync reads it: the read can end inside a line, and
    # inside a character's UTF-8 bytes. The file was skipped as "binary" and its chunks deleted.
    project = tmp_path / "proj"
    (project / "sessions").mkdir(parents=True)
    session = project / "sessions" / "live.jsonl"
    session.write_bytes(_cjk_session(3))
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    before = db.execute("SELECT id, content FROM memory_chunks ORDER BY id").fetchall()
    assert before
    assert "question 2" in before[-1][1]
    line = '{"role": "assistant", "content": "答案是这样的"}\n'.encode()
    half = line[: line.index("样".encode()) + 1]  # one byte of a three-byte character

    with session.open("ab") as file:
        file.write(half)
    report = run_sync(database_url, settings, embedder, project)

    assert report.skipped == []
    assert report.files_deleted == 0
    assert report.transcript_items["not UTF-8"] == 1
    assert db.execute("SELECT id, content FROM memory_chunks ORDER BY id").fetchall() == before

    with session.open("ab") as file:
        file.write(line[len(half) :])
    report = run_sync(database_url, settings, embedder, project)

    assert report.transcript_items["not UTF-8"] == 0
    contents = [c for (c,) in db.execute("SELECT content FROM memory_chunks")]
    assert any("答案是这样的" in c for c in contents)
    assert db.execute("SELECT path FROM memory_files").fetchall() == [(str(session),)]


def test_a_transcript_with_nul_bytes_or_a_line_not_utf8_keeps_its_other_lines(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # A crash can leave an appended file's tail as NUL bytes; a tool can log a Latin-1 line.
    # Either made the whole transcript "binary": none of its lines indexed.
    project = tmp_path / "proj"
    (project / "sessions").mkdir(parents=True)
    (project / "sessions" / "crashed.jsonl").write_bytes(_cjk_session(2) + b"\x00" * 4096)
    (project / "sessions" / "latin.jsonl").write_bytes(
        b'{"role": "user", "content": "caf\xe9 menu"}\n' + _cjk_session(2)
    )

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert report.skipped == []
    assert report.transcript_items["not UTF-8"] == 1
    assert report.transcript_items["invalid JSON"] == 1
    rows = db.execute(
        "SELECT file_path, start_line, end_line, content FROM memory_chunks ORDER BY file_path"
    ).fetchall()
    assert [(Path(p).name, s, e) for p, s, e, _ in rows] == [
        ("crashed.jsonl", 1, 2),
        ("latin.jsonl", 2, 3),
    ]
    assert all("question 1" in content for *_, content in rows)


def test_a_binary_file_named_as_a_transcript_is_still_skipped_as_binary(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "sessions").mkdir(parents=True)
    blob = project / "sessions" / "blob.jsonl"
    rng = random.Random(7)  # one generator: a new one an item made every byte the same (0xA5)
    blob.write_bytes(bytes(rng.randrange(256) for _ in range(20000)))

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert [(s.path, s.reason) for s in report.skipped] == [(str(blob), "binary file")]
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (0,)


def test_a_file_replaced_by_a_fifo_after_the_listing_is_skipped_not_waited_on(
    settings: Settings, tmp_path: Path
) -> None:
    # The listing saw a regular file; by the read it is a FIFO no one writes to (a hostile or
    # racing tree): reading it blocked the sync, and the project's lock with it, for ever.
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    found = reading.FoundFile(str(fifo), "memory", 10, 1.0)
    roots = reading.Roots.of(tmp_path, tmp_path)
    outcome: list[object] = []
    reader = threading.Thread(
        target=lambda: outcome.append(reading.prepare_file(found, settings, None, False, roots)),
        daemon=True,
    )

    reader.start()
    reader.join(5)
    if reader.is_alive():  # let the old code's read end, so the thread does not outlive us
        with open(fifo, "wb"):
            pass
        reader.join(5)

    assert outcome == [reading.Skip(str(fifo), "not a regular file")]


def test_a_file_replaced_by_a_folder_after_the_listing_is_skipped_without_leaking_its_descriptor(
    settings: Settings, tmp_path: Path
) -> None:
    # Watch mode and the serve worker run for days: each such read kept a descriptor open.
    folder = tmp_path / "notes.md"
    folder.mkdir()
    found = reading.FoundFile(str(folder), "memory", 10, 1.0)
    roots = reading.Roots.of(tmp_path, tmp_path)
    before = len(os.listdir("/proc/self/fd"))

    outcomes = [reading.prepare_file(found, settings, None, False, roots) for _ in range(100)]

    assert len(os.listdir("/proc/self/fd")) == before
    assert set(outcomes) == {reading.Skip(str(folder), "not a regular file")}


def test_a_listed_file_swapped_for_a_symlink_out_of_the_root_before_the_read_is_not_read(
    settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nthe outside text\n")
    (tmp_path / "proj" / "memory").mkdir(parents=True)
    project = tmp_path / "proj-link"  # a root reached through a link of its own still works
    project.symlink_to(tmp_path / "proj")
    notes = project / "memory" / "notes.md"
    # The listing saw a regular file here; by the read it is a link to outside the root.
    found = reading.FoundFile(str(notes), "memory", 30, 1.0)
    notes.symlink_to(outside / "secret.md")
    roots = reading.Roots.of(project, project / "sessions")

    outcome = reading.prepare_file(found, settings, None, False, roots)

    assert outcome == reading.Skip(str(notes), "symlink escapes the root")


def test_a_symlink_to_a_file_inside_the_root_is_still_read(
    settings: Settings, tmp_path: Path
) -> None:
    memory = tmp_path / "proj" / "memory"
    memory.mkdir(parents=True)
    (memory / "real.md").write_text("# Real\n\nthe inside text\n")
    link = memory / "link.md"
    link.symlink_to("real.md")
    roots = reading.Roots.of(tmp_path / "proj", tmp_path / "proj" / "sessions")

    outcome = reading.prepare_file(
        reading.FoundFile(str(link), "memory", 30, 1.0), settings, None, False, roots
    )

    assert isinstance(outcome, reading.Prepared)
    assert ["the inside text" in c.content for c in outcome.chunks] == [True]


def test_text_in_another_encoding_is_skipped_as_not_utf8_not_as_binary(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    # "binary file" sent the user looking for a corrupt file; the fix is to save it as UTF-8.
    project = tmp_path / "proj"
    (project / "sessions").mkdir(parents=True)
    (project / "memory").mkdir()
    utf16 = project / "sessions" / "exported.jsonl"
    utf16.write_bytes('{"role": "user", "content": "café menu"}\n'.encode("utf-16"))
    latin1 = project / "memory" / "notes.md"
    latin1.write_bytes("# Café\n\nthe menu, in Latin-1\n".encode("latin-1"))
    blob = project / "memory" / "blob.md"
    rng = random.Random(7)
    blob.write_bytes(bytes(rng.randrange(256) for _ in range(2000)))

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    assert sorted((Path(s.path).name, s.reason) for s in report.skipped) == [
        ("blob.md", "binary file"),
        ("exported.jsonl", "not UTF-8"),
        ("notes.md", "not UTF-8"),
    ]
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (0,)
