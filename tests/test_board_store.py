"""The task board's tables (gateway.storage.board) on both engines: dependencies, claims, the run's end once."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.storage.board import BoardError
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef

CHAT = ChatRef("telegram", "100", None)


async def test_a_task_waits_for_its_parents_and_becomes_ready_when_the_last_is_done(open_store):
    board = (await open_store()).board
    first = await board.add("first", "the body", owner=("telegram", "7"), origin=CHAT)
    second = await board.add("second")
    after_both = await board.add("after both", parents=[first.id, second.id, first.id])
    assert (first.status, second.status, after_both.status) == ("ready", "ready", "todo")
    assert after_both.parents == (first.id, second.id)
    assert first.as_dict()["owner"] == "telegram:7" and first.as_dict()["origin"] == "telegram:100"
    assert second.as_dict()["owner"] == "operator" and second.as_dict()["origin"] is None
    started = await board.claim("me", 5)
    assert [t.id for t in started] == [first.id, second.id] and {t.status for t in started} == {"running"}
    assert (await board.finish(first.id, "me", "one", None)).status == "done"
    assert (await board.get(after_both.id)).status == "todo"  # (the other parent still runs)
    await board.finish(second.id, "me", "two", None)
    assert (await board.get(after_both.id)).status == "ready"
    assert [e.kind for e in await board.events(after_both.id)] == ["added", "ready"]
    with pytest.raises(BoardError, match="task 999 does not exist"):
        await board.add("orphan", parents=[999])
    await board.cancel(after_both.id, "operator")
    with pytest.raises(BoardError, match="was cancelled"):
        await board.add("after a cancelled one", parents=[after_both.id])


async def test_claims_take_the_highest_priority_then_the_oldest_and_never_more_than_max_running(open_store):
    store = await open_store()
    board = store.board
    low, high, other = await board.add("low"), await board.add("high", priority=5), await board.add("other")
    assert [t.id for t in await board.claim("a", 2)] == [high.id, low.id]
    assert await board.claim("b", 2) == []  # two run (on any instance)
    second = await open_store()  # another instance on the same database: claims at the same moment
    results = await asyncio.gather(board.claim("a", 3), second.board.claim("b", 3))
    assert [t.id for found in results for t in found] == [other.id]
    assert (await board.counts())["running"] == 3


async def test_a_run_ends_once_done_twice_is_nothing_and_the_notice_is_queued_once(open_store):
    store = await open_store()
    board = store.board
    task = await board.add("report", origin=CHAT)
    [running] = await board.claim("me", 1)
    assert running.attempts == 1
    notice = OutboxItem(chat=CHAT, text="done")
    assert await board.finish(task.id, "someone else", "x", OutboxItem(chat=CHAT, text="x")) is None
    assert (await board.finish(task.id, "me", "the result", notice)).result == "the result"
    assert await board.finish(task.id, "me", "again", OutboxItem(chat=CHAT, text="again")) is None
    rows = await store.fetch("SELECT payload FROM outbox")
    assert len(rows) == 1 and "done" in rows[0]["payload"]
    assert not await board.beat(task.id, "me", 1)  # (done: no run of it to keep alive)


async def test_blocked_then_answered_the_answer_is_a_comment_for_the_next_turn(open_store):
    board = (await open_store()).board
    task = await board.add("decide")
    await board.claim("me", 1)
    await board.note_turn(task.id, "me", 1)
    await board.comment(task.id, "operator", "said during turn 1")  # (the next turn reads what came after its mark)
    mark = await board.last_turn(task.id)
    assert mark > 0
    blocked = await board.block(task.id, "me", "red or blue?", None, None)
    assert (blocked.status, blocked.question) == ("blocked", "red or blue?")
    with pytest.raises(BoardError, match="is not blocked"):
        await board.answer((await board.add("other")).id, "telegram:7", "hm")
    answered = await board.answer(task.id, "telegram:7", "blue")
    assert (answered.status, answered.question) == ("ready", None)
    assert [c.text for c in await board.comments_since(task.id, mark)] == ["said during turn 1", "blue"]


async def test_a_lost_run_is_found_by_its_heartbeat_or_its_instance_and_released(open_store):
    board = (await open_store()).board
    task = await board.add("long")
    await board.claim("dead-instance", 1)
    # no instance lease for "dead-instance" (SQLite keeps none; on PostgreSQL its life lease ended)
    assert [t.id for t in await board.lost_runs("me", time.time() - 60)] == [task.id]
    assert await board.lost_runs("dead-instance", time.time() - 60) == []  # (its own: not lost to itself)
    released = await board.release(task.id, None, kind="reclaimed", text="its run was lost")
    assert (released.status, released.attempts, released.runner) == ("ready", 1, None)
    [again] = await board.claim("me", 1)
    assert again.attempts == 2
    later = time.time() + 3600
    await board.release(task.id, "me", kind="failed", text="the model failed", not_before=later)
    assert await board.claim("me", 1) == []  # (backing off)
    assert [t.id for t in await board.claim("me", 1, now=later + 1)] == [task.id]


async def test_cancel_stops_a_running_task_and_a_version_sees_every_change(open_store):
    board = (await open_store()).board
    before = await board.version()
    task = await board.add("one")
    assert await board.version() != before
    await board.claim("me", 1)
    assert (await board.cancel(task.id, "telegram:7")).status == "archived"
    assert not await board.beat(task.id, "me", 1)  # the run sees it at its next heartbeat
    assert await board.finish(task.id, "me", "late", None) is None
    with pytest.raises(BoardError, match="task 1 is archived"):
        await board.cancel(task.id, "operator")
    with pytest.raises(BoardError, match="there is no task 5"):
        await board.comment(5, "operator", "hello")
    await board.comment(task.id, "operator", "a note")
    assert [e.kind for e in await board.events(task.id)] == ["added", "started", "cancelled", "comment"]
    assert (await board.counts())["archived"] == 1


async def test_the_tasks_after_a_cancelled_one_are_blocked_saying_so_and_an_answer_lets_them_go_on(open_store):
    board = (await open_store()).board
    first, other = await board.add("first"), await board.add("other")
    await board.claim("me", 1)  # (first runs: other stays ready)
    alone = await board.add("after first", parents=[first.id])
    both = await board.add("after both", parents=[first.id, other.id])
    await board.cancel(first.id, "operator")
    for task in (alone, both):
        blocked = await board.get(task.id)
        assert blocked.status == "blocked" and f"task {first.id}, which it comes after, was cancelled" in blocked.reason
    assert (await board.answer(alone.id, "operator", "go on without it")).status == "ready"
    assert (await board.answer(both.id, "operator", "go on without it")).status == "todo"  # (other is not done)
    await board.claim("me", 1)
    await board.finish(other.id, "me", "done", None)
    assert (await board.get(both.id)).status == "ready"
