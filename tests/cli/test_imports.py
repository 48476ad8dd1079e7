"""Every `agmem` command is a fresh process: defining the commands must stay cheap to import."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import app.cli
from app.cli import memory
from app.memories import service

# On one worker (`make test`'s `--dist loadgroup`): `_loaded` runs each command's probe once per
# process, and the tests asking of one command, spread over two workers, paid for it twice (12
# interpreters of ~2-3 s of CPU each where 9 do).
pytestmark = pytest.mark.xdist_group("imports")

# What only some commands need; each costs a fraction of a second to seconds on import.
HEAVY = (
    "alembic",
    "fastapi",
    "google.genai",
    "langchain_text_splitters",
    "mcp",
    "numpy",
    "rich.progress",
    "uvicorn",
    "wordllama",
)


def test_the_command_line_imports_no_command_implementation() -> None:
    probe = f"import sys, app.cli; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.split() == []


def test_memory_list_limit_matches_the_service() -> None:
    assert memory.MAX_LIST_LIMIT == service.MAX_LIST_LIMIT


def test_the_command_line_uses_only_typers_public_api() -> None:
    # typer vendors click as `typer._click`, free to change in any release.
    private = []
    for module in Path(app.cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            private += [f"{module.name}: {n}" for n in names if n.startswith("typer._")]

    assert private == []


# What each command imports when it runs (the command modules import it inside the command).
COMMAND_IMPORTS = {
    "status": ("app.db.migrate", "app.db.models", "app.llm.embeddings", "app.worker.metrics"),
    "search": ("app.db.engine", "app.llm.embeddings", "app.search.service"),
    "memory": ("app.db.engine", "app.memories.reads", "app.memories.service"),
    "redact": ("app.db.engine", "app.redaction"),
    "mcp": ("app.mcp.server", "app.memories.resume", "app.db.supervisor"),
    "worker": ("app.worker.loop", "app.db.supervisor"),
}


# What the tests below look for in a command's process.
PROBED = (*HEAVY, "rich")


def loaded_by(command: str, heavy: tuple[str, ...]) -> list[str]:
    """Which of `heavy` a fresh process has imported once it has imported what `command` does,
    and built the local embedding provider as the command would."""
    return [module for module in _loaded(command) if module in heavy]


@functools.cache
def _loaded(command: str) -> tuple[str, ...]:
    """Which of PROBED that process has imported: one process per command for all the tests
    asking (a fresh interpreter costs ~1 s of CPU; the tests asked 14 times of 6 commands)."""
    modules = ", ".join(("app.cli", *COMMAND_IMPORTS[command]))
    probe = (
        f"import sys, {modules}\n"
        "from app.config import load_settings\n"
        "from app.llm.embeddings import check_embedder, get_embedder\n"
        "settings = load_settings(\n"
        "    _env_file=None, embedding_provider='local', gemini_api_key=None\n"
        ")\n"
        "check_embedder(settings); get_embedder(settings)\n"
        f"print(' '.join(m for m in {PROBED!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return tuple(done.stdout.split())


@pytest.mark.parametrize("command", sorted(COMMAND_IMPORTS))
def test_a_command_with_the_local_provider_does_not_import_the_gemini_client(command: str) -> None:
    # google-genai costs ~0.3 s of CPU to import; it is needed only to build a Gemini client.
    assert loaded_by(command, ("google.genai",)) == []


@pytest.mark.parametrize("command", ["mcp", "memory"])
def test_reading_memories_without_http_does_not_import_fastapi(command: str) -> None:
    # `agmem mcp` on stdio and `agmem memory` serve no HTTP: FastAPI is ~0.2 s of CPU to import.
    assert loaded_by(command, ("fastapi",)) == []


@pytest.mark.parametrize("key", [None, "k"])
def test_the_server_pays_what_the_command_line_defers_before_its_first_request(
    key: str | None, database_url: str, tmp_path: Path
) -> None:
    # Deferred for the command line, the scanners' compile (~130 ms) and, with a Gemini key,
    # google-genai's import (~0.3 s) must not land on a server's first request.
    probe = (
        "import asyncio, sys, app.textscan as t\n"
        "from pathlib import Path\n"
        "from app.config import load_settings\n"
        "from app.main import create_app\n"
        "settings = load_settings(\n"
        "    _env_file=None, home=Path(sys.argv[2]), gemini_api_key=sys.argv[3] or None\n"
        ")\n"
        "app = create_app(settings, database_url=sys.argv[1])\n"
        "def loaded() -> None:\n"
        "    print(sorted(s.compiled for s in t._SCANNERS), 'google.genai' in sys.modules)\n"
        "loaded()\n"
        "async def started() -> None:\n"
        "    async with app.router.lifespan_context(app):\n"
        "        loaded()\n"
        "asyncio.run(started())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, database_url, str(tmp_path), key or ""],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )

    assert done.stdout.splitlines() == [
        "[False, False, False] False",
        f"[True, True, True] {key is not None}",
    ]


def test_the_server_imports_the_mcp_sdk_and_the_text_splitters_only_when_used(
    database_url: str, tmp_path: Path
) -> None:
    # The MCP SDK (~0.7-0.9 s of CPU) is imported by the first request to /mcp, the text
    # splitters (~0.1-0.4 s) by the first sync that chunks a file: `agmem serve` paid both
    # before it answered /health, and so did every process that imports the app.
    probe = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "import app.cli\n"
        "from app.config import load_settings\n"
        "from app.main import create_app\n"
        "settings = load_settings(_env_file=None, home=Path(sys.argv[2]), gemini_api_key='k')\n"
        "app = create_app(settings, database_url=sys.argv[1], run_worker=True)\n"
        "def loaded() -> None:\n"
        "    heavy = ('mcp', 'langchain_text_splitters')\n"
        "    print('imported:', *(m for m in heavy if m in sys.modules))\n"
        "async def started() -> None:\n"
        "    async with app.router.lifespan_context(app):\n"
        "        await asyncio.sleep(0.2)  # the worker's first poll\n"
        "        loaded()\n"
        "asyncio.run(started())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, database_url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )

    # The worker logs to stdout too.
    assert [line for line in done.stdout.splitlines() if line.startswith("imported:")] == [
        "imported:"
    ]


@pytest.mark.parametrize("command", sorted(COMMAND_IMPORTS))
def test_a_command_imports_the_text_splitters_only_to_sync(command: str) -> None:
    assert loaded_by(command, ("langchain_text_splitters",)) == []


@pytest.mark.parametrize("command", sorted(COMMAND_IMPORTS))
def test_a_command_does_not_import_rich_through_structlog(command: str) -> None:
    # structlog imports rich with pygments (~0.1 s of CPU) unless app.logs imports it first with
    # rich hidden: `agmem mcp` imported the MCP server and the supervisor, which import
    # structlog, before its settings brought in app.logs.
    assert loaded_by(command, ("rich",)) == []
