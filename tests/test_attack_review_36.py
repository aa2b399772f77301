"""Attack review 36: several instances on one PostgreSQL database — holes found in the conversation owners and the
outbox's sender.

- A reply still waiting (its send failed for a while) must keep its conversation with the instance that sends it:
  given up, the next message runs on another instance, whose answer goes out before the waiting one.
- A stopping instance sends what its outbox holds before its life lease ends: ended first, every send of the
  stop's flush waited on the fence (never counted on again) and nothing went out.
- A reply committed on an instance whose platform connection is not running (a standby of a polled platform) is
  left to one that can send it: kept as its own, every other instance left it (and the chat's later replies)
  alone while it lived.
- A turn cut off after its side effects started is reported once: the report commits only while the instance
  owns the conversation (an instance that lost it reported a second time, beside the owner's answer).
- A message stored and then not claimed because the database failed is not refused to the platform: it is in
  the inbox and runs from the next look.
- A reply whose sender died is taken over at the next look (a second), not at the tick's sweep (a minute) after
  the dead instance's next answer, taken over within a second, had overtaken it.
- A reply whose send the lease's loss cut off is sent once the lease is renewed, before the conversation's next
  answer (it waited for the tick's sweep: a minute, after that answer).
- A look (or a hand) that outlived the life lease (let go while it waited on the database) takes nothing up: a
  turn would run where another instance may take it over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway import leases
from gateway.chat import owners as owners_module
from gateway.chat.session_key import session_key
from gateway.chat.sessions import WorkItem
from gateway.storage import StorageError
from gateway.storage.outbox import OutboxItem
from platforms.base import InboundMessage
from platforms.base import ChatRef
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, eventually, sent_texts, start_gateway, state_rows, telegram_gateway, wait_for_text
from tests.instances import instance_settings, post_update, shared_database  # noqa: F401  (a fixture)
from tests.pg import pg_url  # noqa: F401  (a fixture)


def _pending(home: Path) -> list[object]:
    return state_rows(home, "SELECT id FROM outbox WHERE state = 'pending'")


async def test_a_reply_still_waiting_keeps_its_conversation_so_the_next_answer_goes_out_after_it(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        tg.fail_next("sendMessage", status=429, retry_after=3, count=1, chat_id=ANN)
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await eventually(lambda: bool(_pending(first.config.home)) and first.parts.sessions.busy_count() == 0, 10,
                         "A's turn over, its reply waiting for the rate limit")
        await first.parts.inbound.owners.look()  # (what A does every second: gives up what it has nothing left of)
        await post_update(tg, second, tg.user_message("two", update_id=2))
        await wait_for_text(tg, "echo: two", timeout=15)
        await wait_for_text(tg, "echo: one", timeout=15)
        assert sent_texts(tg, ANN) == ["echo: one", "echo: two"]
    finally:
        await second.stop()
        await first.stop()


async def test_a_stopping_instance_sends_its_waiting_replies_before_its_life_lease_ends(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    """As on one instance (SQLite): the stop's flush sends what waits in the outbox."""
    first = await start_gateway(tmp_path / "a", llm.base_url, gateway__drain_seconds=2,
                                **instance_settings(tmp_path, tg))
    try:
        tg.fail_next("sendMessage", status=500, description="Internal Server Error", count=1, chat_id=ANN)
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await eventually(lambda: bool(_pending(first.config.home)) and first.parts.sessions.busy_count() == 0, 10,
                         "the reply waiting for the rate limit")
    finally:
        await first.stop()
    assert sent_texts(tg, ANN) == ["echo: one"]
    assert not _pending(first.config.home)
    assert state_rows(first.config.home, "SELECT * FROM instance_leases") == []  # (the lease ended after)


async def test_a_reply_its_instance_cannot_send_is_left_to_one_that_can(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    """Telegram polled: A holds the connection, B stands by (its adapter not running). A reply B commits (a
    scheduled job's, a turn of a conversation B owns) goes out through A; kept as B's, A left it (and every later
    reply of the chat) alone for as long as B lived."""
    first = await telegram_gateway(tmp_path / "a", llm, tg)
    second = None
    try:
        await eventually(lambda: first.adapters["telegram"].running, 10, "A holding the connection")
        second = await telegram_gateway(tmp_path / "b", llm, tg)
        await eventually(lambda: second.adapters["telegram"].health.state == "standby", 10, "B standing by")
        await second.parts.delivery.reply(ChatRef("telegram", str(ANN)), "B's reply")
        await wait_for_text(tg, "B's reply", timeout=10)  # (A's next look: not the tick's sweep, a minute)
        assert sent_texts(tg, ANN) == ["B's reply"]
    finally:
        if second is not None:
            await second.stop()
        await first.stop()


async def test_a_cut_off_turn_is_reported_only_by_the_instance_that_owns_its_conversation(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    """A takes up a message whose turn had started side effects (as at a takeover) but B owns the conversation now
    (A stalled, its lease ended, B took over): A's report is not committed, nor sent; B's answer is the only one."""
    hold = asyncio.Event()
    llm.script(Reply.text("B's answer", hold=hold))
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, second, tg.user_message("one", update_id=1))
        await llm.wait_for_requests(1)  # B owns the conversation and runs it
        [row] = await second.parts.store.inbox.unfinished()
        item = WorkItem(row.inbox_id, row.session_key, row.msg, effects=("terminal",))
        await first.parts.turns.run(first.parts.sessions.worker(row.session_key), item)
        assert not [text for text in sent_texts(tg, ANN) if "interrupted" in text]
        assert state_rows(first.config.home, "SELECT * FROM outbox") == []  # A's report not committed
        [state] = state_rows(first.config.home, "SELECT state FROM inbox WHERE id = ?", row.inbox_id)
        assert state["state"] in ("received", "processing")  # still B's turn's
        hold.set()
        await wait_for_text(tg, "B's answer", timeout=10)
        assert sent_texts(tg, ANN) == ["B's answer"]
        assert len(state_rows(first.config.home, "SELECT * FROM outbox")) == 1
    finally:
        hold.set()
        await second.stop()
        await first.stop()


async def test_a_message_stored_whose_claim_the_database_refused_is_taken_not_refused_and_runs_once(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch):
    """A message stored without its claim (accepted while starting, or a goal's turn) whose claim the database
    then refuses: no error escapes (it is stored), nothing runs yet, and the next look runs it, once. (The intake
    claims in the write that stores: a refusal there refuses the message to the platform, which sends it again.)"""
    monkeypatch.setattr(owners_module, "POLL_SECONDS", 3600.0)  # (the looks in the test are the test's own)
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    owners = first.parts.store.owners
    claim = owners.claim
    refused = asyncio.Event()

    async def failing(key: str, holder: str) -> bool:
        if not refused.is_set():
            refused.set()
            raise StorageError("the database did not answer")
        return await claim(key, holder)
    try:
        msg = InboundMessage(platform="telegram", chat_id=str(ANN), user_id=str(ANN), text="one", message_id="5",
                             chat_type="dm")
        key = session_key(msg)
        inbox_id = await first.parts.store.inbox.add(msg, key)
        owners.claim = failing  # type: ignore[method-assign]
        await first.parts.inbound.owners.hand(WorkItem(inbox_id, key, msg))
        assert refused.is_set() and first.parts.sessions.workers == {} and not llm.requests
        await first.parts.inbound.owners.look()
        await wait_for_text(tg, "echo: one", timeout=10)
        assert sent_texts(tg, ANN) == ["echo: one"] and len(llm.requests) == 1
    finally:
        owners.claim = claim  # type: ignore[method-assign]
        await first.stop()


async def test_a_look_that_outlived_the_life_lease_takes_nothing_up_until_it_is_renewed(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch):
    """The database answers a look slowly, and the renewals not at all: the lease is let go while the look waits.
    What the look then finds is not run (another instance may take it over): it runs once the lease is renewed."""
    monkeypatch.setattr(leases, "LIFE_SECONDS", 2.0)
    monkeypatch.setattr(leases, "LIFE_MARGIN", 1.0)
    monkeypatch.setattr(leases, "LIFE_RENEW_EVERY", 0.2)
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    owners, life = first.parts.store.owners, first.parts.inbound.owners.life
    owned, live = owners.owned, owners.live
    lost, slowed = asyncio.Event(), asyncio.Event()
    life.when_lost(lost.set)
    counted_on_at_turn: list[bool] = []

    async def refused(holder: str, seconds: float) -> None:
        raise StorageError("the database did not answer")

    async def slow(holder: str) -> Any:
        found = await owned(holder)
        if found[1] and not slowed.is_set():
            slowed.set()
            owners.live = refused  # type: ignore[method-assign]
            await lost.wait()
        return found

    async def echo(body: dict[str, Any]) -> Reply | None:
        counted_on_at_turn.append(life.counted_on())
        return None
    llm.responder = echo
    try:
        owners.owned = slow  # type: ignore[method-assign]
        msg = InboundMessage(platform="telegram", chat_id=str(ANN), user_id=str(ANN), text="one", message_id="5",
                             chat_type="dm")
        await first.parts.store.inbox.add(msg, session_key(msg))  # (stored unclaimed: a look finds it)
        await asyncio.wait_for(lost.wait(), 15)
        owners.live = live  # type: ignore[method-assign]
        await wait_for_text(tg, "echo: one", timeout=15)
        assert counted_on_at_turn == [True] and sent_texts(tg, ANN) == ["echo: one"]
    finally:
        owners.owned, owners.live = owned, live  # type: ignore[method-assign]
        await first.stop()


async def test_a_dead_instances_waiting_reply_is_taken_over_within_the_takeover_time_not_the_ticks_minute(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    """A reply whose sender died (its life lease ended) is taken over at the next look (every second), as its
    conversation's turns are: the tick's sweep (a minute) came after the next answer, which overtook it."""
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await first.parts.store.outbox.add(OutboxItem(chat=ChatRef("telegram", str(ANN)), text="the dead one's reply"))
        state_rows(first.config.home, "UPDATE outbox SET sender = 'gone-host:1:dead' RETURNING id")  # (it died)
        await wait_for_text(tg, "the dead one's reply", timeout=10)
        assert sent_texts(tg, ANN) == ["the dead one's reply"]
    finally:
        await first.stop()


async def test_a_reply_cut_off_by_the_lease_lost_goes_out_after_the_renewal_before_the_next_answer(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch):
    """The life lease is lost while a committed reply is on its way (its send cut off): renewed, the instance sends
    it before it answers the conversation's next message (it is no other instance's to send: it waited for the
    tick's sweep, a minute, and the next answer went out first)."""
    monkeypatch.setattr(leases, "LIFE_SECONDS", 2.0)
    monkeypatch.setattr(leases, "LIFE_MARGIN", 1.0)
    monkeypatch.setattr(leases, "LIFE_RENEW_EVERY", 0.2)
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    owners, life = first.parts.store.owners, first.parts.inbound.owners.life
    live, lost = owners.live, asyncio.Event()
    life.when_lost(lost.set)

    async def refused(holder: str, seconds: float) -> None:
        raise StorageError("the database did not answer")
    try:
        held = tg.hold_next("sendMessage", chat_id=ANN)
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await eventually(lambda: any(c.method == "sendMessage" for c in tg.calls), 10, "the reply on its way")
        owners.live = refused  # type: ignore[method-assign]
        await asyncio.wait_for(lost.wait(), 15)  # the turn let go, its send cut off
        owners.live = live  # type: ignore[method-assign]
        await eventually(life.counted_on, 15, "the life lease renewed")
        held.set()
        await post_update(tg, first, tg.user_message("two", update_id=2))
        await wait_for_text(tg, "echo: two", timeout=15)
        await wait_for_text(tg, "echo: one", timeout=15)
        assert sent_texts(tg, ANN) == ["echo: one", "echo: two"]
    finally:
        owners.live = live  # type: ignore[method-assign]
        await first.stop()


async def test_a_turn_failing_after_its_conversation_was_taken_over_reports_nothing(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    """A turn that fails (a bug outside the agent) on A after B took the conversation over neither marks the message
    failed nor tells the chat so: B runs it and answers, once."""
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    turns = first.parts.turns

    async def taken_over_then_broken(worker: Any, item: WorkItem) -> str:
        await first.parts.store.owners.execute("UPDATE conversation_owners SET holder = ?", second.instance_id)
        raise RuntimeError("a bug")
    try:
        turns._run = taken_over_then_broken  # type: ignore[method-assign]
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await wait_for_text(tg, "echo: one", timeout=10)  # B's look runs it
        assert sent_texts(tg, ANN) == ["echo: one"]
        assert [r["state"] for r in state_rows(first.config.home, "SELECT state FROM inbox")] == ["done"]
    finally:
        await second.stop()
        await first.stop()
