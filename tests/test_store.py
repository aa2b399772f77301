"""The store's transactions, change detection and pruning: on both engines (tests.engines), but for what only
SQLite has (another program's `sqlite3` connection, PRAGMA data_version)."""
from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace

import asyncpg
import pytest

from gateway.storage import Store
from gateway.storage.connection import Connection
from gateway.storage.database import StorageError
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef, InboundMessage
from tests.engines import OpenStore, integrity_error
from tests.harness import web_message
from tests.pg import pg_url  # noqa: F401  (the fixture)


async def test_a_store_closed_while_a_batch_commits_finishes_it_and_tells_each_caller(open_store: OpenStore):
    store = await open_store()
    writes = [asyncio.create_task(store.inbox.add(web_message(n), "k")) for n in range(10)]
    await asyncio.sleep(0)  # queued
    await asyncio.sleep(0)  # the batch is on the database thread
    writes += [asyncio.create_task(store.inbox.add(web_message(n), "k")) for n in range(10, 20)]
    await asyncio.sleep(0)  # queued for the next batch
    assert store.db._writer is not None
    store.db._writer.cancel()  # as at a shutdown that does not wait
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    await store.close()
    reopened = await open_store()  # what a caller was told is stored, is; nothing else
    stored = {row["id"] for row in await reopened.fetch("SELECT id FROM inbox")}
    assert stored == {x for x in outcomes if isinstance(x, int)}
    assert len(stored) == 10
    assert all(isinstance(x, RuntimeError) for x in outcomes[10:])


async def test_data_version_changes_when_another_connection_commits(tmp_path):
    store = await Store.open(tmp_path / "s.db")
    try:
        before = await store.data_version()
        await store.write(lambda db: db.execute("INSERT INTO gateway_instances (id, host, pid, started_at, seen_at)"
                                                " VALUES ('a','h',1,0,0)"))
        assert await store.data_version() == before  # our own writes do not count
        with sqlite3.connect(tmp_path / "s.db") as other:
            other.execute("DELETE FROM gateway_instances")
        assert await store.data_version() != before
    finally:
        await store.close()


async def test_prune_forgets_only_finished_old_rows_and_keeps_what_cron_runs_point_at(open_store: OpenStore):
    store = await open_store()
    chat = ChatRef("web", "c1")
    try:
        for n, state in enumerate(("done", "cancelled", "received")):
            msg = InboundMessage(platform="web", chat_id="c1", chat_type="dm", user_id="u", text=str(n),
                                 message_id=f"m{n}")
            inbox_id = await store.inbox.add(msg, "web:c1")
            await store.inbox.set_state([inbox_id], state)
        sent, pending, kept = [await store.outbox.add(OutboxItem(chat, t)) for t in ("a", "b", "c")]
        for item_id in (sent, kept):
            await store.outbox.progress(OutboxItem(chat, "x", id=item_id), done=True)
        async def job_that_sent(db: Connection) -> None:
            await db.execute("INSERT INTO cron_jobs (id, name, prompt, schedule, timezone, target, owner_platform,"
                       " owner_id, created_at, updated_at) VALUES (1, 'j', 'p', 'every 1h', 'UTC', 'none',"
                       " 'web', 'u', 0, 0)")
            await db.execute("INSERT INTO cron_runs (job_id, scheduled_at, state, outbox_id) VALUES (1, 0, 'ok', ?)",
                             kept)

        await store.write(job_that_sent)
        assert await store.inbox.prune(time.time() - 3600) == (0, 0)  # nothing is old enough yet
        assert await store.inbox.prune(time.time() + 1) == (2, 1)
        inbox = [r["state"] for r in await store.fetch("SELECT state FROM inbox")]
        outbox = sorted(r["id"] for r in await store.fetch("SELECT id FROM outbox"))
        assert inbox == ["received"]
        assert outbox == sorted([pending, kept])
    finally:
        await store.close()



async def test_concurrent_writes_share_commits_and_each_is_durable_when_it_returns(open_store: OpenStore):
    store, other = await open_store(), await open_store()  # another connection: only commits show there
    try:
        async def add_and_look(n: int) -> tuple[int | None, int]:
            inbox_id = await store.inbox.add(web_message(n), f"web:c{n}")
            return inbox_id, await other.fetchval("SELECT count(*) FROM inbox WHERE id = ?", inbox_id)

        results = await asyncio.gather(*(add_and_look(n) for n in range(200)))
        assert all(seen == 1 for _, seen in results)
        assert len({inbox_id for inbox_id, _ in results}) == 200
        assert store.batches < 100  # many writes per commit (one fsync each), not one each
    finally:
        await store.close()


async def test_a_failing_write_fails_alone_and_the_rest_of_its_batch_commits(open_store: OpenStore, engine: str):
    store = await open_store()
    try:
        async def broken(db):
            await db.execute("INSERT INTO messages (session_id, role, content, status, created_at)"
                             " VALUES (999999, 'user', 'x', 'ok', 0)")  # no such session: a foreign key error

        outcomes = await asyncio.gather(*(store.inbox.add(web_message(n), "k") for n in range(5)), store.write(broken),
                                        *(store.inbox.add(web_message(n), "k") for n in range(5, 10)),
                                        return_exceptions=True)
        assert isinstance(outcomes[5], integrity_error(engine))
        assert all(isinstance(x, int) for i, x in enumerate(outcomes) if i != 5)
        assert await store.fetchval("SELECT count(*) FROM inbox") == 10
        assert await store.fetchval("SELECT count(*) FROM messages") == 0
        assert await store.inbox.add(web_message(10), "k")  # and the store goes on
    finally:
        await store.close()


async def test_a_write_whose_caller_is_cancelled_is_still_committed(open_store: OpenStore):
    store = await open_store()
    try:
        waiting = asyncio.create_task(store.inbox.add(web_message(1), "k"))
        await asyncio.sleep(0)  # queued
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.inbox.add(web_message(2), "k")  # committed after the first
        assert await store.fetchval("SELECT count(*) FROM inbox") == 2
    finally:
        await store.close()


async def test_a_later_write_rides_with_the_next_commit_or_gets_its_own_and_close_keeps_it(open_store: OpenStore):
    def usage_row(loop: str):
        return lambda db: db.execute("INSERT INTO llm_usage (at, loop, model, prompt_tokens, completion_tokens)"
                                     " VALUES (0, ?, 'm', 1, 1)", loop)

    async def loops() -> list[str]:
        return [r["loop"] for r in await store.fetch("SELECT loop FROM llm_usage ORDER BY id")]

    store = await open_store()
    store.later(usage_row("rides"))
    before = store.batches
    await store.inbox.add(web_message(1), "k")
    assert store.batches == before + 1  # one commit for both
    assert await loops() == ["rides"]
    store.later(usage_row("alone"))
    committed = asyncio.Event()
    store.db._later[-1].done.add_done_callback(lambda _: committed.set())
    await asyncio.wait_for(committed.wait(), 10)  # no other write came: it got a commit of its own
    assert await loops() == ["rides", "alone"]
    store.later(usage_row("at close"))
    await store.close()
    store = await open_store()
    assert await loops() == ["rides", "alone", "at close"]


async def test_a_read_never_sees_what_a_batch_has_not_committed(open_store: OpenStore):
    store = await open_store()
    inserted, release = asyncio.Event(), asyncio.Event()

    async def fails_after_a_while(db: Connection) -> None:
        await db.execute("INSERT INTO gateway_instances VALUES ('x', 'h', 1, 0, 0)")
        inserted.set()
        await release.wait()
        raise RuntimeError("the unit failed")  # its batch is rolled back: the row was never stored

    try:
        write = asyncio.create_task(store.write(fails_after_a_while))
        await inserted.wait()
        read = asyncio.create_task(store.fetch("SELECT id FROM gateway_instances"))
        await asyncio.sleep(0)  # the read is asked for while the batch's transaction is open
        release.set()
        with pytest.raises(RuntimeError, match="the unit failed"):
            await write
        assert await read == []
    finally:
        await store.close()


async def test_statements_a_unit_pipelines_all_end_before_it_fails_and_are_rolled_back_with_it(
        open_store: OpenStore, engine: str):
    store = await open_store()
    try:
        async def half_broken(db: Connection) -> None:
            await db.pipelined(db.execute("INSERT INTO gateway_instances VALUES ('a', 'h', 1, 0, 0)"),
                               db.execute("INSERT INTO gateway_instances VALUES ('a', 'h', 2, 0, 0)"),  # the same id
                               db.execute("INSERT INTO gateway_instances VALUES ('b', 'h', 3, 0, 0)"))

        outcomes = await asyncio.gather(store.write(half_broken), store.inbox.add(web_message(1), "k"),
                                        return_exceptions=True)
        assert isinstance(outcomes[0], integrity_error(engine)) and isinstance(outcomes[1], int)
        assert await store.fetch("SELECT id FROM gateway_instances") == []
        assert await store.fetchval("SELECT count(*) FROM inbox") == 1
    finally:
        await store.close()


async def test_a_persons_message_and_a_goals_turn_never_stand_in_for_each_other(open_store: OpenStore):
    """A web chat page names its own messages' ids: a message named like a goal's turn is kept as the
    person's, and the goal's turn of that number is still queued (each is unique in its own kind)."""
    store = await open_store()
    try:
        origin = replace(web_message(1), text="/goal build the site")
        goal, first = await store.goals.create("k", origin, "build the site", 20, "start")
        assert first is not None and first.goal_turn == (goal.id, 1)
        lookalike = replace(web_message(1), message_id=f"goal:{goal.id}:2", text="is it done yet?")
        assert await store.inbox.add(lookalike, "k") is not None
        recorded, second = await store.goals.settle(goal, 1, state="active", reason="not yet", turns=1, next_seq=2,
                                                    next_turn="go on")
        assert recorded and second is not None and second.goal_turn == (goal.id, 2)
        assert await store.goals.turn_state(goal, 2) == "received"
        assert await store.inbox.add(lookalike, "k") is None  # (the person's message is still taken only once)
        kinds = [(u.msg.text, u.goal_turn) for u in await store.inbox.unfinished()]
        assert kinds == [("start", (goal.id, 1)), ("is it done yet?", None), ("go on", (goal.id, 2))]
    finally:
        await store.close()


async def test_two_instances_on_one_database_see_each_others_commits_at_once(open_store: OpenStore):
    """Two Stores are two instances (two processes' connections): what one committed is in the other's next
    read, with nothing cached in between, and a change of the scheduled jobs shows in the other's
    `data_version` (what reloads its cron timers)."""
    a, b = await open_store(), await open_store()
    inbox_id = await a.inbox.add(web_message(1), "web:c1")
    assert [u.inbox_id for u in await b.inbox.unfinished()] == [inbox_id]
    await b.inbox.set_state([inbox_id], "done")
    assert await a.inbox.unfinished() == []
    await a.learning.skill_written("deploy", "agent")
    assert list(await b.learning.skills()) == ["deploy"]
    await b.access.code_to_send("telegram", "7", "Ann", "7", new_code="K7", ttl=600, resend_after=60, max_pending=5)
    assert await a.access.admit("telegram", "K7") is not None and await b.access.is_paired("telegram", "7")
    seen = await b.data_version()
    job = await a.cron.add_job(name="j", prompt="p", schedule="every 1h", timezone="UTC", target="none",
                               owner_platform="web", owner_id="u", owner_chat=None, owner_key=None,
                               missed_policy="skip", next_run_at=None, model=None, now=time.time())
    assert await b.data_version() != seen
    assert [j["id"] for j in await b.cron.jobs()] == [job]


async def test_a_lost_postgresql_connection_fails_what_ran_on_it_and_the_next_use_connects_again(pg_url):
    """The server ends the store's connection (a restart, a network cut): the read or write that meets it
    is a StorageError (nothing is said to be stored that was not), and the one after opens a new one."""
    store = await Store.open("", url=pg_url)
    admin = await asyncpg.connect(pg_url)

    async def connection_lost() -> None:
        assert await admin.fetchval("SELECT bool_and(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
                                    " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    try:
        await store.inbox.add(web_message(1), "k")
        await connection_lost()
        with pytest.raises(StorageError):
            await store.fetch("SELECT id FROM inbox")
        assert len(await store.fetch("SELECT id FROM inbox")) == 1
        await connection_lost()
        with pytest.raises(StorageError):
            await store.inbox.add(web_message(2), "k")
        assert await store.inbox.add(web_message(3), "k")
        await connection_lost()
        outcomes = await asyncio.gather(*(store.inbox.add(web_message(n), "k") for n in range(4, 8)),
                                        return_exceptions=True)
        assert all(isinstance(o, StorageError) for o in outcomes), outcomes
        assert await store.inbox.add(web_message(8), "k")
        assert [r["m"] for r in await store.fetch("SELECT platform_message_id AS m FROM inbox ORDER BY id")] == [
            "m1", "m3", "m8"]
    finally:
        await store.close()
        await admin.close()


async def test_a_check_with_nothing_written_lately_probes_with_a_real_write(open_store: OpenStore):
    store = await open_store()
    assert await store.fetchval("SELECT count(*) FROM health") == 0
    health = await store.check()
    assert health["state"] == "ready" and health["error"] is None
    assert await store.fetchval("SELECT count(*) FROM health") == 1
