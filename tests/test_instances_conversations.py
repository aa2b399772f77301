"""Several instances on one PostgreSQL database: each conversation runs on one instance at a time.

A message that reaches another instance while a turn of its chat runs waits and is answered after it, once and
in order, by the instance that runs the chat; `/stop` reaches the turn wherever it runs; an instance that starts
leaves the turns of a live instance alone; a dead instance's turn is taken over (its process seen to have exited:
at once; a frozen one, whose process lives on: when its life lease ends), and the frozen one, woken, sends
nothing more.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from gateway import leases
from gateway.chat import owners as owners_module
from gateway.leases import LIFE_RENEW_EVERY, LIFE_SECONDS, LifeLease
from gateway.storage import StorageError, Store
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from gateway.chat.session_key import session_key
from platforms.base import InboundMessage
from tests.harness import ANN, eventually, sent_texts, start_gateway, state_rows, telegram_settings, wait_for_text
from tests.instances import (instance_settings, poller_and_standby, post_update, shared_database,  # noqa: F401
                             two_instances)
from tests.pg import pg_url  # noqa: F401  (a fixture)

BOB = 1002
TAKE_OVER = 40.0  # seconds the issue allows between an instance's death and another taking up its turns


def known(runner: Any) -> set[int]:
    return runner.parts.inbound.owners.known


async def test_a_message_reaching_the_other_instance_waits_for_the_running_turn_and_is_answered_after_it_once(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    hold = asyncio.Event()
    llm.script(Reply.text("the first answer", hold=hold), Reply.text("the second answer"))
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await llm.wait_for_requests(1)  # the turn runs on A
        await post_update(tg, second, tg.user_message("two", update_id=2))
        await eventually(lambda: len(known(first)) == 2, 10, "A taking up the message B stored")
        assert known(second) == set() and second.parts.sessions.workers == {}  # B runs nothing of the chat
        assert len(llm.requests) == 1  # it waits for the turn under way
        hold.set()
        await wait_for_text(tg, "the second answer", timeout=10)
        assert sent_texts(tg, ANN) == ["the first answer", "the second answer"]
        assert "one" in str(llm.requests[1]["messages"])  # the second turn follows the first in the same session
        await eventually(lambda: not state_rows(first.config.home, "SELECT * FROM conversation_owners"), 10,
                         "the conversation given up once nothing of it is left")
    finally:
        hold.set()
        await second.stop()
        await first.stop()


async def test_a_notice_wakes_the_owner_without_waiting_for_its_poll(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(owners_module, "POLL_SECONDS", 3600.0)  # no poll in the test's time: only the notice wakes A
    async with two_instances(tmp_path, llm, tg) as (first, second):
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await wait_for_text(tg, "echo: one", timeout=10)  # A owns the chat (no poll gives it up meanwhile)
        await post_update(tg, second, tg.user_message("two", update_id=2))
        await wait_for_text(tg, "echo: two", timeout=10)
        assert sent_texts(tg, ANN) == ["echo: one", "echo: two"] and second.parts.sessions.workers == {}


async def test_stop_sent_to_the_other_instance_stops_the_turn_where_it_runs(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    llm.script(Reply.hang())
    async with two_instances(tmp_path, llm, tg) as (first, second):
        await post_update(tg, first, tg.user_message("think for a long time", update_id=1))
        await llm.wait_for_requests(1)
        await post_update(tg, second, tg.user_message("/stop", update_id=2))
        await wait_for_text(tg, "Stopped the running request.", timeout=10)
        assert len(llm.requests) == 1


async def test_interrupt_by_a_message_to_the_other_instance_cuts_the_turn_where_it_runs(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    """busy_policy: interrupt — the newer message, reaching B, interrupts the turn running on A; A answers it."""
    llm.script(Reply.hang())
    async with two_instances(tmp_path, llm, tg, gateway__busy_policy="interrupt") as (first, second):
        await post_update(tg, first, tg.user_message("think for a long time", update_id=1))
        await llm.wait_for_requests(1)
        await post_update(tg, second, tg.user_message("never mind: two", update_id=2))
        await wait_for_text(tg, "echo: never mind: two", timeout=10)
        assert sent_texts(tg, ANN) == ["echo: never mind: two"] and len(llm.requests) == 2
        assert second.parts.sessions.workers == {}
        assert [r["state"] for r in state_rows(first.config.home, "SELECT state FROM inbox ORDER BY id")] == [
            "cancelled", "done"]


async def test_an_instance_that_starts_leaves_a_live_instances_turn_alone(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    hold = asyncio.Event()
    llm.script(Reply.text("the only answer", hold=hold))
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await llm.wait_for_requests(1)
        second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
        try:
            await second.parts.inbound.owners.look()  # (what it does every second: finds nothing to take up)
            assert known(second) == set() and second.parts.sessions.workers == {}
            hold.set()
            await wait_for_text(tg, "the only answer", timeout=10)
            assert sent_texts(tg, ANN) == ["the only answer"] and len(llm.requests) == 1
        finally:
            await second.stop()
    finally:
        hold.set()
        await first.stop()


async def test_a_stopped_instance_leaves_its_unfinished_turn_to_the_other_at_once(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    """An upgrade with no gap: the stopping instance's drain cuts the turn off; the other runs it again."""
    llm.script(Reply.hang())
    first = await start_gateway(tmp_path / "a", llm.base_url, gateway__drain_seconds=0,
                                **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await llm.wait_for_requests(1)
        await first.stop()
        await wait_for_text(tg, "echo: one", timeout=10)  # run again on B: nothing had been sent
        assert sent_texts(tg, ANN) == ["echo: one"]
    finally:
        await second.stop()
        await first.stop()


async def test_a_turn_whose_conversation_another_instance_took_over_commits_and_sends_nothing(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    """The fence at commit: A's life lease ended while its turn waited on the model, B took the conversation over
    (here the takeover is written as B's claim writes it) and answered; A's answer, arriving after, is not
    committed, so neither sent nor left in the outbox for anyone to send."""
    answer = asyncio.Event()

    async def held_answer(body: dict[str, Any]) -> Reply | None:
        if len(llm.requests) > 1:
            return None  # (B's run: the echo)
        await answer.wait()
        return Reply.text("the first instance's answer")
    llm.responder = held_answer
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, first, tg.user_message("one", update_id=1))
        await llm.wait_for_requests(1)
        assert await second.parts.store.owners.execute(
            "UPDATE conversation_owners SET holder = ?", second.instance_id) == 1
        await wait_for_text(tg, "echo: one", timeout=10)
        answer.set()
        await eventually(lambda: first.parts.sessions.busy_count() == 0, 10, "A's turn ending")
        assert sent_texts(tg, ANN) == ["echo: one"]
        assert not state_rows(first.config.home, "SELECT * FROM outbox WHERE state = 'pending'")
    finally:
        answer.set()
        await second.stop()
        await first.stop()


async def test_the_life_lease_lost_lets_the_turns_go_and_holds_every_send_until_it_is_renewed(
        tmp_path: Path, shared_database: str, monkeypatch: pytest.MonkeyPatch):
    store = await Store.open(tmp_path / "state.db", url=shared_database)
    lost = asyncio.Event()
    life = LifeLease(store.owners, "instance-a", shared=True)
    life.when_lost(lost.set)
    monkeypatch.setattr(leases, "LIFE_SECONDS", 2.0)
    monkeypatch.setattr(leases, "LIFE_MARGIN", 1.0)
    monkeypatch.setattr(leases, "LIFE_RENEW_EVERY", 0.2)
    try:
        await life.start()
        await life.fence()  # counted on: no wait
        renew = store.owners.live
        database_down = asyncio.Event()

        async def refused(holder: str, seconds: float) -> None:
            database_down.set()
            raise StorageError("the database does not answer")
        monkeypatch.setattr(store.owners, "live", refused)
        await lost.wait()
        assert database_down.is_set() and not life.counted_on()
        held = asyncio.create_task(life.fence())
        await asyncio.sleep(0)
        assert not held.done()  # a send waits
        monkeypatch.setattr(store.owners, "live", renew)
        await asyncio.wait_for(held, 10)  # renewed: it goes
        assert life.counted_on()
        assert await store.owners.lives() == ["instance-a"]
    finally:
        await life.stop()
        await store.close()
    assert await _lives(tmp_path, shared_database) == []


async def _lives(tmp_path: Path, url: str) -> list[str]:
    store = await Store.open(tmp_path / "state.db", url=url)
    try:
        return await store.owners.lives()
    finally:
        await store.close()


async def test_a_standby_takes_up_no_conversation_it_could_not_answer(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    """A polls Telegram, B stands by (Telegram not ready there). A message left unowned (here stored without a
    claim, as after a storage error between the two) is taken up by A, not by B, whose answer could not be sent
    (bench/instances_pg.py lost 100 of 1,000 answers so before the claim joined the write that stores a message)."""
    first = await start_gateway(tmp_path / "a", llm.base_url, **telegram_settings(tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **telegram_settings(tg))
    try:
        assert first.adapters["telegram"].ready and not second.adapters["telegram"].ready  # B stands by
        tg.user_message("one")
        await wait_for_text(tg, "echo: one", timeout=10)
        [owner] = state_rows(first.config.home, "SELECT holder FROM conversation_owners")
        assert owner["holder"] == first.instance_id

        msg = InboundMessage(platform="telegram", chat_id=str(BOB), user_id=str(BOB), text="two", message_id="77",
                             chat_type="dm")
        await second.parts.store.inbox.add(msg, session_key(msg))
        await second.parts.inbound.owners.look()
        assert known(second) == set() and not state_rows(first.config.home, "SELECT * FROM conversation_owners"
                                                         " WHERE holder = ?", second.instance_id)
        await wait_for_text(tg, "echo: two", timeout=10)  # A's look, within a second
        assert sent_texts(tg, BOB) == ["echo: two"] and sent_texts(tg, ANN) == ["echo: one"]
    finally:
        await second.stop()
        await first.stop()


async def test_a_killed_instances_turn_is_taken_over_and_answered_once(tmp_path: Path, pg_url: str,  # noqa: F811
                                                                       tg: FakeTelegram):
    async with FakeLLM() as llm, poller_and_standby(tmp_path, llm, tg, pg_url) as (first, second):
        llm.script(Reply.hang())
        tg.user_message("one")
        await llm.wait_for_requests(1)
        killed_at = asyncio.get_running_loop().time()
        first.kill()
        await wait_for_text(tg, "echo: one", timeout=TAKE_OVER + 10)
        assert asyncio.get_running_loop().time() - killed_at < TAKE_OVER
        assert sent_texts(tg, ANN) == ["echo: one"] and len(llm.requests) == 2


async def test_a_frozen_instances_turn_is_taken_over_when_its_life_lease_ends_and_it_sends_nothing_when_woken(
        tmp_path: Path, pg_url: str, tg: FakeTelegram):  # noqa: F811
    """SIGSTOP: the process lives on (so it is not seen to have exited), renewing nothing, as on a network cut.
    Its model's answer is waiting in its socket when it wakes: it must not send it (another instance ran the turn)."""
    async with FakeLLM() as llm, poller_and_standby(tmp_path, llm, tg, pg_url) as (first, second):
        answer = asyncio.Event()

        async def held_answer(body: dict[str, Any]) -> Reply | None:
            if len(llm.requests) > 1:
                return None  # (the echo)
            await answer.wait()
            return Reply.text("the frozen instance's answer")
        llm.responder = held_answer
        tg.user_message("one")
        await llm.wait_for_requests(1)
        assert first.process is not None
        frozen_at = asyncio.get_running_loop().time()
        first.process.send_signal(signal.SIGSTOP)
        await wait_for_text(tg, "echo: one", timeout=TAKE_OVER + 10)
        taken_over = asyncio.get_running_loop().time() - frozen_at
        assert LIFE_SECONDS - LIFE_RENEW_EVERY - 1 < taken_over < TAKE_OVER  # (its lease: 20 s from the last renewal)
        answer.set()
        await llm.wait_for_streamed(2, timeout=10)  # the frozen one's answer is in its socket
        first.process.send_signal(signal.SIGCONT)
        await eventually(lambda: "life lease is renewed" in (first.home / "gateway-1.log").read_text(), 30,
                         "the woken instance renewing its life lease (after letting its turn go)")
        tg.user_message("two")
        await wait_for_text(tg, "echo: two", timeout=20)
        texts = sent_texts(tg, ANN)
        assert texts == ["echo: one", "echo: two"], texts
