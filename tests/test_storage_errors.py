"""A database another program holds (an operator's `sqlite3` shell in a transaction, a backup tool),
and a connection that breaks: an error of the storage is never the message's. Nothing is set
aside or acknowledged while it cannot be stored; it is taken once the lock is gone, and answered
once; `/readyz` and `chatgate status` say so meanwhile. The lock holder is the real `sqlite3`."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest

from gateway.storage import Store
from gateway.storage.database import StorageError
from tests.engines import OpenStore
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import (
    ANN,
    Daemon,
    Shell,
    Tab,
    eventually,
    free_port,
    sent_texts,
    start_gateway,
    telegram_gateway,
    telegram_settings,
    wait_for_text,
    web_message,
)

BOB = 2002
FAST = {"gateway__lock_wait_seconds": 0.5}  # a write waits this long for the shell's lock, then is refused


async def settled(store: Store) -> bool:
    """Nothing waits, runs or is to be sent (so the lock taken next meets no write of a turn)."""
    return not any((await store.inbox.queue_counts()).values())


def rows(home: Path, sql: str, *args: Any) -> list[sqlite3.Row]:
    with sqlite3.connect(home / "state.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute(sql, args).fetchall()


async def readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as response:
        return response.status, await response.json()



# -- the group commit -------------------------------------------------------------------------


async def test_reads_go_on_while_a_write_waits_out_a_short_lock_which_is_not_an_error(tmp_path):
    store = await Store.open(tmp_path / "state.db")
    try:
        await store.inbox.add(web_message(0), "k")
        async with Shell(tmp_path / "state.db") as shell:
            write = asyncio.create_task(store.inbox.add(web_message(1), "k"))
            await eventually(lambda: store.health()["state"] == "locked", 10, "the write waiting for the lock")
            assert await store.fetchval("SELECT count(*) FROM inbox") == 1  # not frozen behind it
            assert not write.done()  # still waiting: no error for a lock shorter than the wait
            await shell.release()
        assert await write and await store.fetchval("SELECT count(*) FROM inbox") == 2
        assert store.health()["state"] == "ready"
    finally:
        await store.close()


async def test_a_lock_held_past_the_wait_is_a_storage_error_and_health_clears_by_itself(tmp_path):
    store = await Store.open(tmp_path / "state.db", lock_wait=0.3)
    try:
        async with Shell(tmp_path / "state.db") as shell:
            with pytest.raises(StorageError, match="locked by another program"):
                await store.inbox.add(web_message(1), "k")
            health = store.health()
            assert health["state"] == "failing" and "locked by another program" in health["error"]
            await shell.release()
        await eventually(lambda: store.health()["state"] == "ready", 10, "the probe finding the lock gone")
        assert await store.fetchval("SELECT count(*) FROM inbox") == 0
    finally:
        await store.close()


async def test_a_store_closed_while_a_write_waits_for_a_lock_tells_the_caller(tmp_path):
    store = await Store.open(tmp_path / "state.db", lock_wait=60)
    try:
        async with Shell(tmp_path / "state.db"):
            write = asyncio.create_task(store.inbox.add(web_message(1), "k"))
            await eventually(lambda: store.health()["state"] == "locked", 10, "the write waiting for the lock")
            assert store.db._writer is not None
            store.db._writer.cancel()  # as at a shutdown that does not wait
            with pytest.raises(StorageError, match="closed before"):
                await asyncio.wait_for(write, 10)
    finally:
        await store.close()


@pytest.mark.parametrize("batch", [1, 11])
async def test_a_rollback_that_fails_settles_every_caller_and_the_store_goes_on(open_store: OpenStore, batch: int):
    store = await open_store()
    try:
        async def breaks_the_connection(db: Any) -> None:
            await db.execute("INSERT INTO gateway_instances VALUES ('x', 'h', 1, 0, 0)")
            await db.raw.close()  # ROLLBACK (and anything else) on the driver's connection now fails
            raise RuntimeError("the unit failed")

        others = [store.inbox.add(web_message(n), "k") for n in range(batch - 1)]
        outcomes = await asyncio.wait_for(asyncio.gather(store.write(breaks_the_connection), *others,
                                                         return_exceptions=True), 10)
        assert all(isinstance(o, StorageError) for o in outcomes), outcomes
        assert "connection failed" in str(outcomes[0])
        assert await store.inbox.add(web_message(99), "k")  # a new connection
        assert [r["message_id"] for r in await store.fetch("SELECT platform_message_id AS message_id FROM inbox")
                ] == ["m99"]
        assert await store.fetch("SELECT * FROM gateway_instances") == []
    finally:
        await store.close()


# -- Telegram, through `chatgate run` --------------------------------------------------------


async def test_a_locked_database_holds_telegram_updates_back_and_answers_each_once_after(tmp_path, tg: FakeTelegram):
    port = free_port()
    async with FakeLLM() as llm:
        daemon = Daemon(tmp_path, llm, telegram_settings(
            tg, http__port=port, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}", **FAST))
        try:
            daemon.start()
            tg.user_message("warm up")
            await wait_for_text(tg, "echo: warm up", timeout=30)
            await eventually(lambda: daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'")
                             and daemon.rows("SELECT 1 FROM inbox WHERE state = 'done'"), 10, "the warm-up done")
            async with Shell(tmp_path / "state.db") as shell:
                since = len(tg.calls)
                first = tg.user_message("one")
                tg.user_message("two")
                tg.user_message("hi from bob", user_id=BOB, first_name="Bob")
                stuck = first["update_id"]
                # each try waits for the lock and is refused; the updates are fetched again from the same
                # offset, more often than an update may fail before it is set aside (3 tries)
                await tg.wait_for("getUpdates", lambda c: int(c.get("offset") or 0) == stuck, count=3,
                                  timeout=30, since=since)
                assert {int(c.get("offset") or 0) for c in tg.calls_to("getUpdates")[-3:]} == {stuck}
                status, body = await readyz(port)
                assert status == 503 and body["storage"]["state"] == "failing"
                assert "locked by another program" in body["storage"]["error"]
                assert body["platforms"]["telegram"]["state"] == "ready"
                done = await asyncio.to_thread(daemon.cli, "status", "--json")
                assert done.stdout, (done.returncode, done.stderr)
                report = json.loads(done.stdout)
                assert done.returncode == 1 and report["running"] and report["storage"]["state"] == "failing"
                assert report["pid"] == daemon.process.pid
                async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as page:
                    assert page.status == 200 and "chatgate_outbox" in await page.text()  # reads go on
                assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
                assert len(rows(tmp_path, "SELECT 1 FROM inbox")) == 1  # only the warm-up
                assert all(int(c.get("offset") or 0) <= stuck for c in tg.calls_to("getUpdates"))
                await shell.release()
            await wait_for_text(tg, "echo: two", timeout=30)
            await wait_for_text(tg, "echo: hi from bob", timeout=30)
            assert sent_texts(tg, ANN) == ["echo: warm up", "echo: one", "echo: two"]
            assert sent_texts(tg, BOB) == ["echo: hi from bob"]
            assert len(llm.requests) == 4
            assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
            status, body = await readyz(port)
            assert status == 200 and body["storage"]["state"] == "ready"
            assert "storage   ready" in (await asyncio.to_thread(daemon.cli, "status")).stdout
        finally:
            daemon.close()


async def test_the_telegram_webhook_answers_500_while_it_cannot_store_and_never_sets_it_aside(
        tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__mode="webhook",
                                    platforms__telegram__webhook_url="http://placeholder/telegram/webhook", **FAST)
    try:
        tg.webhook_url = f"http://127.0.0.1:{runner.http.port}/telegram/webhook"
        update = tg.user_message("through the hook")
        async with Shell(tmp_path / "state.db") as shell:
            assert [await tg.push_webhook(update) for _ in range(4)] == [500] * 4  # Telegram tries again
            assert runner.parts.store.health()["state"] == "failing"
            await shell.release()
        assert await tg.push_webhook(update) == 200
        await wait_for_text(tg, "echo: through the hook")
        assert sent_texts(tg, ANN) == ["echo: through the hook"]
        assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
    finally:
        await runner.stop()


# -- the other adapters -----------------------------------------------------------------------


async def test_a_web_chat_message_is_acked_only_once_stored_and_answered_once(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, **FAST)
    try:
        async with Tab(runner) as tab:
            await tab.say("warm up")
            await tab.reply()
            await eventually(lambda: settled(runner.parts.store), 10, "the warm-up done")
            async with Shell(tmp_path / "state.db") as shell:
                await tab.send_raw({"type": "message", "id": "held-1", "text": "while locked"})
                notice = await tab.wait_for(lambda f: f["type"] == "notice")
                assert "not stored yet" in notice["text"]
                assert not [f for f in tab.frames if f["type"] == "ack" and f["id"] == "held-1"]
                await shell.release()
            ack = await tab.wait_for(lambda f: f["type"] == "ack" and f["id"] == "held-1", timeout=15)
            assert not ack["duplicate"] and not ack["rejected"]
            assert await tab.reply(2) == "echo: while locked"
            assert tab.replies() == ["echo: warm up", "echo: while locked"]
        assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
    finally:
        await runner.stop()


@pytest.fixture
async def slack() -> AsyncIterator[Any]:
    from tests.fakes.slack import FakeSlack

    async with FakeSlack() as fake:
        fake.redeliver_after = 1.0
        yield fake


def slack_settings(slack: Any, mode: str) -> dict[str, Any]:
    settings = {"platforms__slack__bot_token": slack.bot_token, "platforms__slack__api_base": slack.api_base,
                "platforms__slack__mode": mode, "access__allowed_users": "{slack: [U1001]}", **FAST}
    if mode == "socket":
        settings["platforms__slack__app_token"] = slack.app_token
    else:
        settings["platforms__slack__signing_secret"] = slack.signing_secret
    return settings


def slack_answers(slack: Any, channel: str) -> list[str]:
    return [m.text for m in slack.messages(channel) if not m.deleted]


async def test_slack_socket_mode_does_not_ack_what_it_cannot_store_and_takes_the_redelivery(
        tmp_path, llm: FakeLLM, slack: Any):
    runner = await start_gateway(tmp_path, llm.base_url, **slack_settings(slack, "socket"))
    try:
        async with Shell(tmp_path / "state.db") as shell:
            payload = slack.user_message("while locked")
            await eventually(lambda: runner.parts.store.health()["state"] == "failing", 10, "the refused write")
            assert not [a for a in slack.acks if a.envelope_id == slack.envelope_of(payload).envelope_id]
            await shell.release()
        await slack.wait_for_ack(payload, timeout=15)  # a redelivery, stored
        await slack.wait_until(lambda: "echo: while locked" in slack_answers(slack, "D1001"), 10)
        assert slack.envelope_of(payload).deliveries >= 2
        assert slack_answers(slack, "D1001") == ["echo: while locked"]
        assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
    finally:
        await runner.stop()


async def test_slack_http_events_are_not_200_until_stored(tmp_path, llm: FakeLLM, slack: Any):
    runner = await start_gateway(tmp_path, llm.base_url, **slack_settings(slack, "http"))
    try:
        url = f"http://127.0.0.1:{runner.http.port}/slack/events"
        payload = slack.user_message("while locked", deliver="none")
        async with Shell(tmp_path / "state.db") as shell:
            for _ in range(3):
                assert (await slack.post_event(url, payload))[0] != 200
            await shell.release()
        assert (await slack.post_event(url, payload, retry_num=3, retry_reason="http_error"))[0] == 200
        await slack.wait_until(lambda: "echo: while locked" in slack_answers(slack, "D1001"), 10)
        assert slack_answers(slack, "D1001") == ["echo: while locked"]
        assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
    finally:
        await runner.stop()


async def test_a_discord_message_waits_for_the_storage_and_is_answered_once(tmp_path, llm: FakeLLM,
                                                                             monkeypatch: pytest.MonkeyPatch):
    import discord

    from tests.fakes.discord import FakeDiscord

    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord() as dc:
        runner = await start_gateway(tmp_path, llm.base_url, platforms__discord__token=dc.token,
                                     platforms__discord__api_base=dc.api_base,
                                     platforms__discord__gateway_url=dc.gateway_url,
                                     access__allowed_users="{discord: [1001]}", **FAST)
        try:
            async with Shell(tmp_path / "state.db") as shell:
                dc.user_message("while locked")
                tried = 'chatgate_inbound_messages_total{platform="discord"} 4.0'  # more tries than set it aside
                await eventually(lambda: tried in runner.metrics.render().decode(), 20, "four tries")
                assert runner.parts.store.health()["state"] == "failing"
                assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
                await shell.release()
            await dc.wait_until(lambda: any(m.content == "echo: while locked" for m in dc.sent_messages()), 20)
            assert [m.content for m in dc.sent_messages()] == ["echo: while locked"]
            assert not rows(tmp_path, "SELECT 1 FROM dead_letters")
        finally:
            await runner.stop()
