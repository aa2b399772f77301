"""Tables that stop growing: what the tick forgets, what it keeps, and the space the database gives back.

Each test builds a database as an older daemon would have left it (rows inserted with their old times
before the gateway starts), starts the gateway as a user would, lets its tick run, and looks at what a
person or an operator sees: the chat's `/usage`, `chatgate usage`, `chatgate sessions search`, the rows
left and the files on disk.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Callable

from gateway.storage import Store
from tests.fakes.llm import FakeLLM
from tests.harness import Tab, eventually, gateway_env, start_gateway

DAY = 86400.0


async def seeded(home: Path, fill: Callable[[sqlite3.Connection], Any], *, older: bool = False) -> None:
    """A database with the schema of the code under test, and the rows `fill` puts in (in one
    transaction); `older`: without incremental vacuum, as a chatgate before retention made it."""
    await (await Store.open(home / "state.db")).close()
    with closing(sqlite3.connect(home / "state.db")) as db, db:
        db.execute("PRAGMA foreign_keys = ON")
        fill(db)
    if older:
        with closing(sqlite3.connect(home / "state.db", isolation_level=None)) as db:
            db.execute("PRAGMA auto_vacuum = NONE")
            db.execute("VACUUM")
            assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0


def rows(home: Path, sql: str, *args: Any) -> list[sqlite3.Row]:
    with closing(sqlite3.connect(home / "state.db")) as db:
        db.row_factory = sqlite3.Row
        return db.execute(sql, args).fetchall()


def add_session(db: sqlite3.Connection, key: str, *, at: float, ended: float | None = None,
                platform: str = "webchat", chat_type: str = "dm") -> int:
    return int(db.execute(
        "INSERT INTO sessions (key, platform, chat_id, chat_type, created_at, updated_at, ended_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)", (key, platform, key.split(":")[1], chat_type, at, ended or at, ended)).lastrowid)


def add_message(db: sqlite3.Connection, session_id: int, role: str, content: str, at: float,
                platform: str | None = "webchat", user_id: str | None = "local") -> int:
    return int(db.execute(
        "INSERT INTO messages (session_id, role, content, platform, user_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (session_id, role, content, platform if role == "user" else None, user_id if role == "user" else None,
         at)).lastrowid)


def cli(home: Path, llm: FakeLLM, *args: str, **settings: Any) -> str:
    done = subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **gateway_env(home, llm.base_url, **settings)})
    assert done.returncode == 0, done.stderr
    return done.stdout


async def ticked(home: Path, llm: FakeLLM, **settings: Any) -> None:
    """Start the gateway, let the tick's first round finish, stop it."""
    runner = await start_gateway(home, llm.base_url, **settings)
    try:
        await runner.parts.tick.wait_idle()
    finally:
        await runner.stop()


# -- token usage ------------------------------------------------------------------------------------------


async def test_usage_shows_the_same_figures_after_old_requests_are_rolled_up_per_day(tmp_path, llm: FakeLLM):
    now = time.time()

    def fill(db: sqlite3.Connection) -> None:
        tab = add_session(db, "webchat:usagetab", at=now - 12 * DAY)
        others = [add_session(db, f"telegram:{n}", at=now - 12 * DAY, platform="telegram") for n in range(6)]
        usage = [  # (days ago, loop, session, person, prompt, completion)
            (1 / 24, "main", tab, ("webchat", "local"), 100, 10), (2 / 24, "review", tab, ("webchat", "local"), 50, 5),
            (1.1, "main", tab, ("webchat", "local"), 120, 12), (2.05, "main", tab, ("webchat", "local"), 130, 13),
            (4.1, "main", tab, ("webchat", "local"), 140, 14), (4.2, "main", tab, ("webchat", "local"), 150, 15),
            (5.0, "cron", tab, ("webchat", "local"), 160, 16), (9.05, "main", tab, ("webchat", "local"), 170, 17),
            (9.9, "review", tab, ("webchat", "local"), 180, 18), (10.1, "curator", None, ("", ""), 190, 19)]
        for n, session in enumerate(others):  # sessions whose ranks depend on their old requests
            usage += [(1.5, "main", session, ("telegram", "42"), 1000 * (n + 1), 7),
                      (9.5, "main", session, ("telegram", "42"), 700 * (6 - n), 3),
                      (4.5, "main", session, ("telegram", "42"), 300, n)]
        db.executemany("INSERT INTO llm_usage (at, loop, session_id, platform, user_id, model, prompt_tokens,"
                       " completion_tokens) VALUES (?, ?, ?, ?, ?, 'gpt-4o-mini', ?, ?)",
                       [(now - ago * DAY, loop, s, p, u, pt, ct) for ago, loop, s, (p, u), pt, ct in usage])

    await seeded(tmp_path, fill)

    async def shown(**settings: Any) -> tuple[str, list[str]]:
        runner = await start_gateway(tmp_path, llm.base_url, **settings)
        try:
            await runner.parts.tick.wait_idle()
            async with Tab(runner, chat_id="usagetab") as tab:
                await tab.say("/usage")
                report = await tab.reply()
            return report, [cli(tmp_path, llm, "usage", *more, **settings)
                            for more in (["--json"], ["--json", "--days", "30"], ["--days", "30"])]
        finally:
            await runner.stop()

    before = await shown(gateway__retention_days=365)  # nothing is old enough to be rolled up
    assert len(rows(tmp_path, "SELECT 1 FROM llm_usage")) == 28
    assert "You, last 24 hours: 165 tokens (150 in, 15 out) in 2 request(s)" in before[0]
    assert "You, in all: 1,320 tokens (1,200 in, 120 out) in 9 request(s)" in before[0]

    after = await shown(gateway__retention_days=3)
    kept = rows(tmp_path, "SELECT at FROM llm_usage")
    assert kept and all(r["at"] > now - 4 * DAY for r in kept), "requests older than the retention were rolled up"
    assert len(kept) < 28
    assert after[0] == before[0]  # /usage: this session, you in the last 24 hours, you in all, by loop
    for cli_before, cli_after in zip(before[1], after[1]):  # loops, days and the top five sessions
        assert cli_after == cli_before
    assert len(json.loads(after[1][1])["top_sessions"]) == 5


# -- scheduled runs ---------------------------------------------------------------------------------------


async def test_a_job_keeps_its_last_runs_and_never_one_in_progress(tmp_path, llm: FakeLLM):
    now = time.time()
    ids: dict[str, list[int]] = {"ok": [], "sessions": [], "outbox": []}

    def fill(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO cron_jobs (id, name, prompt, schedule, timezone, target, owner_platform, owner_id,"
                   " enabled, next_run_at, created_at, updated_at) VALUES (7, 'digest', 'summarise', 'every 1m', 'UTC',"
                   " 'webchat:home', 'cli', 'op', 0, NULL, ?, ?)", (now - 30 * DAY, now - 30 * DAY))
        db.execute("INSERT INTO gateway_instances VALUES ('elsewhere:1:ab', 'elsewhere', 1, ?, ?)", (now, now))
        db.execute("INSERT INTO cron_runs (job_id, scheduled_at, state, claimed_by, started_at) VALUES"
                   " (7, ?, 'running', 'elsewhere:1:ab', ?)", (now - 30 * DAY, now - 30 * DAY))
        ids["running"] = [int(db.execute("SELECT last_insert_rowid()").fetchone()[0])]
        for n in range(8):
            at = now - (20 - n) * DAY  # all older than the outbox's retention (7 days)
            outbox = int(db.execute("INSERT INTO outbox (platform, chat_id, payload, state, created_at, sent_at)"
                                    " VALUES ('webchat', 'home', '{}', 'sent', ?, ?)", (at, at)).lastrowid)
            run = int(db.execute("INSERT INTO cron_runs (job_id, scheduled_at, state, started_at, finished_at, output,"
                                 " outbox_id) VALUES (7, ?, 'ok', ?, ?, ?, ?)",
                                 (at, at, at, f"digest {n}", outbox)).lastrowid)
            session = add_session(db, f"cron:7:{run}", at=at, ended=at)
            add_message(db, session, "user", f"summarise run{n}", at, platform="webchat", user_id="op")
            add_message(db, session, "assistant", f"digest number{n}", at)
            ids["ok"].append(run)
            ids["sessions"].append(session)
            ids["outbox"].append(outbox)
        for n in range(2):  # a removed job's two runs
            db.execute("INSERT INTO cron_runs (job_id, scheduled_at, state, finished_at) VALUES (99, ?, 'error', ?)",
                       (now - (20 + n) * DAY, now - (20 + n) * DAY))

    await seeded(tmp_path, fill)
    await ticked(tmp_path, llm, cron__keep_runs=3)

    left = rows(tmp_path, "SELECT id, state FROM cron_runs WHERE job_id = 7 ORDER BY scheduled_at")
    assert [(r["id"], r["state"]) for r in left] == [(ids["running"][0], "running"), *((i, "ok") for i in ids["ok"][-3:])]
    assert len(rows(tmp_path, "SELECT 1 FROM cron_runs WHERE job_id = 99")) == 2
    sessions = [r["id"] for r in rows(tmp_path, "SELECT id FROM sessions WHERE key LIKE 'cron:7:%' ORDER BY id")]
    assert sessions == ids["sessions"][-3:]  # each pruned run's transcript went with it
    assert {r["content"] for r in rows(tmp_path, "SELECT content FROM messages")} == \
        {f"summarise run{n}" for n in (5, 6, 7)} | {f"digest number{n}" for n in (5, 6, 7)}
    assert not rows(tmp_path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'run2'")
    # the messages the pruned runs delivered are no longer held back from the outbox's own pruning
    assert [r["id"] for r in rows(tmp_path, "SELECT id FROM outbox ORDER BY id")] == ids["outbox"][-3:]
    shown = cli(tmp_path, llm, "cron", "runs", "7", cron__keep_runs=3)
    assert "digest 7" in shown and "digest 4" not in shown


async def test_a_job_that_runs_every_second_keeps_delivering_while_its_ledger_stays_bounded(tmp_path, llm: FakeLLM):
    settings = {"gateway__tick_seconds": "0.2", "cron__min_interval_seconds": "1", "cron__keep_runs": "2",
                "review__enabled": "false"}
    runner = await start_gateway(tmp_path, llm.base_url, **settings)
    try:
        async with Tab(runner, chat_id="digesttab") as tab:
            cli(tmp_path, llm, "cron", "add", "ping", "every 1s", "say hi", "--to", "webchat:digesttab", **settings)
            await tab.reply(6, timeout=30)  # six runs delivered, pruned as they went
            assert set(tab.replies()) == {"⏰ ping\n\necho: say hi"}

            async def bounded() -> bool:
                ledger = await runner.parts.store.fetch("SELECT state FROM cron_runs")
                sessions = await runner.parts.store.fetch("SELECT 1 FROM sessions WHERE key LIKE 'cron:%'")
                return len(ledger) <= 3 and len(sessions) <= 3  # the last two, and one that may be running

            await eventually(bounded, 5, "the ledger held to cron.keep_runs")
            states = [r["state"] for r in await runner.parts.store.fetch("SELECT state FROM cron_runs")]
            assert set(states) <= {"ok", "running"}  # no run lost its transcript or ledger row while it ran
    finally:
        await runner.stop()


# -- approvals, subagent runs, dead letters, summaries ------------------------------------------------------


async def test_old_finished_rows_go_at_a_tick_and_recent_or_unfinished_ones_stay(tmp_path, llm: FakeLLM):
    now, old = time.time(), time.time() - 10 * DAY
    kept: dict[str, Any] = {}

    def approval(db: sqlite3.Connection, approval_id: str, state: str, at: float, session_id: int | None = None) -> None:
        db.execute("INSERT INTO approvals (id, session_key, session_id, platform, chat_id, requester_id, kind, subject,"
                   " subject_hash, reasons, state, decided_by, decided_at, created_at, expires_at) VALUES"
                   " (?, 'webchat:a', ?, 'webchat', 'a', 'local', 'command', 'rm -rf x', 'h', '[]', ?, ?, ?, ?, ?)",
                   (approval_id, session_id, state, None if state == "pending" else "local",
                    None if state == "pending" else at, at, at + 300))
        for event in ("requested", state):
            db.execute("INSERT INTO approval_events (approval_id, event, actor, at) VALUES (?, ?, 'local', ?)",
                       (approval_id, event, at))

    def fill(db: sqlite3.Connection) -> None:
        active = add_session(db, "webchat:a", at=old)
        ended = add_session(db, "webchat:b", at=old, ended=old)
        kept["active"], kept["ended"] = active, ended
        approval(db, "old-once", "once", old)
        approval(db, "old-denied", "denied", old)
        approval(db, "new-once", "once", now - 3600)
        approval(db, "old-grant-active", "session", old, active)
        approval(db, "old-grant-ended", "session", old, ended)
        for n, (state, at, ended_at) in enumerate((("done", old, old), ("failed", old, old), ("done", now, now),
                                                   ("running", old, None))):
            child = add_session(db, f"subagent:{n}", at=at, ended=ended_at, chat_type="subagent")
            add_message(db, child, "assistant", f"child finding{n}", at)
            db.execute("INSERT INTO subagent_runs (id, parent_session_id, session_id, depth, task, state, started_at,"
                       " ended_at) VALUES (?, ?, ?, 1, 'look', ?, ?, ?)", (n, active, child, state, at, ended_at))
        for ref, at in (("old", old), ("new", now)):
            db.execute("INSERT INTO dead_letters (platform, ref, payload, reason, created_at) VALUES"
                       " ('telegram', ?, '{}', 'bad', ?)", (ref, at))
        for n in range(3):
            db.execute("INSERT INTO session_summaries (session_id, through_message_id, summary, created_at)"
                       " VALUES (?, ?, ?, ?)", (active, n, f"summary {n}", old))
        for session in (active, ended):
            db.execute("INSERT INTO review_counters (session_id, turns_since_memory, updated_at) VALUES (?, 3, ?)",
                       (session, old))

    await seeded(tmp_path, fill)
    await ticked(tmp_path, llm)  # the default gateway.retention_days: 7

    assert {r["id"] for r in rows(tmp_path, "SELECT id FROM approvals")} == {"new-once", "old-grant-active"}
    assert {r["approval_id"] for r in rows(tmp_path, "SELECT approval_id FROM approval_events")} == \
        {"new-once", "old-grant-active"}
    assert {r["id"]: r["state"] for r in rows(tmp_path, "SELECT id, state FROM subagent_runs")} == \
        {2: "done", 3: "interrupted"}  # (the one left running was cut off by the restart: it ended just now)
    assert {r["key"] for r in rows(tmp_path, "SELECT key FROM sessions WHERE chat_type = 'subagent'")} == \
        {"subagent:2", "subagent:3"}  # the pruned runs' transcripts went with them
    assert [r["ref"] for r in rows(tmp_path, "SELECT ref FROM dead_letters")] == ["new"]
    assert [r["summary"] for r in rows(tmp_path, "SELECT summary FROM session_summaries")] == ["summary 2"]
    assert [r["session_id"] for r in rows(tmp_path, "SELECT session_id FROM review_counters")] == [kept["active"]]
    assert {r["key"] for r in rows(tmp_path, "SELECT key FROM sessions WHERE chat_type = 'dm'")} == \
        {"webchat:a", "webchat:b"}  # people's transcripts are kept: transcript retention is off by default


# -- transcripts ------------------------------------------------------------------------------------------


async def test_transcript_retention_is_off_by_default_and_on_deletes_old_ended_sessions_only(tmp_path, llm: FakeLLM):
    now, old = time.time(), time.time() - 60 * DAY
    sessions: dict[str, int] = {}

    def fill(db: sqlite3.Connection) -> None:
        for name, at, ended in (("gone", old, old), ("active", old, None), ("recent", old, now - DAY)):
            session = sessions[name] = add_session(db, f"webchat:{name}", at=at, ended=ended)
            first = add_message(db, session, "user", f"tell me about zebras {name}", at)
            add_message(db, session, "assistant", f"zebras have stripes {name}", at)
            db.execute("INSERT INTO session_summaries (session_id, through_message_id, summary, created_at)"
                       " VALUES (?, ?, 'zebras', ?)", (session, first, at))
            db.execute("INSERT INTO review_counters (session_id, turns_since_memory, updated_at) VALUES (?, 1, ?)",
                       (session, now))
        db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now - DAY, sessions["recent"]))

    def search() -> str:
        return cli(tmp_path, llm, "sessions", "search", "zebras", "--platform", "webchat", "--user", "local")

    await seeded(tmp_path, fill)
    await ticked(tmp_path, llm)
    assert len(rows(tmp_path, "SELECT 1 FROM messages")) == 6  # off by default: nothing deleted
    assert all(f"session {s} " in search() for s in sessions.values())

    await ticked(tmp_path, llm, gateway__transcript_retention_days=30)
    assert {r["id"] for r in rows(tmp_path, "SELECT id FROM sessions")} == {sessions["active"], sessions["recent"]}
    found = search()
    assert f"session {sessions['gone']} " not in found
    assert f"session {sessions['active']} " in found and f"session {sessions['recent']} " in found
    assert len(rows(tmp_path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zebras'")) == 4
    assert not rows(tmp_path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'gone'")
    for table in ("messages", "session_summaries", "review_counters"):
        assert {r[0] for r in rows(tmp_path, f"SELECT DISTINCT session_id FROM {table}")} == \
            {sessions["active"], sessions["recent"]}, table


# -- files ------------------------------------------------------------------------------------------------


async def test_curator_reports_beyond_the_bound_go_but_restorable_and_latest_runs_stay(tmp_path, llm: FakeLLM):
    logs = tmp_path / "logs" / "curator"
    runs = [f"202401{d:02d}T000000Z" for d in range(1, 9)]
    for run in runs:
        (logs / run).mkdir(parents=True)
        (logs / run / "REPORT.md").write_text(f"# Curator run {run}\n")
    (logs / runs[1] / "snapshot" / "tidy").mkdir(parents=True)  # restorable: it stays
    (logs / "notes").mkdir()  # not a run's folder: never touched

    def fill(db: sqlite3.Connection) -> None:
        for n, run in enumerate(runs):  # the oldest is the latest applied run (the rest were dry runs)
            db.execute("INSERT INTO curator_runs (id, started_at, finished_at, dry_run, trigger, changes) VALUES"
                       " (?, ?, ?, ?, 'cli', '[]')", (run, 1704067200 + n * DAY, 1704067200 + n * DAY + 1, int(n > 0)))

    await seeded(tmp_path, fill)
    await ticked(tmp_path, llm, curator__keep_reports=3)
    stay = {runs[0], runs[1], *runs[-3:]}
    assert {p.name for p in logs.iterdir()} == stay | {"notes"}
    assert {r["id"] for r in rows(tmp_path, "SELECT id FROM curator_runs")} == stay
    status = cli(tmp_path, llm, "curator", "status", curator__keep_reports=3)
    assert runs[-1] in status and runs[3] not in status


async def test_trajectory_files_are_kept_unless_a_retention_is_set(tmp_path, llm: FakeLLM):
    folder = tmp_path / "trajectories"
    folder.mkdir()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    for name in ("2020-01-01.jsonl", f"{today}.jsonl", "keep-me.jsonl"):
        (folder / name).write_text("{}\n")
    await seeded(tmp_path, lambda db: None)

    await ticked(tmp_path, llm, trajectories__enabled="true")
    assert {p.name for p in folder.iterdir()} == {"2020-01-01.jsonl", f"{today}.jsonl", "keep-me.jsonl"}

    await ticked(tmp_path, llm, trajectories__enabled="true", trajectories__retention_days=30)
    assert {p.name for p in folder.iterdir()} == {f"{today}.jsonl", "keep-me.jsonl"}


# -- space ------------------------------------------------------------------------------------------------


async def test_the_database_file_shrinks_after_a_big_prune(tmp_path, llm: FakeLLM):
    db_file = tmp_path / "state.db"
    old = time.time() - 30 * DAY

    def old_messages(db: sqlite3.Connection) -> None:
        db.executemany("INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state,"
                       " received_at, updated_at) VALUES ('telegram', '1', ?, 'telegram:1', ?, 'done', ?, ?)",
                       [(str(n), "x" * 4000, old, old) for n in range(5000)])

    def grown() -> int:
        with closing(sqlite3.connect(db_file)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return db_file.stat().st_size

    await seeded(tmp_path, old_messages, older=True)  # a database as an older chatgate made it, with 20 MB to prune
    assert grown() > 20_000_000
    await ticked(tmp_path, llm)
    assert db_file.stat().st_size < 2_000_000
    assert rows(tmp_path, "PRAGMA auto_vacuum")[0][0] == 2  # incremental from now on

    with closing(sqlite3.connect(db_file)) as db:  # another 20 MB, pruned by a tick of the running gateway
        with db:
            old_messages(db)
    assert grown() > 20_000_000
    runner = await start_gateway(tmp_path, llm.base_url, gateway__tick_seconds=0.2)
    try:
        await eventually(lambda: db_file.stat().st_size < 2_000_000, 10, "the file giving its free pages back")
    finally:
        await runner.stop()
    assert rows(tmp_path, "PRAGMA freelist_count")[0][0] == 0


async def test_a_new_database_gives_space_back_from_the_start(tmp_path, llm: FakeLLM, caplog):
    """A database this chatgate creates is incremental at once: no whole-file VACUUM is ever needed."""
    old = time.time() - 30 * DAY
    await seeded(tmp_path, lambda db: db.executemany(
        "INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state, received_at,"
        " updated_at) VALUES ('telegram', '1', ?, 'telegram:1', ?, 'done', ?, ?)",
        [(str(n), "x" * 4000, old, old) for n in range(2000)]))
    assert rows(tmp_path, "PRAGMA auto_vacuum")[0][0] == 2
    caplog.set_level(logging.INFO, logger="gateway.retention")
    await ticked(tmp_path, llm)
    assert rows(tmp_path, "PRAGMA freelist_count")[0][0] == 0
    assert (tmp_path / "state.db").stat().st_size < 2_000_000
    assert "compacted" not in caplog.text and "VACUUM" not in caplog.text


async def test_a_large_database_is_compacted_once_only_at_a_quiet_moment(tmp_path, llm: FakeLLM, caplog):
    """The one VACUUM that switches an older database over rewrites the whole file while everything else
    waits: above 64 MiB it waits until nothing has happened for a while."""
    db_file = tmp_path / "state.db"
    old = time.time() - 30 * DAY
    await seeded(tmp_path, lambda db: db.executemany(
        "INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state, received_at,"
        " updated_at) VALUES ('telegram', '1', ?, 'telegram:1', ?, 'done', ?, ?)",
        [(str(n), "x" * 4000, old, old) for n in range(17_500)]), older=True)
    assert db_file.stat().st_size > 64 * 1024 * 1024
    caplog.set_level(logging.INFO, logger="gateway.retention")
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        await runner.parts.tick.wait_idle()
        assert not await runner.parts.store.fetch("SELECT 1 FROM inbox")  # pruned all the same
        assert await runner.parts.store.fetchval("PRAGMA auto_vacuum") == 0  # the gateway has just started: not now
        assert "will be compacted once, to give space back after pruning, at the first 15 quiet minutes" in caplog.text

        async def quiet_for_an_hour() -> float:
            return time.time() - 3600

        # the same step of the tick, at a moment when nothing has happened for an hour
        from gateway.retention import Retention

        retention = runner.parts.retention
        await Retention(runner.config, inbox=retention.inbox, sessions=retention.sessions,
                        approvals=retention.approvals, subagents=retention.subagents, usage=retention.usage,
                        ledger=retention.ledger, curator=retention.curator, upkeep=retention.upkeep,
                        idle_since=quiet_for_an_hour).reclaim()
        assert await runner.parts.store.fetchval("PRAGMA auto_vacuum") == 2
    finally:
        await runner.stop()
    assert db_file.stat().st_size < 2_000_000
    assert "the database was compacted once" in caplog.text
