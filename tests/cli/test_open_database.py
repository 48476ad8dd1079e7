"""`open_database` on the embedded database: brought to head, without Alembic when it is there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.db.revision import script_head
from tests.cli.helpers import run_agmem

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


def test_status_leaves_a_schema_taken_down_where_it_is_and_others_say_they_bring_it_up(
    tmp_path: Path,
) -> None:
    # An older build's error advises `agmem migrate --down 0007`; `agmem status` of the new build
    # then upgraded the embedded database to head again, undoing it.
    home = tmp_path / "home"
    assert opened(home) == "True True"
    down = run_agmem("migrate", "--down", "0007", AGMEM_HOME=str(home))
    assert down.returncode == 0, down.stderr
    for _ in range(2):
        status = run_agmem("status", AGMEM_HOME=str(home))
        assert status.returncode == 0, status.stderr
        assert "schema     0007 (behind head" in status.stdout
        assert "worker     not read: the schema is not at this agmem's head" in status.stdout
        assert "Traceback" not in status.stderr
    # Another command still brings it to head, as after an upgrade of agmem, and says so.
    done = subprocess.run(
        [sys.executable, "-c", OPENED, str(home)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True True"
    head = script_head()
    assert f"agmem: brought the embedded database's schema from 0007 to {head}" in done.stderr
