"""Every `bash` example in docs/interceptor.md runs for real against a live server."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg

from tests.fakes.gemini import text_answer
from tests.proxy.conftest import CALLER_KEY, Proxy
from tests.proxy.upstream import Scripted

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "interceptor.md"
_BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def bash_examples() -> list[str]:
    return _BASH_BLOCK.findall(GUIDE.read_text())


def _run(script: str, proxy: Proxy) -> str:
    env = {**os.environ, "AGMEM_URL": proxy.url, "GEMINI_API_KEY": CALLER_KEY}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, f"{script}\nexit {done.returncode}: {done.stderr}{done.stdout}"
    return done.stdout


def test_every_bash_example_runs_and_does_what_the_guide_says(
    proxy: Proxy, db: psycopg.Connection[Any]
) -> None:
    examples = bash_examples()
    assert len(examples) == 7  # the proxy call, start, context, observe, result, end, inspect
    upstream_answer = text_answer("We were fixing the login timeout.")
    proxy.upstream.queue(Scripted(body=upstream_answer))

    outputs = [_run(example, proxy) for example in examples]

    proxied, started, context, observed, resulted, ended, inspected = outputs
    assert json.loads(proxied) == upstream_answer
    (seen,) = proxy.upstream.requests
    assert seen.headers["x-goog-api-key"] == CALLER_KEY
    assert json.loads(started)["id"] == "hook-session-1"
    assert json.loads(started)["status"] == "active"
    assert context.startswith("<memory>")
    assert json.loads(observed)["id"] == "toolu_01"
    assert json.loads(observed)["status"] == "pending"
    assert json.loads(resulted)["status"] == "captured"
    assert json.loads(ended)["sessionId"] == "hook-session-1"
    assert json.loads(ended)["status"] == "ending"
    assert "SESSION_TTL" in inspected

    row = db.execute(
        "SELECT o.status, o.result, s.status, s.created_by FROM observations o "
        "JOIN sessions s ON s.id = o.session_id WHERE o.id = 'toolu_01'"
    ).fetchone()
    assert row == (
        "captured",
        {"content": "export const SESSION_TTL = 60 * 60;"},
        "ending",
        "vscode-hook",
    )
