"""Settings: one class, read from the environment (and an optional .env file)."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.errors import validator_reason
from app.projects import canonical_project

EmbeddingProviderName = Literal["local", "gemini", "sentence-transformers"]

GOOGLE_GENAI_ENDPOINT = "https://generativelanguage.googleapis.com"


class AgmemDotEnv(DotEnvSettingsSource):
    """The `.env` of the working directory, without its bare `DATABASE_URL`.

    `agmem` runs in project folders (`sync`'s default project is the current folder), whose own
    `.env` often names the application's database as `DATABASE_URL`: read from there, `agmem
    serve` migrated our tables into the application's database. In a `.env`, our database is
    `AGMEM_DATABASE_URL`; an exported `DATABASE_URL` is still read.
    """

    def _read_env_files(self) -> Mapping[str, str | None]:
        found = super()._read_env_files()
        return {k: v for k, v in found.items() if k.upper() != "DATABASE_URL"}


class SettingsError(Exception):
    """A setting is missing or invalid; the message names the variable."""


def _url_ports(authority: int | None, query: str | tuple[str, ...] | None) -> list[str]:
    """Every port a DATABASE_URL names: its authority's, and its query's `port=` (a socket
    folder's URL, `postgresql://u@/db?host=/tmp&port=5433`), which libpq reads as a comma list
    (one a host; an empty one the default)."""
    ports = [] if authority is None else [str(authority)]
    given = (query,) if isinstance(query, str) else query or ()
    ports += [port.strip() for item in given for port in item.split(",") if port.strip()]
    return ports


class Settings(BaseSettings):
    """Every knob of the service. Environment names are given in `validation_alias`."""

    model_config = SettingsConfigDict(
        env_prefix="AGMEM_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        # `inf` passes every `ge=0` bound: AGMEM_SEARCH_VECTOR_WEIGHT=inf gave scores of null
        # over HTTP and AGMEM_SEARCH_RRF_K=inf scored every result 0. No setting wants one.
        allow_inf_nan=False,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        dotenv = dotenv_settings
        if isinstance(dotenv_settings, DotEnvSettingsSource):
            # Built from the one pydantic-settings made, which honours `_env_file=`.
            dotenv = AgmemDotEnv(
                settings_cls,
                env_file=dotenv_settings.env_file,
                env_file_encoding=dotenv_settings.env_file_encoding,
            )
        return init_settings, env_settings, dotenv, file_secret_settings

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "AGMEM_DATABASE_URL")
    )
    home: Path = Field(default=Path("~/.antigravity-mem"))
    host: str = "127.0.0.1"
    port: int = Field(default=37777, ge=0, le=65535)  # 0: a free port, printed by serve
    api_token: str | None = None
    # Comma-separated in the environment: more names a loopback-bound service answers to.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Comma-separated: more browser origins (`https://app.example`, `*` patterns) that may call.
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # A request whose next bytes do not come this long is a 408, and closed (app/cli/stalls.py).
    request_idle_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Open connections `agmem serve` answers at once; past it a request is a 503 (app/cli/wire.py).
    max_connections: int = Field(default=1000, ge=1, le=1_000_000)
    # Comma-separated addresses or networks whose X-Forwarded-Host is believed (app/cli/wire.py).
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # One log line per refusal cause at most this often, then a count (app/cli/refusals.py).
    refusal_log_seconds: float = Field(default=10.0, gt=0, le=3600)
    # A refused client's quiet that ends the linger after its answer (app/cli/stalls.py).
    linger_quiet_seconds: float = Field(default=2.0, gt=0, le=30)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    gemini_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("GEMINI_API_KEY", "AGMEM_GEMINI_API_KEY")
    )
    gemini_base_url: str | None = None
    gemini_upstream: str = GOOGLE_GENAI_ENDPOINT
    gemini_model: str = "gemini-2.5-flash"

    embedding_provider: EmbeddingProviderName = "local"
    embedding_model: str | None = None
    embedding_dims: int | None = Field(default=None, ge=1, le=2000)

    db_pool_size: int = Field(default=10, ge=1, le=200)

    # Worker: durable compression, summaries, embeddings, purges and syncs (docs/worker.md).
    worker_concurrency: int = Field(default=4, ge=1, le=64)
    worker_max_attempts: int = Field(default=5, ge=1, le=50)
    worker_lease_seconds: float = Field(default=120.0, gt=0, le=86_400)
    worker_backoff_base_seconds: float = Field(default=5.0, gt=0, le=3600)
    worker_backoff_max_seconds: float = Field(default=900.0, gt=0, le=86_400)
    worker_poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    worker_purge_interval_seconds: float = Field(default=60.0, gt=0, le=86_400)
    # A call whose result never comes (docs/worker.md, "A call without its result"): given up on
    # this long after its session ended, or after this age in a session nobody ends.
    worker_result_grace_seconds: float = Field(default=30.0, ge=0, le=3600)
    worker_result_timeout_seconds: float = Field(default=6 * 3600.0, gt=0, le=30 * 86_400)
    # A session with no activity this long that nobody ended is ended by the worker, at its last
    # activity, and summarised (a crashed IDE never sends the end).
    worker_session_idle_seconds: float = Field(default=6 * 3600.0, gt=0, le=30 * 86_400)
    # Comma-separated in the environment; these tools' observations are never sent to Gemini.
    worker_skip_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["list_dir", "list_directory", "pwd"]
    )
    worker_min_compress_tokens: int = Field(default=120, ge=0)
    worker_max_input_chars: int = Field(default=24_000, ge=1000, le=1_000_000)
    gemini_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    gemini_requests_per_minute: int = Field(default=60, ge=1, le=100_000)
    gemini_max_concurrent: int = Field(default=4, ge=1, le=256)
    gemini_daily_token_budget: int = Field(default=2_000_000, ge=0)
    gemini_failure_threshold: int = Field(default=5, ge=0)
    gemini_failure_cooldown_seconds: float = Field(default=300.0, ge=0, le=86_400)
    # Sync of memory files and transcripts (app/sync): folders, caps, chunking, embedding batches.
    sync_memory_dir: str = "."
    sync_sessions_dir: str = "sessions"
    sync_max_file_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    sync_chunk_tokens: int = Field(default=400, ge=32, le=8000)
    sync_chunk_overlap_tokens: int = Field(default=80, ge=0, le=4000)
    sync_tool_output_chars: int = Field(default=2000, ge=100, le=1_000_000)
    sync_watch_debounce_ms: int = Field(default=1500, ge=50, le=600_000)
    # A large initial sync builds the model's HNSW index once instead of row by row (docs/sync.md).
    sync_bulk_index_min_chunks: int = Field(default=2000, ge=0)
    sync_bulk_index_max_rows: int = Field(default=20_000, ge=0)
    gemini_embed_batch_threshold: int = Field(default=5000, ge=1)
    gemini_embed_max_retries: int = Field(default=5, ge=0, le=20)
    gemini_batch_poll_seconds: float = Field(default=10.0, gt=0, le=3600)
    gemini_batch_timeout_seconds: float = Field(default=24 * 3600.0, gt=0)
    # Search and context: candidates per branch, relevance floors, RRF weights, context budget.
    search_min_candidates: int = Field(default=40, ge=1, le=1000)
    search_rrf_k: float = Field(default=60.0, gt=0)
    search_vector_weight: float = Field(default=1.0, ge=0)
    search_keyword_weight: float = Field(default=1.0, ge=0)
    search_vector_floor: float = Field(default=0.0, ge=-1, le=1)
    search_keyword_floor: float = Field(default=0.0, ge=0)
    search_rank_normalization: int = Field(default=5, ge=0, le=63)
    search_exact_weight: float = Field(default=1.0, ge=0)
    search_pair_tier_weight: float = Field(default=0.5, ge=0, le=1)
    search_single_tier_weight: float = Field(default=0.1, ge=0, le=1)
    # Search ranking: `idf` weighs each query word by its rarity (BM25's IDF); `ts_rank` is cheaper.
    search_rank_function: Literal["idf", "ts_rank"] = "idf"
    context_budget: int = Field(default=2000, ge=50, le=100_000)
    context_sessions: int = Field(default=5, ge=0, le=100)
    # A context hit needs this cosine similarity or two of the prompt's words; -1 keeps every hit.
    context_min_similarity: float = Field(default=0.2, ge=-1, le=1)

    # Gemini proxy (app/proxy): default project, session idle window, memory budget, timeouts.
    proxy_default_project: str | None = None
    proxy_session_idle_seconds: int = Field(default=1800, ge=1, le=7 * 24 * 3600)
    proxy_context_budget: int = Field(default=2000, ge=50, le=100_000)
    proxy_context_timeout_ms: int = Field(default=25, ge=1, le=60_000)
    proxy_first_context_timeout_ms: int = Field(default=1500, ge=1, le=60_000)
    proxy_context_cache_seconds: float = Field(default=60.0, ge=0, le=86_400)
    proxy_upstream_timeout_seconds: float = Field(default=300.0, gt=0, le=3600)

    # Key/value memories: how often reads' access counts are written (app/memories/reads.py).
    memory_access_flush_ms: int = Field(default=500, ge=10, le=60_000)

    # Capture (sessions and observations): size caps, nesting limit, excluded projects.
    capture_max_field_chars: int = Field(default=65_536, ge=1_024, le=16_777_216)
    capture_max_depth: int = Field(default=64, ge=2, le=500)
    capture_exclude_projects: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Capture group commit: writer tasks (one connection each) and statements per transaction.
    capture_writers: int = Field(default=2, ge=1, le=64)
    capture_batch_max: int = Field(default=64, ge=1, le=1000)
    # Off: an observation is acknowledged once committed, before its WAL reaches the disk.
    capture_synchronous_commit: bool = True

    @field_validator("home", mode="before")
    @classmethod
    def _refuse_blank_home(cls, value: object) -> object:
        # `AGMEM_HOME=$UNSET_VARIABLE` was the path "", the current folder: run in a project, a
        # command started a database of its own there (./pgdata), and each folder had another.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for ~/.antigravity-mem, or name a folder")
        return value

    @field_validator("home")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("must be a postgresql:// URL")
        try:
            url = make_url(value.strip())
        except (ArgumentError, ValueError) as error:
            raise ValueError(f"is not a valid URL ({error})") from None
        # libpq's own refusal came at the first connection, as "database unreachable" (exit 1),
        # and port 0 connected to 5432.
        for port in _url_ports(url.port, url.query.get("port")):
            if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
                raise ValueError(f"port {port} is not a TCP port (1-65535)")
        return value.strip()

    @field_validator("host")
    @classmethod
    def _bare_host(cls, value: str) -> str:
        # uvicorn binds every interface for an empty host: an unset-by-mistake variable
        # must not quietly open the service to the network.
        host = bare_host(value)
        if not host:
            raise ValueError("is empty: set the address to bind, e.g. 127.0.0.1")
        return host

    @field_validator("gemini_upstream")
    @classmethod
    def _check_upstream(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("api_token", "gemini_api_key", "gemini_base_url", "proxy_default_project")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        return value.strip()

    @field_validator("gemini_base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        # Checked as the proxy's upstream is: `notaurl` was taken, and with a key every
        # compression, summary, briefing and embedding failed on "missing an 'http://' or
        # 'https://' protocol", retried and logged.
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("gemini_api_key")
    @classmethod
    def _key_a_header_can_carry(cls, value: str | None) -> str | None:
        # Sent on, a key with a space, a control or a non-ASCII character failed in the client,
        # whose errors quote the header (httpx's for a NUL, a UnicodeEncodeError's repr) into
        # stored errors and logs on every Gemini path. The message must not echo it either.
        if value is not None and not _HEADER_SAFE_KEY.fullmatch(value):
            raise ValueError(
                "holds a space, a control or a non-ASCII character, which no HTTP header can "
                "carry (a pasted quote or an invisible character?); the key is not shown"
            )
        return value

    @field_validator("proxy_default_project")
    @classmethod
    def _absolute_project(cls, value: str | None) -> str | None:
        # Read on this machine, for clients on it (Gemini CLI): `~/shop` or `.` in a .env meant
        # the folder, and kept verbatim it was a project no sync or context request ever named.
        if value is None:
            return None
        return canonical_project(os.path.abspath(os.path.expanduser(value)))

    @field_validator("worker_skip_tools", mode="before")
    @classmethod
    def _split_tools(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        # An origin has no path: `https://app.example/`, as copied from an address bar, is one.
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list):
            return [
                part.strip().lower().rstrip("/")
                for part in value
                if isinstance(part, str) and part.strip()
            ]
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_networks(cls, value: object) -> object:
        parts = value.split(",") if isinstance(value, str) else value
        if not isinstance(parts, list):
            return value
        networks = []
        for part in (str(part).strip() for part in parts):
            if part:
                try:
                    networks.append(str(ipaddress.ip_network(part, strict=False)))
                except ValueError:
                    raise ValueError(f"{part!r} is not an IP address or network") from None
        return networks

    @field_validator("sync_chunk_overlap_tokens")
    @classmethod
    def _overlap_below_size(cls, value: int, info: ValidationInfo) -> int:
        size = info.data.get("sync_chunk_tokens")
        if isinstance(size, int) and value >= size:
            raise ValueError("must be smaller than AGMEM_SYNC_CHUNK_TOKENS")
        return value

    @field_validator("capture_exclude_projects", mode="before")
    @classmethod
    def _split_globs(cls, value: object) -> object:
        # From the environment: comma-separated globs, e.g. "/home/*/secret*,/srv/clients/*",
        # spelled as project paths are (`C:/Users/*/x/` matches the key `C:\Users\dev\x`).
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            return [canonical_project(part) if isinstance(part, str) else part for part in value]
        return value

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def embedded_pgdata(self) -> Path | None:
        """The data folder of the embedded server when it is the database (no DATABASE_URL):
        what a long-running command supervises. None on a DATABASE_URL, never started by agmem."""
        return self.pgdata if self.database_url is None else None

    @property
    def binds_loopback_only(self) -> bool:
        return is_loopback_host(self.host)


def bare_host(host: str) -> str:
    """`[::1]` is how an IPv6 address is written in a URL; the socket wants `::1`."""
    return host.strip().removeprefix("[").removesuffix("]")


def is_loopback_host(host: str) -> bool:
    """True when binding `host` exposes the service to this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_HEADER_SAFE_KEY = re.compile(r"[!-~]+")

_ENV_NAMES = {
    "database_url": "DATABASE_URL",
    "gemini_api_key": "GEMINI_API_KEY",
}


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "?"
    # Fields read through an alias report the alias (already the variable's name).
    env_name = field if field.isupper() else _ENV_NAMES.get(field, f"AGMEM_{field.upper()}")
    return f"invalid setting {env_name}: {validator_reason(str(first['msg']))}"


def load_settings(**overrides: object) -> Settings:
    """Read settings, turning validation errors into one line that names the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
