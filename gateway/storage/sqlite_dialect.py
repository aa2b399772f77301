"""What only SQLite takes, by name: every piece of a group's SQL that another engine writes otherwise.

The groups write one SQL text for every engine (gateway.storage.connection says how); where SQLite's
own functions or syntax are needed, a group takes the piece from here, so that an engine with another
dialect (PostgreSQL) is one module beside this with the same names. Each says what it does and what
PostgreSQL needs instead.

Besides these, SQLite-only as a whole: the engine (`gateway.storage.database`: group commit, PRAGMAs,
locks), the migrations (`gateway.storage.schema`, `rebuild`, `migrations/`), the file's upkeep
(`gateway.storage.upkeep`: incremental vacuum, WAL checkpoints) and the online backup (`Store.backup`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

# -- lists handed over as one argument ------------------------------------------------------------------

IN_LIST = "IN (SELECT value FROM json_each(?))"
"""`x {IN_LIST}`: x is one of the values of the one argument `listed(values)` (a JSON array).
PostgreSQL: `x = ANY(?)` with the values as an array argument."""


def listed(values: Sequence[Any]) -> Any:
    """The argument `IN_LIST` takes. PostgreSQL: the list itself."""
    return json.dumps(list(values))


# -- JSON kept in TEXT columns (intents, effects, a reply's message ids) ---------------------------------


def json_object(*pairs: tuple[str, str]) -> str:
    """A JSON object of (key, SQL expression) pairs, as text. PostgreSQL: `jsonb_build_object(...)::text`."""
    return "json_object(" + ", ".join(f"'{key}', {value}" for key, value in pairs) + ")"


def json_boolean(condition: str) -> str:
    """A JSON true or false (in `json_object`) from an SQL condition. PostgreSQL: the condition itself."""
    return f"json(CASE WHEN {condition} THEN 'true' ELSE 'false' END)"


def json_field(document: str, key: str) -> str:
    """A top-level field of a JSON object held as text (SQL NULL when it has none), as an SQL value.
    PostgreSQL: `({document})::jsonb ->> '{key}'` (text: compare it with text)."""
    return f"json_extract({document}, '$.{key}')"


def json_items(document: str, alias: str) -> str:
    """A FROM item: the elements of a JSON array held as text, one row each, its column `{alias}.value`.
    PostgreSQL: `jsonb_array_elements_text(({document})::jsonb) AS {alias}(value)`."""
    return f"json_each({document}) AS {alias}"


def json_number(document: str, key: str) -> str:
    """A top-level number field of a JSON object held as text, as an SQL number (NULL when it has none).
    PostgreSQL: `(({document})::jsonb ->> '{key}')::bigint`."""
    return f"json_extract({document}, '$.{key}')"


def json_appended(document: str) -> str:
    """The JSON array `document` (NULL: an empty one) with one argument (a string) appended, as text.
    PostgreSQL: `(coalesce({document}, '[]')::jsonb || to_jsonb(?::text))::text`."""
    return f"json_insert(coalesce({document}, '[]'), '$[#]', ?)"


# -- dates -------------------------------------------------------------------------------------------------


def utc_day(seconds: str) -> str:
    """The UTC day (YYYY-MM-DD text) of a Unix time. PostgreSQL:
    `to_char(to_timestamp({seconds}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')`."""
    return f"date({seconds}, 'unixepoch')"


# -- rows in the order they were written -------------------------------------------------------------------

INSERTION_ORDER = "rowid"
"""A table's rows in the order they were inserted (a tie-break among equal times) where it has no id of
its own (`pairing_codes`). PostgreSQL: a column for it (an identity) in its schema."""

# -- full-text search over transcripts ---------------------------------------------------------------------


def search(query: str, *, platform: str, user_id: str, limit: int,
           session_id: int | None) -> tuple[Any, ...] | None:
    """The statement and its arguments for `SessionStore.search`: transcript messages of sessions the person
    took part in (`session_id`: of that one only) holding every word of `query`, each quoted (FTS5 takes them
    literally), best first, with a snippet (`snip`) and `session_id, role, created_at`; None: no words.
    The index is the FTS5 table `messages_fts`, kept by triggers on `messages` (migration 001).
    PostgreSQL: the tsvector column `messages.search_vector` (gateway.storage.postgres_dialect)."""
    terms = " ".join('"' + word.replace('"', '""') + '"' for word in query.split() if word)
    if not terms:
        return None
    among, who = ("= ?", (session_id,)) if session_id is not None else \
        ("IN (SELECT DISTINCT session_id FROM messages WHERE platform = ? AND user_id = ?)", (platform, user_id))
    return (f"SELECT m.session_id, m.role, snippet(messages_fts, 0, '[', ']', '…', 12) AS snip, m.created_at"
            f" FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
            f" WHERE messages_fts MATCH ? AND m.role IN ('user', 'assistant') AND m.session_id {among}"
            f" ORDER BY rank LIMIT ?", terms, *who, limit)


# -- the database's clock ---------------------------------------------------------------------------------

NOW_SECONDS = "((julianday('now') - 2440587.5) * 86400.0)"
"""Seconds since the epoch by the database's clock (to the millisecond), so that instances on machines whose
clocks differ agree on when a lease ends. PostgreSQL: `extract(epoch from clock_timestamp())`."""

# -- instances sharing a database ------------------------------------------------------------------------

INSTANCE = "NULL"
"""The gateway instance whose connection runs the statement (PostgreSQL: set when it connects); SQLite's database is
one daemon's, named by none."""
ADVISORY_LOCK: str | None = None
"""A statement that takes a lock (its one argument, a number) until the transaction ends, so that several
instances' claims go one at a time (PostgreSQL: `pg_advisory_xact_lock`); None: SQLite, one daemon, one writing
transaction at a time already."""

# -- a read-modify-write's rows ------------------------------------------------------------

FOR_UPDATE = ""
"""`SELECT ... {FOR_UPDATE}`: the rows read are locked until the transaction ends, so another writer's read-modify-
write of them waits (a document's `update`). SQLite: nothing (one writer at a time holds the whole database).
PostgreSQL: ` FOR UPDATE`."""

# -- another process's commits -----------------------------------------------------------------------------

DATA_VERSION = "PRAGMA data_version"
"""A number that changes when another connection commits (the cron timers reload their jobs then).
PostgreSQL: nothing alike; a counter row bumped by the writes that matter, or LISTEN/NOTIFY."""
