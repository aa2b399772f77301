"""The numbered migrations: from an empty database and from each earlier schema to the same one,
data kept; a failure half-way leaves the previous version as it was; two processes opening a
new database at once; a database from a newer chatgate refused with one line, by the daemon
and by the commands beside it."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from gateway.storage import Store
from gateway.storage.schema import migrations, statements
from tests.fakes.llm import FakeLLM
from tests.harness import gateway_env, run_until_it_exits

MIGRATIONS = migrations()
LATEST = MIGRATIONS[-1][0]
ROOT = Path(__file__).resolve().parents[1]


def made_by_release(path: Path, version: int) -> None:
    """A database as the release whose schema was `version` left it: migrations 1..version applied
    one script each (as chatgate did before migrations ran statement by statement)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:  # (closed: no connection left holding its WAL)
        db.execute("PRAGMA journal_mode=WAL")
        for number, sql in MIGRATIONS:
            if number <= version:
                db.executescript(f"BEGIN;\n{sql}\nPRAGMA user_version = {number};\nCOMMIT;")


def schema(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
                          " ORDER BY type, name").fetchall()


def version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA user_version").fetchone()[0]


def test_the_migrations_are_numbered_one_by_one_and_split_into_statements():
    assert [n for n, _ in MIGRATIONS] == list(range(1, LATEST + 1))
    for number, sql in MIGRATIONS:
        parts = statements(sql)
        assert parts and all(sqlite3.complete_statement(p) or not re.sub(r"--[^\n]*", "", p).strip()
                             for p in parts), number
        assert "".join(parts) == sql.rstrip()  # nothing lost or reordered (but the trailing blank)


async def test_every_migration_applies_to_an_empty_database(tmp_path):
    made_by_release(tmp_path / "reference.db", LATEST)
    store = await Store.open(tmp_path / "state.db")
    await store.close()
    assert version(tmp_path / "state.db") == LATEST
    assert schema(tmp_path / "state.db") == schema(tmp_path / "reference.db")


@pytest.mark.parametrize("earlier", range(1, LATEST))
async def test_a_database_of_each_earlier_schema_is_brought_up_to_date_with_its_rows(tmp_path, earlier: int):
    made_by_release(tmp_path / "reference.db", LATEST)
    path = tmp_path / "state.db"
    made_by_release(path, earlier)
    with sqlite3.connect(path) as db:  # a message a person sent under the older release
        db.execute("INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state,"
                   " received_at, updated_at) VALUES ('telegram', '1', '7', 'telegram:1', '{}', 'done', 1, 1)")
    store = await Store.open(path)
    try:
        row = await store.fetchrow("SELECT platform_message_id, state FROM inbox")
        assert tuple(row) == ("7", "done")
    finally:
        await store.close()
    assert version(path) == LATEST
    assert schema(path) == schema(tmp_path / "reference.db")


async def test_a_migration_that_fails_half_way_leaves_the_previous_version_intact(tmp_path):
    number, sql = next((n, s) for n, s in reversed(MIGRATIONS) if len(statements(s)) > 1
                       and re.search(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|VIEW|TRIGGER)", statements(s)[-1], re.I))
    path = tmp_path / "state.db"
    made_by_release(path, number - 1)
    last = re.search(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|VIEW|TRIGGER)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
                     statements(sql)[-1], re.I)
    assert last is not None
    with sqlite3.connect(path) as db:  # its last statement will find its name taken
        db.execute(f"CREATE VIEW {last.group(1)} AS SELECT 1")
    before = schema(path)
    with pytest.raises(sqlite3.OperationalError, match="already"):
        await Store.open(path)
    assert version(path) == number - 1
    assert schema(path) == before  # not one of its earlier statements stayed
    with sqlite3.connect(path) as db:
        db.execute(f"DROP VIEW {last.group(1)}")
    store = await Store.open(path)  # once the cause is gone, it applies whole
    await store.close()
    assert version(path) == LATEST


OPEN_AT_THE_SIGNAL = """
import asyncio, sys
from gateway.storage import Store

async def main():
    print("ready", flush=True)
    sys.stdin.readline()
    store = await Store.open(sys.argv[1])
    await store.close()

asyncio.run(main())
"""


async def test_processes_opening_a_new_database_at_once_end_with_one_correct_schema(tmp_path):
    made_by_release(tmp_path / "reference.db", LATEST)
    path = tmp_path / "state.db"
    openers = [subprocess.Popen([sys.executable, "-c", OPEN_AT_THE_SIGNAL, str(path)], cwd=ROOT, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(4)]
    try:
        for opener in openers:
            assert opener.stdout is not None and opener.stdout.readline().strip() == "ready"
        for opener in openers:  # all at once
            assert opener.stdin is not None
            opener.stdin.write("go\n")
            opener.stdin.flush()
        outcomes = [opener.communicate(timeout=60) for opener in openers]
    finally:
        for opener in openers:
            opener.kill()
    assert [opener.returncode for opener in openers] == [0] * 4, [err for _, err in outcomes]
    assert version(path) == LATEST
    assert schema(path) == schema(tmp_path / "reference.db")


# -- a database from a newer chatgate ---------------------------------------------------------


def from_the_future(path: Path) -> list[tuple[str, str, str]]:
    made_by_release(path, LATEST)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE added_later (x)")
        db.execute(f"PRAGMA user_version = {LATEST + 1}")
    return schema(path)


async def test_a_database_from_a_newer_chatgate_is_refused_with_one_line_and_left_alone(tmp_path):
    path = tmp_path / "state.db"
    made = from_the_future(path)
    async with FakeLLM() as llm:
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url)}
        status, lines = await run_until_it_exits(env)
        assert status == 1 and len(lines) == 1, lines
        assert lines[0].startswith("chatgate cannot start: ") and "made by a newer chatgate" in lines[0]
        assert f"schema version {LATEST + 1}" in lines[0]
        assert llm.requests == []
        for command in (["sessions", "list"], ["cron", "list"], ["pair", "approve", "telegram", "ABC123"]):
            done = subprocess.run([sys.executable, "-m", "gateway", *command], env=env, cwd=ROOT, capture_output=True,
                                  text=True, timeout=60)
            lines = (done.stdout + done.stderr).splitlines()
            assert done.returncode == 1 and len(lines) == 1 and "made by a newer chatgate" in lines[0], lines
    assert version(path) == LATEST + 1 and schema(path) == made  # nothing written into it


async def test_a_migration_waits_for_another_programs_lock_rather_than_fail(tmp_path):
    path = tmp_path / "state.db"
    made_by_release(path, LATEST - 1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        opening = asyncio.create_task(Store.open(path))
        await asyncio.sleep(0.5)  # (asserting it has not failed meanwhile: a write waits 0.1 s at a time)
        assert not opening.done()
        holder.rollback()
        store = await asyncio.wait_for(opening, 30)
        await store.close()
    finally:
        holder.close()
    assert version(path) == LATEST
