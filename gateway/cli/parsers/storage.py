"""`chatgate storage migrate --to URL`: the home's SQLite database copied into an empty PostgreSQL one."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    storage = sub.add_parser("storage", help="move the state from SQLite to PostgreSQL")
    storage_sub = storage.add_subparsers(dest="action", required=True)
    migrate = storage_sub.add_parser(
        "migrate", help="copy the home's SQLite database into an empty PostgreSQL database (chatgate stopped)",
        description="Copies every table of $CHATGATE_HOME/state.db into an empty PostgreSQL database, all or "
                    "nothing, while the daemon is stopped. The config is not changed: set storage.url afterwards. "
                    "state.db is left as it was (keep it: there is no command back to SQLite).")
    migrate.add_argument("--to", metavar="URL", help="postgresql://user[:password]@host[:port]/dbname (default: "
                                                     "storage.url, e.g. from CHATGATE_STORAGE__URL)")
    handled_by(migrate, "gateway.cli.storage_migrate:migrate")
