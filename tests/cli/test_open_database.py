"""`open_database` on the embedded database: brought to head, without Alembic when it is there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# In a new interpreter: the test process has long imported Alembic.
OPENED = """
import sys
from app.cli.common import open_database
from app.config import load_settings

settings = load_settings(_env_file=None, gemini_api_key=None, database_url=None, home=sys.argv[1])
url = open_database(settings)
loaded = "alembic" in sys.modules
from app.db import migrate
print(migrate.current_revision(url) == migrate.head_revision(), loaded)
"""


def opened(home: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", OPENED, str(home)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_embedded_database_at_head_is_opened_without_loading_alembic(tmp_path: Path) -> None:
    # `agmem mcp`, `worker`, `search` ... ran Alembic's upgrade (its scripts, and the migration
    # lock) at every start on the embedded database, at head on all but the first after an
    # upgrade of agmem; `agmem serve` had stopped doing so.
    home = tmp_path / "home"
    assert opened(home) == "True True"  # a new database: migrated
    assert opened(home) == "True False"  # at head: one query
