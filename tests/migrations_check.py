"""`make test` step: `alembic upgrade head` then `alembic check` on a fresh test database."""

from __future__ import annotations

import sys

from app.db import migrate
from tests.postgres import choose_kind, create_database, drop_database, start_server


def main() -> int:
    with start_server(choose_kind()) as server:
        url = create_database(server, prefix="agmem_check")
        try:
            migrate.upgrade(url)
            drift = migrate.check(url)
        finally:
            drop_database(server, url)
    if drift:
        print(f"alembic check: models and migrations differ: {drift}", file=sys.stderr)
        return 1
    print(f"alembic check: no drift between models and migrations (postgres: {server.kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
