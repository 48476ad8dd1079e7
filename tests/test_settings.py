from __future__ import annotations

from pathlib import Path

import pytest

from app.config import SettingsError, is_loopback_host
from tests.conftest import make_settings


def test_defaults() -> None:
    settings = make_settings()

    assert settings.host == "127.0.0.1"
    assert settings.port == 37777
    assert settings.home == Path("~/.antigravity-mem").expanduser()
    assert settings.pgdata == settings.home / "pgdata"
    assert settings.embedding_provider == "local"
    assert settings.max_body_bytes == 8 * 1024 * 1024


def test_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db/agmem")
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    monkeypatch.setenv("AGMEM_GEMINI_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AGMEM_PORT", "4000")

    from app.config import load_settings

    settings = load_settings(_env_file=None)

    assert settings.database_url == "postgresql://u@db/agmem"
    assert settings.gemini_api_key == "k"
    assert settings.gemini_base_url == "http://127.0.0.1:9"
    assert settings.port == 4000


@pytest.mark.parametrize(
    ("override", "variable"),
    [
        ({"port": 70000}, "AGMEM_PORT"),
        ({"database_url": "sqlite:///x.db"}, "DATABASE_URL"),
        ({"database_url": "postgresql://agmem@localhost:65536/agmem"}, "DATABASE_URL"),
        ({"database_url": "postgresql://agmem@localhost:0/agmem"}, "DATABASE_URL"),
        ({"embedding_provider": "word2vec"}, "AGMEM_EMBEDDING_PROVIDER"),
        ({"max_body_bytes": 10}, "AGMEM_MAX_BODY_BYTES"),
        ({"host": ""}, "AGMEM_HOST"),
        ({"host": " [] "}, "AGMEM_HOST"),
        ({"trusted_proxies": "10.0.0.1, nginx"}, "AGMEM_TRUSTED_PROXIES"),
        ({"request_idle_timeout_seconds": 0}, "AGMEM_REQUEST_IDLE_TIMEOUT_SECONDS"),
        ({"max_connections": 0}, "AGMEM_MAX_CONNECTIONS"),
        ({"refusal_log_seconds": 0}, "AGMEM_REFUSAL_LOG_SECONDS"),
        # Empty (`AGMEM_HOME=$UNSET`) was the current folder: a project got ./pgdata.
        ({"home": ""}, "AGMEM_HOME"),
        ({"home": "  "}, "AGMEM_HOME"),
        # inf passed every `ge=0` bound: scores of null over HTTP, or all 0 (k = inf).
        ({"search_vector_weight": "inf"}, "AGMEM_SEARCH_VECTOR_WEIGHT"),
        ({"search_rrf_k": "inf"}, "AGMEM_SEARCH_RRF_K"),
        ({"gemini_batch_timeout_seconds": "inf"}, "AGMEM_GEMINI_BATCH_TIMEOUT_SECONDS"),
        # Checked like AGMEM_GEMINI_UPSTREAM: every Gemini call failed on it, each logged.
        ({"gemini_base_url": "generativelanguage.googleapis.com"}, "AGMEM_GEMINI_BASE_URL"),
    ],
)
def test_invalid_setting_names_the_variable(override: dict[str, object], variable: str) -> None:
    with pytest.raises(SettingsError) as raised:
        make_settings(**override)

    message = str(raised.value)
    assert message.startswith(f"invalid setting {variable}: ")
    assert "\n" not in message
    assert "Value error" not in message


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("postgresql://u@/db?host=/tmp&port=99999", "99999"),
        ("postgresql://u@/db?host=/tmp&port=0", "0"),
        ("postgresql://u@/db?host=/a,/b&port=5432,x", "x"),
    ],
)
def test_a_port_in_the_database_urls_query_is_checked(url: str, port: str) -> None:
    # Only the authority's port was read: a socket folder's URL gives it in the query, and
    # libpq's refusal came at the first connection as "database unreachable".
    with pytest.raises(SettingsError) as raised:
        make_settings(database_url=url)

    assert str(raised.value) == (
        f"invalid setting DATABASE_URL: port {port} is not a TCP port (1-65535)"
    )


def test_a_port_in_the_database_urls_query_may_be_a_list() -> None:
    url = "postgresql://u@/db?host=/a,/b&port=5432,,5433"
    assert make_settings(database_url=url).database_url == url


def test_trusted_proxies_are_addresses_or_networks() -> None:
    settings = make_settings(trusted_proxies=" 127.0.0.1, 172.16.0.0/12,,::1 ")

    assert settings.trusted_proxies == ["127.0.0.1/32", "172.16.0.0/12", "::1/128"]


def test_blank_database_url_means_embedded() -> None:
    assert make_settings(database_url="  ").database_url is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_project_env_files_database_url_is_not_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # agmem runs in project folders; their .env names the application's database DATABASE_URL,
    # and `agmem serve` migrated our tables into it.
    from app.config import load_settings

    for name in ("DATABASE_URL", "AGMEM_DATABASE_URL", "AGMEM_PORT", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / ".env"
    env_file.write_text(
        "DATABASE_URL=postgresql://app:pw@db/app\nAGMEM_PORT=4000\nGEMINI_API_KEY=g\n"
    )

    from_file = load_settings(_env_file=env_file)
    assert from_file.database_url is None  # the embedded database
    assert (from_file.port, from_file.gemini_api_key) == (4000, "g")  # the rest is read

    env_file.write_text(
        "database_url=postgresql://app@db/app\nAGMEM_DATABASE_URL=postgresql://a@h/m\n"
    )
    assert load_settings(_env_file=env_file).database_url == "postgresql://a@h/m"

    monkeypatch.setenv("DATABASE_URL", "postgresql://exported@h/m")
    assert load_settings(_env_file=env_file).database_url == "postgresql://exported@h/m"


def test_the_proxys_default_project_is_made_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    # From a .env, `~/shop` was kept verbatim: a project no sync or context request ever named.
    monkeypatch.setenv("HOME", "/home/dev")
    assert make_settings(proxy_default_project="~/shop/").proxy_default_project == "/home/dev/shop"


@pytest.mark.parametrize("key", ["AIzaS\u00e9cret-KEY-0042", "secret\x00KEY-0042", "AIza KEY-0042"])
def test_a_gemini_key_no_header_can_carry_is_refused_without_echoing_it(key: str) -> None:
    # Sent on, the client's errors quoted it (httpx's for a NUL, a UnicodeEncodeError's repr)
    # into stored errors and logs, on every Gemini path: refused where it is read instead.
    with pytest.raises(SettingsError) as raised:
        make_settings(gemini_api_key=key)
    message = str(raised.value)
    assert message.startswith("invalid setting GEMINI_API_KEY: ")
    assert "KEY-0042" not in message
