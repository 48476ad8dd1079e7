"""Syncs with the Gemini provider, through the real google-genai client and the fake server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from app.llm.embeddings import local_embedder
from app.llm.gemini_embeddings import GeminiEmbedder
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, RecordedRequest, fake_gemini
from tests.search.seed import Chunk, add_chunks
from tests.sync.helpers import make_project, run_sync
from tests.worker.builders import drain

IDENTITY = "gemini:gemini-embedding-001:768"


def inline_answer(request: RecordedRequest) -> FakeResponse:
    return FakeResponse(
        200, {"embeddings": [{"values": [0.5] * 768} for _ in request.body["requests"]]}
    )


def unavailable(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse(503, {"error": {"code": 503, "message": "down", "status": "UNAVAILABLE"}})


class BatchServer:
    """The Batch API's two routes: submission, then job reads that succeed after `polls_pending`."""

    def __init__(
        self, fake: FakeGemini, *, polls_pending: int = 1, state: str = "BATCH_STATE_SUCCEEDED"
    ) -> None:
        self.submitted: list[int] = []
        self.polls = 0
        self.polls_pending = polls_pending
        self.state = state
        fake.on(":asyncBatchEmbedContent", self.submit)
        fake.on("batches/job-1", self.get)

    def submit(self, request: RecordedRequest) -> FakeResponse:
        self.submitted.append(len(request.body["batch"]["inputConfig"]["requests"]["requests"]))
        return FakeResponse(
            200, {"name": "batches/job-1", "metadata": {"state": "BATCH_STATE_PENDING"}}
        )

    def get(self, request: RecordedRequest) -> FakeResponse:
        self.polls += 1
        if self.polls <= self.polls_pending:
            return FakeResponse(
                200, {"name": "batches/job-1", "metadata": {"state": "BATCH_STATE_RUNNING"}}
            )
        metadata: dict[str, Any] = {"state": self.state}
        if self.state == "BATCH_STATE_SUCCEEDED":
            responses = [
                {"response": {"embedding": {"values": [0.25] * 768}}}
                for _ in range(self.submitted[-1])
            ]
            metadata["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
        return FakeResponse(200, {"name": "batches/job-1", "metadata": metadata})


def gemini(fake: FakeGemini, tmp_path: Path, **overrides: Any) -> tuple[Any, GeminiEmbedder]:
    settings = make_settings(
        home=tmp_path / "home",
        gemini_api_key="k",
        gemini_base_url=fake.url,
        embedding_provider="gemini",
        gemini_batch_poll_seconds=0.01,
        **overrides,
    )
    return settings, GeminiEmbedder(settings, retry_base_seconds=0.001, sleep=lambda _: None)


def vector_state(db: psycopg.Connection[Any]) -> tuple[int, int]:
    """(chunks, chunks with a vector of the Gemini model at its width)."""
    row = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE model = %s AND vector_dims(embedding) = 768) "
        "FROM memory_chunks",
        (IDENTITY,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def all_embedded(db: psycopg.Connection[Any]) -> bool:
    chunks, embedded = vector_state(db)
    return chunks == embedded > 0


def sync_leaving_the_batch_running(
    fake: FakeGemini, tmp_path: Path, database_url: str, project: Path, *, reembed: bool = False
) -> tuple[BatchServer, Any]:
    """A sync whose Batch API job is still running when its wait ends, with inline calls down
    so that nothing but the job can embed its chunks."""
    fake.on(":batchEmbedContents", unavailable)
    server = BatchServer(fake, polls_pending=1_000_000)
    settings, embedder = short_waits(fake, tmp_path)
    return server, run_sync(database_url, settings, embedder, project, reembed=reembed)


def short_waits(fake: FakeGemini, tmp_path: Path, threshold: int = 5) -> tuple[Any, GeminiEmbedder]:
    """Gemini that waits 0.05 s on a job and does not retry an inline call. Only for a job the
    fake never finishes (`polls_pending` 1,000,000): the sync leaves it running however late a
    loaded machine polls, and the short wait only saves the test's time."""
    return gemini(
        fake,
        tmp_path,
        gemini_embed_batch_threshold=threshold,
        gemini_batch_timeout_seconds=0.05,
        gemini_embed_max_retries=0,
    )


def test_small_backlog_is_embedded_inline_in_calls_of_100(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=100_000)

        report = run_sync(database_url, settings, embedder, project)
        again = run_sync(database_url, settings, embedder, project)

        calls = fake.calls(":batchEmbedContents")
        assert fake.calls(":asyncBatchEmbedContent") == []
    assert all(len(c.body["requests"]) <= 100 for c in calls)
    assert sum(len(c.body["requests"]) for c in calls) == report.embeddings_computed
    assert all(r["taskType"] == "RETRIEVAL_DOCUMENT" for c in calls for r in c.body["requests"])
    count = vector_state(db)
    assert count[0] == count[1] == report.chunks_written
    assert (again.files_changed, again.embeddings_computed) == (0, 0)


def test_large_backlog_goes_through_one_batch_job(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        server = BatchServer(fake, polls_pending=2)
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)

        report = run_sync(database_url, settings, embedder, project)

        assert fake.calls(":batchEmbedContents") == []
        submission = fake.calls(":asyncBatchEmbedContent")[0].body["batch"]
        first = submission["inputConfig"]["requests"]["requests"][0]["request"]
        assert first["taskType"] == "RETRIEVAL_DOCUMENT"
        assert first["outputDimensionality"] == 768
    distinct = db.execute("SELECT count(DISTINCT hash) FROM memory_chunks").fetchone()
    assert distinct == (server.submitted[0],)
    assert server.polls == 3
    assert report.errors == []
    assert report.embeddings_computed == server.submitted[0]
    assert all_embedded(db)
    batch = db.execute(
        "SELECT status, provider_job, jsonb_array_length(hashes) FROM embedding_batches"
    )
    assert batch.fetchall() == [("done", "batches/job-1", server.submitted[0])]
    cached = db.execute("SELECT count(*) FROM memory_embedding_cache WHERE model = %s", (IDENTITY,))
    assert cached.fetchone() == (server.submitted[0],)


def test_failed_batch_falls_back_to_inline_calls(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        BatchServer(fake, polls_pending=0, state="BATCH_STATE_FAILED")
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)

        report = run_sync(database_url, settings, embedder, project)

        assert fake.calls(":batchEmbedContents")
    assert any("falling back to inline" in e for e in report.errors)
    assert all_embedded(db)
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("failed",)]


def test_a_batch_still_running_when_the_run_ends_is_resumed_by_the_next_sync(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        server, first = sync_leaving_the_batch_running(fake, tmp_path, database_url, project)

        assert any("still running" in e for e in first.errors)
        count = vector_state(db)
        assert count[1] == 0
        assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("submitted",)]

        # "Restart": a new embedder, the job has finished meanwhile, and nothing changed on disk.
        server.polls_pending = 0
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)
        second = run_sync(database_url, settings, embedder, project)

        assert len(server.submitted) == 1  # resumed, not submitted again
    assert second.files_changed == 0
    assert all_embedded(db)
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("done",)]


def test_a_job_of_the_model_switched_from_is_closed_by_the_next_sync(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Jobs are resumed for the current model only: after a switch, one still `submitted` stayed
    # so for good, though nothing would wait on it or apply it again.
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        sync_leaving_the_batch_running(fake, tmp_path, database_url, project)
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("submitted",)]

    run_sync(database_url, make_settings(home=tmp_path / "home"), local_embedder(), project)

    assert db.execute("SELECT status, last_error FROM embedding_batches").fetchall() == [
        ("failed", "superseded: the embedding model is now local:wordllama-l2_supercat:256")
    ]


def test_a_reembed_of_a_large_project_goes_through_one_batch_job(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # `--reembed` after a switch to Gemini, a project's largest embedding, was inline calls
    # only, at twice the Batch API's price, however many texts it had.
    project = make_project(tmp_path / "proj")
    run_sync(database_url, make_settings(home=tmp_path / "home"), local_embedder(), project)
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        server = BatchServer(fake)
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)

        report = run_sync(database_url, settings, embedder, project, reembed=True)

        assert report.errors == []
        assert fake.calls(":batchEmbedContents") == []
        texts = db.execute("SELECT count(DISTINCT hash) FROM memory_chunks").fetchone()
        assert texts is not None
        assert server.submitted == [texts[0]]
    assert all_embedded(db)
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("done",)]


def test_chunks_an_outage_left_without_vectors_are_embedded_by_the_next_sync(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # With Gemini the worker leaves file chunks to the sync (a Batch job may hold them), and a
    # sync with nothing changed only resumed jobs: chunks an outage left without a vector stayed
    # out of vector search until some file changed.
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", unavailable)
        settings, embedder = gemini(
            fake, tmp_path, gemini_embed_batch_threshold=100_000, gemini_embed_max_retries=0
        )
        first = run_sync(database_url, settings, embedder, project)
        assert first.errors
        assert vector_state(db)[1] == 0

        fake.on(":batchEmbedContents", inline_answer)
        second = run_sync(database_url, settings, embedder, project)

    assert second.files_changed == 0
    assert all_embedded(db)


def test_a_sync_with_nothing_changed_leaves_a_running_batchs_chunks_to_it(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        server, _first = sync_leaving_the_batch_running(fake, tmp_path, database_url, project)
        fake.on(":batchEmbedContents", inline_answer)
        inline_before = len(fake.calls(":batchEmbedContents"))
        settings, embedder = gemini(
            fake, tmp_path, gemini_embed_batch_threshold=5, gemini_batch_timeout_seconds=0.05
        )

        again = run_sync(database_url, settings, embedder, project)

        assert len(fake.calls(":batchEmbedContents")) == inline_before
        assert len(server.submitted) == 1
    assert any("still running" in e for e in again.errors)
    assert vector_state(db)[1] == 0


def test_a_network_failure_while_polling_a_batch_is_a_poll_to_repeat(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # google-genai 3 sends through httpx2, whose errors are not httpx's: a dropped connection
    # during one poll marked the batch failed, and its texts were embedded again inline.
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        server = BatchServer(fake, polls_pending=1)
        fake.queue("batches/job-1", FakeResponse(drop=True))
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)

        report = run_sync(database_url, settings, embedder, project)

        assert fake.calls(":batchEmbedContents") == []
    assert report.errors == []
    assert server.polls == 2
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("done",)]
    assert all_embedded(db)


def test_the_worker_leaves_a_pending_batchs_chunks_to_the_batch(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The worker embeds every index row without a vector; it took a large sync's chunks while
    # their Batch API job ran, paying for them twice (walk-through: 193 of 193 inline at once).
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        server, _first = sync_leaving_the_batch_running(fake, tmp_path, database_url, project)
        settings, embedder = gemini(fake, tmp_path, gemini_embed_batch_threshold=5)
        fake.on(":batchEmbedContents", inline_answer)
        inline_before = len(fake.calls(":batchEmbedContents"))

        drain(settings, database_url)

        assert len(fake.calls(":batchEmbedContents")) == inline_before
        count = vector_state(db)
        assert count[0] > 0
        assert count[1] == 0

        server.polls_pending = 0
        run_sync(database_url, settings, embedder, project)
    count = vector_state(db)
    assert count[0] == count[1]
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("done",)]


def test_with_gemini_the_worker_leaves_file_chunks_to_the_sync(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A gemini sync writes its chunks without vectors, then embeds them itself (inline, or one
    # Batch API job). The worker, woken by their inserts, embedded them first (walk-through: 38
    # of 192 rows inline before the job was even submitted, the rest while it ran), so they were
    # paid for twice. File chunks without a vector, as a sync leaves them mid-run:
    add_chunks(
        database_url,
        [
            Chunk("The refreshToken endpoint rotates JWT credentials.", source="memory"),
            Chunk("user: where is the jwt check?", source="sessions", path="s.jsonl"),
            Chunk("Observation: read auth.ts", source="observation", path=None),
        ],
        embed=False,
    )
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        settings, _embedder = gemini(fake, tmp_path)

        drain(settings, database_url)

        (call,) = fake.calls(":batchEmbedContents")
    assert [r["content"]["parts"][0]["text"] for r in call.body["requests"]] == [
        "Observation: read auth.ts"
    ]
    left = db.execute(
        "SELECT source FROM memory_chunks WHERE embedding IS NULL ORDER BY source"
    ).fetchall()
    assert left == [("memory",), ("sessions",)]


def test_a_second_reembed_while_the_first_job_runs_submits_no_second_job(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The texts an open job holds were submitted again by the next `--reembed` (or any sync
    # with a large backlog) while the job ran: the same texts paid for at Gemini twice.
    project = make_project(tmp_path / "proj")
    run_sync(database_url, make_settings(home=tmp_path / "home"), local_embedder(), project)
    with fake_gemini() as fake:
        server, _first = sync_leaving_the_batch_running(
            fake, tmp_path, database_url, project, reembed=True
        )
        assert len(server.submitted) == 1
        settings, embedder = short_waits(fake, tmp_path)

        again = run_sync(database_url, settings, embedder, project, reembed=True)

        assert len(server.submitted) == 1
    assert any("still running" in e for e in again.errors)
    assert db.execute("SELECT status FROM embedding_batches").fetchall() == [("submitted",)]


def test_a_changed_file_while_a_job_runs_submits_only_its_new_texts(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    with fake_gemini() as fake:
        server, _first = sync_leaving_the_batch_running(fake, tmp_path, database_url, project)
        memory = project / "MEMORY.md"
        extra = "".join(f"\n\n## Note {i}\n\nA new paragraph number {i} here.\n" for i in range(40))
        memory.write_text(memory.read_text() + extra)
        settings, embedder = short_waits(fake, tmp_path, threshold=1)

        run_sync(database_url, settings, embedder, project)

        assert len(server.submitted) == 2
    # No text is in both jobs: the second holds only the texts the change added.
    counts = db.execute(
        "SELECT count(h), count(DISTINCT h) FROM embedding_batches, "
        "jsonb_array_elements_text(hashes) AS h"
    ).fetchone()
    assert counts is not None
    assert counts[0] == counts[1] == sum(server.submitted)
