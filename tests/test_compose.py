"""docker-compose.yml cannot be run here (no Docker engine), so it is checked against the code:
service names, ports, environment variable names and commands must match Settings and the CLI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from sqlalchemy.engine import make_url

from app.cli import cli
from app.config import Settings
from app.worker.loop import STOP_GRACE_SECONDS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def settings_env_names() -> set[str]:
    names = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        if choices:
            names.update(str(choice) for choice in choices)
        else:
            names.add(f"AGMEM_{field_name.upper()}")
    return names


def agmem_invocations(command: list[str]) -> list[list[str]]:
    """The agmem command lines inside a compose `command` (plain, or `sh -c "a && exec b"`)."""
    if command[:2] == ["sh", "-c"]:
        steps = [shlex.split(step) for step in command[2].split("&&")]
        return [step[1:] if step[0] == "exec" else step for step in steps]
    return [command]


def check_cli_invocation(argv: list[str]) -> None:
    assert argv[0] == "agmem", f"{argv} does not run agmem"
    group: Any = typer.main.get_command(cli)
    command = group.get_command(None, argv[1])
    assert command is not None, f"agmem has no command {argv[1]!r}"
    command.make_context(argv[1], list(argv[2:]))  # raises on an unknown option or bad value


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"db", "api", "worker"}


def test_db_is_pgvector_with_healthcheck_and_named_volume(compose: dict[str, Any]) -> None:
    db = compose["services"]["db"]

    assert db["image"].startswith("pgvector/pgvector:")
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    volume = db["volumes"][0].split(":")[0]
    assert volume in compose["volumes"]


def test_database_url_points_at_the_db_service(compose: dict[str, Any]) -> None:
    db_env = compose["services"]["db"]["environment"]
    for name in ("api", "worker"):
        raw = compose["services"][name]["environment"]["DATABASE_URL"]
        url = make_url(re.sub(r"\$\{POSTGRES_PASSWORD:-(\w+)\}", r"\1", raw))
        assert url.host == "db"
        assert url.username == db_env["POSTGRES_USER"]
        assert url.database == db_env["POSTGRES_DB"]
        assert compose["services"][name]["depends_on"]


def test_environment_names_are_settings(compose: dict[str, Any]) -> None:
    known = settings_env_names()
    for name in ("api", "worker"):
        unknown = set(compose["services"][name]["environment"]) - known
        assert not unknown, f"{name} passes variables no setting reads: {unknown}"


def test_secrets_are_passed_through(compose: dict[str, Any]) -> None:
    for name in ("api", "worker"):
        environment = compose["services"][name]["environment"]
        assert environment["GEMINI_API_KEY"].startswith("${GEMINI_API_KEY")
        assert environment["AGMEM_API_TOKEN"].startswith("${AGMEM_API_TOKEN:?")


def test_api_port_matches_settings(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    default_port = Settings.model_fields["port"].default

    assert int(api["environment"]["AGMEM_PORT"]) == default_port
    published = api["ports"][0].rsplit(":", 1)[1]
    assert int(published) == default_port
    assert f":{default_port}/health" in " ".join(api["healthcheck"]["test"])
    assert api["environment"]["AGMEM_HOST"] == "0.0.0.0"


def test_commands_are_real_cli_commands(compose: dict[str, Any]) -> None:
    api = agmem_invocations(compose["services"]["api"]["command"])
    worker = agmem_invocations(compose["services"]["worker"]["command"])

    assert [argv[1] for argv in api] == ["migrate", "serve"]
    assert [argv[1] for argv in worker] == ["worker"]
    for argv in api + worker:
        check_cli_invocation(argv)


def test_a_typo_in_a_command_is_caught() -> None:
    with pytest.raises(Exception, match="No such option: --no-wroker"):
        check_cli_invocation(["agmem", "serve", "--no-wroker"])
    with pytest.raises(AssertionError):
        check_cli_invocation(["agmem", "sever"])


def test_dockerfile_runs_the_api_and_installs_the_locked_project() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()

    assert "uv sync --frozen" in dockerfile
    assert 'CMD ["agmem", "serve", "--no-worker"]' in dockerfile
    assert "EXPOSE 37777" in dockerfile


def test_a_service_that_serves_no_http_overrides_the_images_healthcheck(
    compose: dict[str, Any],
) -> None:
    # The image's HEALTHCHECK polls the API's /health; `agmem worker` listens on no port, so with
    # the image's check its container was "unhealthy" for as long as it ran.
    assert "HEALTHCHECK" in (ROOT / "Dockerfile").read_text()
    for name, service in compose["services"].items():
        if "build" not in service:
            continue
        argv = agmem_invocations(service["command"])[-1]
        if argv[1] != "serve":
            assert service.get("healthcheck", {}).get("disable") is True, name


def test_the_worker_is_given_time_to_give_its_claims_back(compose: dict[str, Any]) -> None:
    # Stopping, the worker waits STOP_GRACE_SECONDS for the jobs in hand, then releases their
    # claims and exits (walk-through: 12.4 s after SIGTERM with a Gemini call in flight). Docker
    # kills after 10 s unless told otherwise: the claims then held until their lease ran out.
    grace = compose["services"]["worker"]["stop_grace_period"]
    match = re.fullmatch(r"(\d+)s", grace)
    assert match, grace
    assert int(match.group(1)) >= STOP_GRACE_SECONDS + 10


def test_api_and_worker_see_the_projects_at_the_paths_clients_name(
    compose: dict[str, Any],
) -> None:
    # POST /api/sync checks the project folder in the API and the worker reads it; neither
    # container could see any project, so no sync could run under compose.
    mounts = []
    for name in ("api", "worker"):
        (mount,) = compose["services"][name]["volumes"]
        part = r"(\$\{AGMEM_PROJECTS_DIR:-/\w+\})"
        match = re.fullmatch(f"{part}:{part}:(ro|rw)", mount)
        assert match, mount
        host, container, mode = match.groups()
        mounts.append(mount)
        assert host == container, "a project's key is its path on the clients' machine"
        assert mode == "ro"
    assert mounts[0] == mounts[1]
