"""`chatgate storage migrate --to URL`: a home's SQLite database moved into an empty PostgreSQL one.

The home is made by the real gateway (conversations over the web chat with the fake LLM, an approval
rule, a scheduled job run, a pairing, token usage), then stopped; the command runs as a user runs it (a
process of its own). After it, every table holds on PostgreSQL what it held on SQLite, a transcript is
searchable, new rows get ids past the copied ones, and a gateway started on the PostgreSQL database
carries the old conversation on. Refusals are one line, never the password, and leave the database
as it was; so does a failure in the middle of the copy.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agent.skills import render
from gateway.access.pairing import Pairing
from gateway.ops.process import HomeLock, daemon_pid
from gateway.storage import Store
from gateway.storage.copy import SKIPPED
from gateway.storage.postgres_engine import schema_version
from tests import harness
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Daemon, Tab, eventually, free_port, is_prompt, press, start_gateway
from tests.pg import pg_url  # noqa: F401  (the fixture)


def migrate(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`chatgate storage migrate ARGS` on `home`, in a process of its own, with no CHATGATE_ setting but the home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    return subprocess.run([sys.executable, "-m", "gateway", "storage", "migrate", *args], capture_output=True,
                          text=True, env={**env, "CHATGATE_HOME": str(home)}, timeout=120, stdin=subprocess.DEVNULL)


def sqlite_counts(home: Path) -> dict[str, int]:
    """Rows per table of the home's database (the tables a copy takes)."""
    with closing(sqlite3.connect(home / "state.db")) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                 if not SKIPPED.fullmatch(r[0])]
        return {name: db.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}


def sqlite_rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(home / "state.db")) as db:
        return db.execute(sql).fetchall()


async def pg_tables(url: str) -> list[str]:
    db = await asyncpg.connect(url)
    try:
        return [r[0] for r in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    finally:
        await db.close()


def one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("chatgate storage migrate: ") and "nothing was copied" in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


# -- a home with history -----------------------------------------------------------------------------------

async def make_history(home: Path, llm: FakeLLM) -> None:
    """The real gateway on `home` (SQLite): two conversations, an 'always allow' rule, a job run now, a
    pairing (one person admitted, one code pending); then stopped."""
    (home / "ws" / "victim").mkdir(parents=True)
    runner = await start_gateway(home, llm.base_url, agent__workspace=home / "ws", gateway__tick_seconds="0.2",
                                 cron__min_interval_seconds="1")
    try:
        async with Tab(runner, chat_id="moving-tab") as tab:
            await tab.say("my name is Ann")
            assert await tab.reply() == "echo: my name is Ann"
            await tab.say("the secret word is pineapple")
            assert await tab.reply(2) == "echo: the secret word is pineapple"
        llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf victim"})]), Reply.text("gone"))
        async with Tab(runner, chat_id="rule-tab") as tab:
            await tab.say("delete victim")
            await press(tab, await tab.wait_for(is_prompt), "Always allow")
            assert await tab.reply(2) == "gone"
        async with Tab(runner, chat_id="cron-tab") as tab:
            await runner.parts.jobs.create(name="digest", prompt="digest", schedule="every 1h",
                                           target="webchat:cron-tab", owner_platform="webchat", owner_id="local")
            runner.parts.cron_timers.changed()
            await tab.say("/cron run 1")
            assert await tab.reply(2) == "⏰ digest (run now)\n\necho: digest"
        pairing = Pairing(runner.parts.store.access)
        code = await pairing.request("telegram", "2002", "Bob", "2002")
        assert code and await pairing.request("telegram", "3003", "Cy", "3003")
        assert await pairing.approve("telegram", code)
    finally:
        await runner.stop()


async def test_a_home_with_history_moves_to_postgresql_and_carries_on(tmp_path, llm: FakeLLM, pg_url, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setattr(harness, "STORAGE_URL", None)  # (the history on SQLite, whatever CHATGATE_TEST_STORAGE says)
    await make_history(home, llm)
    before = sqlite_counts(home)
    notes = "# Memory\n\n- The staging host is stage-7\n"
    (home / "memory").mkdir()
    (home / "memory" / "MEMORY.md").write_text(notes)
    (home / "skills" / "deploy-site" / "scripts").mkdir(parents=True)
    (home / "skills" / "deploy-site" / "references").mkdir()
    skill = render("deploy-site", "Deploy the web site", "1. Build.\n2. Upload.")
    (home / "skills" / "deploy-site" / "SKILL.md").write_text(skill)
    (home / "skills" / "deploy-site" / "scripts" / "run.sh").write_text("#!/bin/sh\nrsync -a site/ web:/srv/\n")
    (home / "skills" / "deploy-site" / "references" / "logo.png").write_bytes(b"\x89PNG\r\n\xff\xfe")
    for table in ("sessions", "messages", "inbox", "outbox", "approval_rules", "cron_jobs", "cron_runs",
                  "paired_users", "pairing_codes", "llm_usage"):
        assert before[table] > 0, table  # (the history holds each kind of row)

    done = migrate(home, "--to", pg_url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "  total  " in out and f"{sum(before.values()):,} rows in {len(before)} tables" in out
    for table, rows in before.items():
        assert any(line.split() == [table, f"{rows:,}"] for line in out.splitlines()), (table, out)
    assert "and 3 files of memory/ and skills/" in out
    assert "not copied: skills/deploy-site/references/logo.png (not UTF-8 text)" in out
    assert "storage.url" in out and "CHATGATE_STORAGE__URL" in out and "only way back" in out

    [(platform, user_id)] = sqlite_rows(home, "SELECT DISTINCT platform, user_id FROM messages WHERE role = 'user'"
                                              " AND user_id IS NOT NULL")
    store = await Store.open("", url=pg_url)
    try:
        copied = {**before, "documents": 3, "document_changes": 1}  # (the home's files: rows on PostgreSQL)
        for table, rows in copied.items():
            assert await store.fetchval(f'SELECT count(*) FROM "{table}"') == rows, table
        assert await store.documents.names("") == ["memory/MEMORY.md", "skills/deploy-site/SKILL.md",
                                                   "skills/deploy-site/scripts/run.sh"]
        assert await store.documents.read("memory/MEMORY.md") == notes
        assert await store.documents.read("skills/deploy-site/SKILL.md") == skill
        hits = await store.sessions.search("pineapple", platform=platform, user_id=user_id)
        assert {h.role for h in hits} == {"user", "assistant"}
        assert [r["subject"] for r in await store.approvals.rules()] == ["rm -rf victim"]
        assert [(p[0], p[1], p[2]) for p in await store.access.paired()] == [("telegram", "2002", "Bob")]
        assert [job["name"] for job in await store.cron.jobs()] == ["digest"]
        new_id = await store.write(lambda db: db.fetchval(
            "INSERT INTO sessions (key, platform, chat_id, chat_type, created_at, updated_at)"
            " VALUES ('webchat:dm:elsewhere', 'webchat', 'elsewhere', 'dm', 0, 0) RETURNING id"))
        assert new_id == before["sessions"] + 1 == max(r[0] for r in sqlite_rows(home, "SELECT id FROM sessions")) + 1
    finally:
        await store.close()

    monkeypatch.setattr(harness, "STORAGE_URL", pg_url)
    (home / "ws" / "victim").mkdir()
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf victim"})]), Reply.text("gone again"))
    runner = await start_gateway(home, llm.base_url, agent__workspace=home / "ws")
    try:
        async with Tab(runner, chat_id="rule-tab") as tab:
            await tab.say("delete it again")
            assert await tab.reply() == "gone again"  # the rule came along: no prompt
            assert not any(is_prompt(f) for f in tab.frames)
        async with Tab(runner, chat_id="moving-tab") as tab:
            await tab.say("what is my name?")
            assert await tab.reply() == "echo: what is my name?"
        sent = [m.get("content") for m in llm.requests[-1]["messages"]]
        assert {"my name is Ann", "echo: my name is Ann", "echo: the secret word is pineapple"} <= set(sent)
        async with Tab(runner, chat_id="a-new-tab") as tab:  # a new session: its prompt has the notes and skills
            await tab.say("hello")
            assert await tab.reply() == "echo: hello"
        prompt = str(llm.requests[-1]["messages"][0]["content"])
        assert "The staging host is stage-7" in prompt and "- deploy-site: Deploy the web site" in prompt
    finally:
        await runner.stop()
    assert not (home / "ws" / "victim").exists()


# -- refusals ----------------------------------------------------------------------------------------------

async def small_home(home: Path, *, version: int | None = None) -> None:
    """A home whose database holds one conversation's session and messages (made by the store)."""
    store = await Store.open(home / "state.db")
    try:
        await store.execute("INSERT INTO sessions (key, platform, chat_id, chat_type, created_at, updated_at)"
                            " VALUES ('webchat:dm:a', 'webchat', 'a', 'dm', 1, 1)")
        for n in range(3):
            await store.execute("INSERT INTO messages (session_id, role, content, created_at) VALUES (1, 'user', ?, ?)",
                                f"message {n}", n)
        if version is not None:
            await store.execute(f"PRAGMA user_version = {version}")
    finally:
        await store.close()


async def test_a_database_that_is_not_empty_or_not_chatgates_is_refused(tmp_path, pg_url):
    home = tmp_path / "home"
    await small_home(home)
    assert migrate(home, "--to", pg_url).returncode == 0
    one_line_refusal(migrate(home, "--to", pg_url), "is not empty", "sessions")
    db = await asyncpg.connect(pg_url)
    try:
        assert await db.fetchval("SELECT count(*) FROM messages") == 3  # (copied once, not twice)
        await db.execute("TRUNCATE sessions CASCADE")  # (an empty chatgate schema is taken)
        await db.execute("CREATE TABLE invoices (id int)")
    finally:
        await db.close()
    one_line_refusal(migrate(home, "--to", pg_url), "not chatgate's", "invoices")


async def test_a_running_daemon_is_refused(tmp_path, llm: FakeLLM, pg_url):
    home = tmp_path / "home"
    await small_home(home)
    lock = HomeLock.take(home)  # (what `chatgate run` and `restore` hold)
    try:
        one_line_refusal(migrate(home, "--to", pg_url), "chatgate is running on", str(home), "stop it first")
    finally:
        lock.release()
    daemon = Daemon(home, llm, {})
    daemon.start()
    try:
        await eventually(lambda: daemon_pid(home) is not None, timeout=30, what="the daemon holding its home")
        one_line_refusal(migrate(home, "--to", pg_url), "chatgate is running on", f"pid {daemon.process.pid}")
    finally:
        await daemon.terminate()
    assert await pg_tables(pg_url) == []


async def test_an_unreachable_server_is_refused_without_its_password(tmp_path):
    home = tmp_path / "home"
    await small_home(home)
    url = f"postgresql://chatgate:pass-w0rd-never-shown@127.0.0.1:{free_port()}/chatgate"
    refusal = one_line_refusal(migrate(home, "--to", url), "cannot reach PostgreSQL at 127.0.0.1")
    assert "pass-w0rd-never-shown" not in refusal
    one_line_refusal(migrate(home), "name the PostgreSQL database")
    one_line_refusal(migrate(home, "--to", "mysql://x@127.0.0.1/db"), "must be postgresql://")


@pytest.mark.parametrize(("behind", "words"), [(-1, ("start the daemon",)), (1, ("newer chatgate",))])
async def test_a_database_at_another_schema_version_is_refused(tmp_path, pg_url, behind: int, words: tuple[str]):
    home = tmp_path / "home"
    await small_home(home, version=schema_version() + behind)
    one_line_refusal(migrate(home, "--to", pg_url), *words)
    assert await pg_tables(pg_url) == []


# -- values --------------------------------------------------------------------------------------------------

async def test_loose_sqlite_values_are_converted_to_the_columns_types(tmp_path, pg_url):
    """An integer in a TEXT column, a whole float or a number as text in an INTEGER one, text in a REAL one."""
    home = tmp_path / "home"
    await small_home(home)
    with closing(sqlite3.connect(home / "state.db")) as db:
        db.execute("UPDATE messages SET content = 42, created_at = '7.5' WHERE id = 1")
        db.execute("UPDATE sessions SET updated_at = '12' WHERE id = 1")
        db.execute("INSERT INTO llm_usage (at, loop, model, prompt_tokens, completion_tokens) VALUES (1, 'main', 'm',"
                   " 10.0, ' 5 ')")
        db.commit()
    assert migrate(home, "--to", pg_url).returncode == 0
    db = await asyncpg.connect(pg_url)
    try:
        assert tuple(await db.fetchrow("SELECT content, created_at FROM messages WHERE id = 1")) == ("42", 7.5)
        assert await db.fetchval("SELECT updated_at FROM sessions") == 12.0
        assert tuple(await db.fetchrow("SELECT prompt_tokens, completion_tokens FROM llm_usage")) == (10, 5)
    finally:
        await db.close()


@pytest.mark.parametrize(("change", "words"), [
    ("UPDATE messages SET content = 'a' || char(0) || 'b' WHERE id = 3",
     ("messages.content of the row id 3", "NUL character")),
    ("UPDATE messages SET session_id = 'one' WHERE id = 2", ("messages.session_id of the row id 2", "'one'",
                                                              "not a whole number")),
    ("UPDATE messages SET session_id = 99 WHERE id = 2", ("PostgreSQL refused a row of messages", "(session_id)=(99)")),
])
async def test_a_failure_in_the_middle_leaves_the_database_as_it_was(tmp_path, pg_url, change: str,
                                                                     words: tuple[str]):
    """The sessions are copied before the messages (which reference them): a message that cannot be copied
    takes them back too, schema and all."""
    home = tmp_path / "home"
    await small_home(home)
    with closing(sqlite3.connect(home / "state.db")) as db:
        db.execute(change)
        db.commit()
    one_line_refusal(migrate(home, "--to", pg_url), *words)
    assert await pg_tables(pg_url) == []
