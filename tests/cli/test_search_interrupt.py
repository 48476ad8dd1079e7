"""Ctrl-C on `agmem search` while Gemini embeds the query: the command ends at once, as at any
other moment, through the real google-genai client and a fake Gemini that does not answer."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.cli.helpers import AGMEM, agmem_env
from tests.fakes.gemini import FakeResponse, fake_gemini
from tests.llm.test_embeddings_gemini import vectors_answer

ROUTE = ":batchEmbedContents"


def test_ctrl_c_while_the_query_is_embedded_ends_the_search_at_once(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # It waited for the embedding's answer or its timeout (10 s) before it ended: the loop's
    # end waited for the thread that waited for the call.
    with fake_gemini() as fake:
        fake.on(ROUTE, lambda r: FakeResponse(body=vectors_answer(r).body, delay_s=30))
        env = agmem_env(
            DATABASE_URL=database_url,
            AGMEM_HOME=str(tmp_path / "home"),
            GEMINI_API_KEY="k",
            AGMEM_GEMINI_BASE_URL=fake.url,
            AGMEM_EMBEDDING_PROVIDER="gemini",
            AGMEM_GEMINI_TIMEOUT_SECONDS="10",
        )
        search = subprocess.Popen(
            [AGMEM, "search", "where is the jwt check"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not fake.calls(ROUTE) and time.monotonic() < deadline:
                assert search.poll() is None, search.communicate()
                time.sleep(0.02)
            assert fake.calls(ROUTE)
            search.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out, err = search.communicate(timeout=60)
            took = time.monotonic() - sent
        finally:
            if search.poll() is None:
                search.kill()
                search.wait()

    assert search.returncode == 130, err
    assert out == ""
    assert err.splitlines()[-1] == "agmem: interrupted", err
    assert "Traceback" not in err, err
    assert "never awaited" not in err, err
    # 0.5 s here at load 2.6; the old wait was the 10 s timeout at least.
    assert took < 5, took
