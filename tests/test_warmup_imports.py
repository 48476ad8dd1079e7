"""`agmem serve`'s app imports, beside its start, what its first requests would otherwise import."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg

# In a new interpreter: the test process has long imported all of it. The served app's import
# ends the wait (its bound is a hang guard); the app not served waits it all out, for an import
# that must not come: 3 s from the lifespan's start, where the served app's import, a thread
# started with it, comes in its first moments (10 s for both made this test 12.7 s of a suite).
SERVED = """
import asyncio, sys, time
from app.config import load_settings
from app.main import create_app

async def main(warm):
    settings = load_settings(database_url=sys.argv[1], _env_file=None, gemini_api_key=None,
                             home=sys.argv[2])
    app = create_app(settings, database_url=sys.argv[1], warm_routes=warm)
    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + (10 if warm else 3)
        while "anyio._backends._asyncio" not in sys.modules and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        print("anyio._backends._asyncio" in sys.modules)

asyncio.run(main(sys.argv[3] == "served"))
"""


def imported_without_a_request(database_url: str, home: Any, app: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", SERVED, database_url, str(home), app],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] == "True"


def test_the_served_app_imports_anyios_backend_before_its_first_request(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    # FastAPI enters a `yield` dependency (the database session of every route but /health's
    # and capture's) through anyio, whose asyncio backend (13 modules) the first such request
    # imported: 30-55 ms of a new server's first session start on the loaded bench machine.
    assert imported_without_a_request(database_url, tmp_path / "home", "served")


def test_an_app_not_served_leaves_the_import_to_its_first_request(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    assert not imported_without_a_request(database_url, tmp_path / "home", "test")


# The import fails once (an anyio being upgraded); the lifespan runs on for a while, then ends.
FAILING = """
import asyncio, importlib.abc, sys
from app.config import load_settings
from app.main import create_app

class Broken(importlib.abc.MetaPathFinder):
    failed = False
    def find_spec(self, name, path, target=None):
        if name == "anyio._backends._asyncio" and not Broken.failed:  # once: the shutdown needs it
            Broken.failed = True
            raise ImportError("anyio's backend is broken")

sys.meta_path.insert(0, Broken())

async def main():
    settings = load_settings(database_url=sys.argv[1], _env_file=None, gemini_api_key=None,
                             home=sys.argv[2])
    app = create_app(settings, database_url=sys.argv[1], warm_routes=True)
    async with app.router.lifespan_context(app):
        while not Broken.failed:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        print("still serving", flush=True)

asyncio.run(main())
"""


def test_a_failed_import_beside_the_start_is_logged_when_it_fails_not_at_shutdown(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    # Its error surfaced only at the lifespan's end, as the shutdown's failure (or never, when
    # the worker's failure came first): the first requests would import it again, and fail.
    done = subprocess.run(
        [sys.executable, "-c", FAILING, database_url, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "warmup.import_failed" in done.stdout, output
    assert done.stdout.index("warmup.import_failed") < done.stdout.index("still serving")
    assert "anyio's backend is broken" in done.stdout
