"""PostgreSQL's schema (migrations/postgres/: 001_schema.sql and the numbered migrations after it) against
SQLite's after its numbered migrations: the same tables, the same columns in the same order (a positional INSERT or `SELECT *` reads the same on
both) with the same types, nullability and defaults, the same keys and indexes; the version they share; and
the full-text search that replaces FTS5, finding what SQLite's finds.

Only the differences named here are allowed: a column or index added to one schema and not the other fails."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import asyncpg

from gateway.storage import Store, postgres_dialect
from gateway.storage.postgres_engine import SCHEMA_LOCK, migrate, numbered
from gateway.storage.schema import migrations
from tests.harness import eventually, web_message
from tests.pg import pg_url  # noqa: F401  (the fixture)

PG_ONLY_TABLES = {"chatgate_schema"}  # the version (SQLite: PRAGMA user_version)
PG_ONLY_COLUMNS = {("messages", "search_vector")}  # what SQLite's FTS5 table messages_fts holds
PG_ONLY_INDEXES = {"messages_search", "chatgate_schema_one_row"}
TYPES = {"INTEGER": {"bigint", "integer"}, "REAL": {"double precision"}, "TEXT": {"text"}}
# integer keys the code gives (no identity)
GIVEN_KEYS = {("health", "id"), ("review_counters", "session_id"), ("document_changes", "id")}
# the instance whose connection writes the row (several instances; SQLite's database is one daemon's: none)
PG_ONLY_DEFAULTS = {("outbox", "sender"): "current_setting('chatgate.instance'::text, true)"}

Schema = dict[str, Any]


def sqlite_schema(path: Path) -> Schema:
    """Tables (FTS5's virtual and shadow tables aside): columns in order as (name, type, not null, default,
    primary key); named indexes as (table, columns, unique, partial); the column sets each table keeps
    unique (its primary key among them)."""
    tables: dict[str, list[tuple]] = {}
    indexes: dict[str, tuple] = {}
    unique: set[tuple] = set()
    with closing(sqlite3.connect(path)) as db:
        names = [r[1] for r in db.execute("PRAGMA table_list") if r[2] == "table" and not r[1].startswith("sqlite_")]
        for table in names:
            info = db.execute(f"PRAGMA table_info({table})").fetchall()
            tables[table] = [(name, kind, bool(notnull), default, bool(pk)) for _, name, kind, notnull, default, pk in info]
            keys = [name for _, name, _, _, _, pk in sorted(info, key=lambda r: r[5]) if pk]
            for _, name, is_unique, origin, partial in db.execute(f"PRAGMA index_list({table})"):
                columns = tuple(r[2] for r in db.execute(f"PRAGMA index_info({name})"))
                if is_unique:
                    unique.add((table, columns))
                if origin == "c":
                    indexes[name] = (table, columns, bool(is_unique), bool(partial))
            if keys:
                unique.add((table, tuple(keys)))  # (a rowid key has no index of its own)
    return {"tables": tables, "indexes": indexes, "unique": unique}


_PG_COLUMNS = """
SELECT c.table_name, c.column_name, c.data_type, c.is_nullable = 'NO' AS not_null, c.column_default,
       c.is_identity = 'YES' AS identity, c.identity_generation,
       EXISTS (SELECT 1 FROM information_schema.table_constraints t
               JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
               WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name
               AND k.column_name = c.column_name) AS pk
FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position
"""
_PG_INDEXES = """
SELECT i.relname AS name, t.relname AS table_name, x.indisunique AS is_unique, x.indpred IS NOT NULL AS partial,
       EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) AS constraint_index,
       array(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum ORDER BY k.n) AS columns
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace s ON s.oid = t.relnamespace WHERE s.nspname = 'public'
"""


async def pg_schema(url: str) -> tuple[Schema, list[asyncpg.Record]]:
    """As `sqlite_schema`, from PostgreSQL's catalog, SQLite's spelling of types and defaults mapped back
    where they are the same; and the columns as the catalog says them."""
    db = await asyncpg.connect(url)
    try:
        columns, found = await db.fetch(_PG_COLUMNS), await db.fetch(_PG_INDEXES)
    finally:
        await db.close()
    tables: dict[str, list[tuple]] = {}
    for c in columns:
        default = c["column_default"].removesuffix("::text") if c["column_default"] else None
        tables.setdefault(c["table_name"], []).append((c["column_name"], c["data_type"], c["not_null"], default, c["pk"]))
    indexes = {r["name"]: (r["table_name"], tuple(r["columns"]), r["is_unique"], r["partial"])
               for r in found if not r["constraint_index"]}
    unique = {(r["table_name"], tuple(r["columns"])) for r in found if r["is_unique"]}
    return {"tables": tables, "indexes": indexes, "unique": unique}, list(columns)


async def _schemas(tmp_path: Path, url: str) -> tuple[Schema, Schema, list[asyncpg.Record]]:
    store = await Store.open(tmp_path / "state.db")
    await store.close()
    db = await asyncpg.connect(url)
    try:
        await migrate(db, "test")
    finally:
        await db.close()
    return sqlite_schema(tmp_path / "state.db"), *await pg_schema(url)


async def test_postgresql_has_sqlites_tables_columns_keys_and_indexes(tmp_path, pg_url):
    lite, pg, _ = await _schemas(tmp_path, pg_url)
    assert set(pg["tables"]) - set(lite["tables"]) == PG_ONLY_TABLES
    assert set(lite["tables"]) - set(pg["tables"]) == set()
    for table, columns in lite["tables"].items():
        ours = [c for c in pg["tables"][table] if (table, c[0]) not in PG_ONLY_COLUMNS]
        assert [c[0] for c in ours] == [c[0] for c in columns], table  # the same names, in the same order
        for (name, kind, notnull, default, pk), (_, pg_kind, pg_notnull, pg_default, pg_pk) in zip(columns, ours):
            assert pg_kind in TYPES[kind], (table, name, pg_kind)
            expected = PG_ONLY_DEFAULTS.get((table, name), default)
            assert (pg_notnull, pg_default, pg_pk) == (notnull or pk, expected, pk), (table, name)
    assert [(t, c[0]) for t, cs in pg["tables"].items() for c in cs
            if (t, c[0]) in PG_ONLY_COLUMNS] == sorted(PG_ONLY_COLUMNS)
    assert {n: i for n, i in pg["indexes"].items() if n not in PG_ONLY_INDEXES} == lite["indexes"]
    assert set(pg["indexes"]) >= PG_ONLY_INDEXES
    assert {u for u in pg["unique"] if u[0] not in PG_ONLY_TABLES} == lite["unique"]


async def test_sqlites_integer_keys_are_identities_that_take_a_given_id(tmp_path, pg_url):
    """The code never gives these ids, but a copy from SQLite does: BY DEFAULT, not ALWAYS."""
    lite, _, columns = await _schemas(tmp_path, pg_url)
    rowid_keys = {(t, c[0]) for t, cs in lite["tables"].items() for c in cs
                  if c[4] and c[1] == "INTEGER" and sum(x[4] for x in cs) == 1}
    identities = {(c["table_name"], c["column_name"]): c["identity_generation"] for c in columns if c["identity"]}
    assert set(identities) == rowid_keys - GIVEN_KEYS
    assert set(identities.values()) == {"BY DEFAULT"}
    db = await asyncpg.connect(pg_url)
    try:
        await db.execute("INSERT INTO dead_letters (id, platform, ref, payload, reason, created_at)"
                         " VALUES (41, 'telegram', '', '{}', 'test', 0)")
        await db.execute("SELECT setval(pg_get_serial_sequence('dead_letters', 'id'), 41)")
        assert await db.fetchval("INSERT INTO dead_letters (platform, ref, payload, reason, created_at)"
                                 " VALUES ('telegram', '', '{}', 'test', 0) RETURNING id") == 42
    finally:
        await db.close()


async def test_the_postgresql_schema_is_at_sqlites_latest_version(pg_url):
    """The two engines' versions line up: a new SQLite migration needs its PostgreSQL counterpart."""
    db = await asyncpg.connect(pg_url)
    try:
        await migrate(db, "test")
        assert [tuple(r) for r in await db.fetch("SELECT version FROM chatgate_schema")] == [(migrations()[-1][0],)]
        try:
            await db.execute("INSERT INTO chatgate_schema (version) VALUES (21)")
            raise AssertionError("a second version row was taken")
        except asyncpg.UniqueViolationError:
            pass
    finally:
        await db.close()


# Full-text search -------------------------------------------------------------------------------------------

SESSIONS = [(1, "telegram:dm:101"), (2, "telegram:dm:101:2"), (3, "discord:dm:7")]
MESSAGES = [  # (session, role, platform, user, content)
    (1, "user", "telegram", "101", "Deploying the service on Friday, after the review"),
    (1, "assistant", None, None, "The Café at example.com opens at 9; ask Zoë"),
    (1, "tool", None, None, "friday deploy cafe: tool output is never searched"),
    (2, "user", "telegram", "101", "The Friday deploy went fine (deploy-log: ok)"),
    (3, "user", "discord", "7", "friday deploy on another person's chat"),
]
QUERIES = ["friday", "DEPLOY", "deploy friday", "deploy-log", "cafe", "zoe", "example", "example.com", "com example",
           "deplo", "deploy*", "friday -deploy", "friday or", '"friday"', "  ", "ok)"]


async def _fill_sqlite(store: Store) -> None:
    for sid, key in SESSIONS:
        await store.execute("INSERT INTO sessions (id, key, platform, chat_id, chat_type, created_at, updated_at)"
                            " VALUES (?, ?, ?, ?, 'dm', 0, 0)", sid, key, key.split(":")[0], key)
    for n, (sid, role, platform, user, content) in enumerate(MESSAGES, 1):
        await store.execute("INSERT INTO messages (session_id, role, platform, user_id, content, created_at)"
                            " VALUES (?, ?, ?, ?, ?, ?)", sid, role, platform, user, content, n)


async def _fill_postgres(db: asyncpg.Connection) -> None:
    await migrate(db, "test")
    await db.executemany("INSERT INTO sessions (id, key, platform, chat_id, chat_type, created_at, updated_at)"
                         " VALUES ($1, $2, $3, $2, 'dm', 0, 0)", [(s, k, k.split(":")[0]) for s, k in SESSIONS])
    await db.executemany("INSERT INTO messages (session_id, role, platform, user_id, content, created_at)"
                         " VALUES ($1, $2, $3, $4, $5, $6)", [(*m, n) for n, m in enumerate(MESSAGES, 1)])


async def _pg_search(db: asyncpg.Connection, query: str, **where: Any) -> list[asyncpg.Record]:
    """`SessionStore.search`'s statement on PostgreSQL (its dialect's), run on `db`."""
    statement = postgres_dialect.search(query, platform="telegram", user_id="101", limit=10,
                                        session_id=where.get("session_id"))
    return [] if statement is None else await db.fetch(numbered(statement[0]), *statement[1:])


async def test_postgresql_search_finds_what_sqlites_finds(tmp_path, pg_url):
    """Each word a whole word, all of them in the message, case and diacritics aside, a word's punctuated
    parts in order; only the asker's sessions, only what people and the agent said."""
    store = await Store.open(tmp_path / "state.db")
    db = await asyncpg.connect(pg_url)
    try:
        await _fill_sqlite(store)
        await _fill_postgres(db)
        for query in QUERIES:
            for where in ({}, {"session_id": 1}):
                lite = await store.sessions.search(query, platform="telegram", user_id="101", **where)
                pg = await _pg_search(db, query, **where)
                assert sorted((h.session_id, h.role, h.created_at) for h in lite) == \
                    sorted((r["session_id"], r["role"], r["created_at"]) for r in pg), (query, where)
        found = {query: sorted(r["created_at"] for r in await _pg_search(db, query)) for query in QUERIES}
    finally:
        await db.close()
        await store.close()
    assert found["friday"] == [1, 4] and found["DEPLOY"] == [4] and found["cafe"] == found["zoe"] == [2]
    assert found["example"] == found["example.com"] == [2] and found["com example"] == [2]
    assert found["deplo"] == found["friday or"] == []  # whole words, and no operators: as on SQLite


async def test_postgresql_search_marks_the_word_and_its_index_answers_a_prefix(pg_url):
    """The snippet marks the match and where the message was cut, as SQLite's does; the column keeps words whole and unstemmed, so a
    prefix query (`word:*`, FTS5's `word*`) is answered by the index, should search ever offer one."""
    db = await asyncpg.connect(pg_url)
    try:
        await _fill_postgres(db)
        [short] = await _pg_search(db, "review")
        assert short["snip"] == "Deploying the service on Friday, after the [review]"  # (SQLite's, too)
        await db.execute("INSERT INTO messages (session_id, role, content, created_at) VALUES (1, 'user', $1, 6)",
                         " ".join(f"w{n}" for n in range(40)) + "\n")
        [cut] = await _pg_search(db, "w20")
        assert cut["snip"].startswith("…") and cut["snip"].endswith("…") and "[w20]" in cut["snip"]
        assert len(cut["snip"].split()) in (11, 12)
        [end] = await _pg_search(db, "w39")
        assert end["snip"].startswith("…") and end["snip"].endswith("[w39]")
        await db.execute("SET enable_seqscan = off")  # (five rows: without this the table is read instead)
        plan = "\n".join(r[0] for r in await db.fetch(
            "EXPLAIN SELECT id FROM messages WHERE search_vector @@ to_tsquery('chatgate_search', 'deplo:*')"))
        assert "messages_search" in plan
        prefixed = await db.fetch("SELECT created_at FROM messages"
                                  " WHERE search_vector @@ to_tsquery('chatgate_search', 'deplo:*') ORDER BY id")
        assert [r["created_at"] for r in prefixed] == [1, 4, 5]
    finally:
        await db.close()


async def test_a_message_too_big_for_a_tsvector_is_still_stored(pg_url):
    """A tsvector holds at most 1 MiB: the column reads a message's first 100,000 characters, so an insert
    never fails for the size of what was said (300,000 distinct words here)."""
    db = await asyncpg.connect(pg_url)
    try:
        await _fill_postgres(db)
        huge = " ".join(f"w{n:06d}x" for n in range(300_000))
        for role in ("assistant", "tool"):
            await db.execute("INSERT INTO messages (session_id, role, content, created_at) VALUES (1, $1, $2, 9)",
                             role, huge)
        assert [r["role"] for r in await _pg_search(db, "w000001x")] == ["assistant"]
        assert await _pg_search(db, "w299999x") == []  # (past the first 100,000 characters)
    finally:
        await db.close()


async def test_two_instances_opening_an_empty_database_at_once_create_the_schema_once(pg_url):
    """Both opens wait for the schema's advisory lock (held here until both wait for it); the first to get it
    creates the schema, the other finds it made (a second creation would fail on its first CREATE TABLE),
    and both work afterwards on the same tables."""
    holder = await asyncpg.connect(pg_url)
    stores: list[Store] = []
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", SCHEMA_LOCK)
        opens = [asyncio.create_task(Store.open("", url=pg_url)) for _ in range(2)]

        async def both_wait() -> bool:
            return await holder.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                         " AND NOT granted AND database = (SELECT oid FROM pg_database"
                                         " WHERE datname = current_database())") == 2
        await eventually(both_wait, 10, what="both opens waiting for the schema lock")
        await holder.execute("SELECT pg_advisory_unlock($1)", SCHEMA_LOCK)
        stores = list(await asyncio.wait_for(asyncio.gather(*opens), 30))
        assert await holder.fetch("SELECT version FROM chatgate_schema") == [(migrations()[-1][0],)]
        first, second = stores
        inbox_id = await first.inbox.add(web_message(1), "web:c1")
        assert [u.inbox_id for u in await second.inbox.unfinished()] == [inbox_id]
    finally:
        for store in stores:
            await store.close()
        await holder.close()
