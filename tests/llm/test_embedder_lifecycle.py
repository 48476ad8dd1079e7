"""The Gemini embedder's inline calls run on a loop thread of their own with a second client:
closed when the process's work ends (the app's lifespan, the CLI's exit), and made anew in a
forked child, which inherits neither the thread nor a lock another thread held. Through the real
google-genai client and the fake server, and a real fork."""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import warnings
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.llm.embeddings import close_embedders, get_embedder
from app.llm.gemini_embeddings import GeminiEmbedder
from app.main import create_app
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, fake_gemini
from tests.llm.test_embeddings_gemini import vectors_answer

ROUTE = ":batchEmbedContents"
JOB = "batches/job-1"
RUNNING = {"name": JOB, "metadata": {"state": "BATCH_STATE_RUNNING"}}


def settings_for(fake: FakeGemini, tmp_path: Path | None = None) -> object:
    extra = {"home": tmp_path / "home"} if tmp_path is not None else {}
    return make_settings(
        gemini_api_key="k", gemini_base_url=fake.url, embedding_provider="gemini", **extra
    )


def started_by(call: object) -> set[threading.Thread]:
    """The embedders' loop threads that calling `call` started and left running."""
    before = set(threading.enumerate())
    assert callable(call)
    call()
    return {
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and t.name == "gemini-embeddings"
    }


def test_closing_the_embedders_stops_the_loop_thread_and_closes_its_connection() -> None:
    # Neither was ever closed: a thread and a kept-alive connection for the process's life.
    with fake_gemini() as fake:
        fake.on(ROUTE, vectors_answer)
        embedder = get_embedder(settings_for(fake))  # type: ignore[arg-type]
        (loop_thread,) = started_by(lambda: embedder.embed_query("where is the jwt check"))
        assert fake.left_open(ROUTE)

        close_embedders()

        assert not loop_thread.is_alive()
        deadline = time.monotonic() + 5
        while fake.left_open(ROUTE) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not fake.left_open(ROUTE)
        # Closed is not broken: the next query makes them again.
        assert embedder.embed_query("and the retry loop").shape == (768,)
        close_embedders()
        assert len(fake.calls(ROUTE)) == 2


def test_the_apps_lifespan_closes_them(tmp_path: Path, database_url: str) -> None:
    with fake_gemini() as fake:
        fake.on(ROUTE, vectors_answer)
        settings = settings_for(fake, tmp_path)
        app = create_app(settings, database_url=database_url)  # type: ignore[arg-type]
        with TestClient(app):
            embedder = get_embedder(settings)  # type: ignore[arg-type]
            (loop_thread,) = started_by(lambda: embedder.embed_query("where is the jwt check"))

        assert not loop_thread.is_alive()


def test_an_app_stopping_closes_no_embedder_another_app_holds(
    tmp_path: Path, database_url: str
) -> None:
    # The lifespan closed every embedder of the process: a second app in it (a test's, or one
    # of the same settings) lost its loop thread and client mid-run, whoever had opened them.
    with fake_gemini() as fake, fake_gemini() as other_fake:
        fake.on(ROUTE, vectors_answer)
        other_fake.on(ROUTE, vectors_answer)
        settings = settings_for(fake, tmp_path / "a")
        other = settings_for(other_fake, tmp_path / "b")
        apps = [
            create_app(s, database_url=database_url)  # type: ignore[arg-type]
            for s in (settings, other, settings)
        ]
        with TestClient(apps[1]), TestClient(apps[2]):
            with TestClient(apps[0]):
                threads = started_by(
                    lambda: [
                        get_embedder(s).embed_query("where is the jwt check")  # type: ignore[arg-type]
                        for s in (settings, other)
                    ]
                )
                assert len(threads) == 2
            # The first app's embedder is the third's too: neither it nor the second's closed.
            assert all(thread.is_alive() for thread in threads)
        assert not any(thread.is_alive() for thread in threads)


def test_a_close_as_a_connect_starts_leaves_no_coroutine_unawaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A close landing between the step that starts a connect attempt (anyio's `connect_tcp`
    # spawns one task for each address) and that task's first step cancelled the task unstarted:
    # anyio's wrapper then never awaits it, and Python printed "RuntimeWarning: coroutine
    # 'connect_tcp.<locals>.try_connect' was never awaited" (4 of 50 closes at random times).
    # Here the close lands there every time: the name's resolution is held, then released and
    # the close asked while the embedder's loop is held, so both reach the loop in one batch.
    resolving, resolve = threading.Event(), threading.Event()
    real_getaddrinfo = socket.getaddrinfo

    def held_getaddrinfo(host: str | bytes, *args: object, **kwargs: object) -> object:
        if host in ("gemini.test", b"gemini.test"):  # asyncio passes it encoded
            resolving.set()
            resolve.wait(10)
            host = "127.0.0.1"
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", held_getaddrinfo)
    with fake_gemini() as fake:
        fake.on(ROUTE, vectors_answer)
        port = fake.url.rsplit(":", 1)[1]
        settings = make_settings(
            gemini_api_key="k",
            gemini_base_url=f"http://gemini.test:{port}",
            embedding_provider="gemini",
        )
        embedder = GeminiEmbedder(settings)
        failed: list[Exception] = []

        def query(embedder: GeminiEmbedder) -> None:
            try:
                embedder.embed_query("where is the jwt check")
            except Exception as error:
                failed.append(error)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asking = threading.Thread(target=query, args=(embedder,))
            asking.start()
            assert resolving.wait(10)
            loop = embedder._inline.loop  # type: ignore[union-attr]
            held, release = threading.Event(), threading.Event()
            loop.call_soon_threadsafe(lambda: (held.set(), release.wait(10)))
            assert held.wait(10)
            resolve.set()
            time.sleep(0.2)  # the resolver's thread hands its answer to the held loop
            closing = threading.Thread(target=embedder.close)
            closing.start()
            time.sleep(0.2)  # the close hands its shutdown to the held loop, after the answer
            release.set()
            closing.join(10)
            asking.join(10)
            del embedder
            gc.collect()

    assert not closing.is_alive()
    assert not asking.is_alive()
    assert len(failed) == 1
    assert "closed during the call" in str(failed[0])
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_a_forked_child_queries_with_its_own_loop_even_with_the_lock_held() -> None:
    # The child inherits the loop but not its thread: its query waited for an answer no thread
    # would ever run (and for a lock that a parent's thread held at the fork, for ever).
    with fake_gemini() as fake:
        fake.on(ROUTE, vectors_answer)
        embedder = get_embedder(settings_for(fake))  # type: ignore[arg-type]
        embedder.embed_query("where is the jwt check")
        holding, release = threading.Event(), threading.Event()
        lock = embedder._inline_lock  # type: ignore[attr-defined]

        def hold() -> None:
            with lock:
                holding.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait()
        reading, writing = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: the point
            child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                vector = get_embedder(settings_for(fake)).embed_query("in the child")  # type: ignore[arg-type]
                os.write(writing, b"ok" if vector.shape == (768,) else b"bad")
            finally:
                os._exit(0)
        release.set()
        holder.join()
        os.close(writing)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pid, _status = os.waitpid(child, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05)
        else:
            os.kill(child, 9)
            os.waitpid(child, 0)
        answer = os.read(reading, 16)
        os.close(reading)
        assert answer == b"ok"
        assert len(fake.calls(ROUTE)) == 2
        # The parent's own loop still answers.
        assert embedder.embed_query("back in the parent").shape == (768,)
        close_embedders()


def test_a_forked_child_asks_for_batch_jobs_on_a_connection_of_its_own() -> None:
    # The Batch calls' client was kept by the child: its connection the parent's socket, where
    # both processes' requests and answers could cross.
    with fake_gemini() as fake:
        fake.on(JOB, lambda _r: FakeResponse(200, RUNNING))
        embedder = get_embedder(settings_for(fake))  # type: ignore[arg-type]
        assert embedder.batch_result("batches/job-1", 1) is None
        reading, writing = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the fake's threads run on
            child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                polled = get_embedder(settings_for(fake)).batch_result("batches/job-1", 1)  # type: ignore[arg-type]
                os.write(writing, b"ok" if polled is None else b"bad")
            finally:
                os._exit(0)
        os.close(writing)
        _pid, status = os.waitpid(child, 0)
        answer = os.read(reading, 16)
        os.close(reading)
        assert (answer, status) == (b"ok", 0)
        asked = [c for c in fake.connections if any(p.endswith(JOB) for p in c.paths)]
        assert [len(c.paths) for c in asked] == [1, 1]
        # The parent's client is its own still.
        assert embedder.batch_result("batches/job-1", 1) is None
        assert len(fake.calls(JOB)) == 3
        close_embedders()


def test_an_app_whose_engine_fails_to_close_still_closes_its_embedder(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The release ran after `engine.dispose()` in one `finally`: a dispose that raised (or a
    # second Ctrl-C cancelling it) skipped it, the holder count never came back to zero, and
    # the app's Gemini embedder stayed open until the process exited (rev-whole23).
    async def failing_dispose(self: AsyncEngine, close: bool = True) -> None:
        raise OSError("the pool's connections could not be closed")

    monkeypatch.setattr(AsyncEngine, "dispose", failing_dispose)
    with fake_gemini() as fake:
        fake.on(ROUTE, vectors_answer)
        settings = settings_for(fake, tmp_path / "a")
        app = create_app(settings, database_url=database_url)  # type: ignore[arg-type]
        client = TestClient(app)
        client.__enter__()
        threads = started_by(
            lambda: get_embedder(settings).embed_query("where is the jwt check")  # type: ignore[arg-type]
        )
        assert len(threads) == 1
        with pytest.raises(OSError, match="could not be closed"):
            client.__exit__(None, None, None)
        assert not any(thread.is_alive() for thread in threads)
