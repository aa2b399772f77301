"""Several instances on one PostgreSQL database: a reply is sent by one instance at a time. The instance that
committed it sends it; another flushing the chat leaves it alone while that one lives, and takes it over once
that one's life lease has ended (its death)."""

from __future__ import annotations

from pathlib import Path

from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.instances import instance_settings, shared_database  # noqa: F401  (a fixture)
from tests.pg import pg_url  # noqa: F401  (a fixture)
from tests.harness import ANN, Tab, eventually, sent_texts, start_gateway, state_rows


async def test_a_reply_a_live_instance_sends_is_left_to_it_and_a_dead_ones_is_taken_over_once(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):  # noqa: F811
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        chat = ChatRef("telegram", str(ANN))
        await first.parts.store.outbox.add(OutboxItem(chat=chat, text="A's reply"))  # (as a turn's commit on A)
        await first.parts.store.outbox.add(OutboxItem(chat=chat, text="A's next reply"))
        [sender] = {r["sender"] for r in state_rows(first.config.home, "SELECT sender FROM outbox")}
        assert sender == first.instance_id  # written as A's by A's connection

        await second.parts.delivery.flush()
        assert sent_texts(tg, ANN) == []  # A lives: B leaves A's replies (both: the chat's order) to it

        state_rows(first.config.home, "UPDATE outbox SET sender = 'gone-host:1:dead' RETURNING id")  # (A died)
        await second.parts.delivery.flush()
        assert sent_texts(tg, ANN) == ["A's reply", "A's next reply"]
        assert {r["sender"] for r in state_rows(first.config.home, "SELECT sender FROM outbox")} == {
            second.instance_id}
        await first.parts.delivery.flush()
        assert sent_texts(tg, ANN) == ["A's reply", "A's next reply"]  # sent once
    finally:
        await second.stop()
        await first.stop()


async def test_a_reply_made_on_another_instance_reaches_the_web_chat_tab_open_on_this_one(
        tmp_path: Path, llm: FakeLLM, shared_database: str):  # noqa: F811
    """The tab's socket stays on A; a reply B makes for it (a scheduled job's report, a goal's notice) cannot be
    sent from B: B lets it go, and A, which can reach the tab, sends it (within its next look)."""
    first = await start_gateway(tmp_path / "a", llm.base_url)
    second = await start_gateway(tmp_path / "b", llm.base_url)
    try:
        async with Tab(first) as tab:
            await second.parts.delivery.reply(ChatRef("webchat", tab.chat_id), "made on B")
            await tab.wait_for(lambda f: f.get("text") == "made on B")
            await eventually(lambda: [(r["sender"], r["state"]) for r in state_rows(
                first.config.home, "SELECT sender, state FROM outbox")] == [(first.instance_id, "sent")],
                10, "the reply recorded as sent by A")
            assert len([f for f in tab.frames if f.get("text") == "made on B"]) == 1
    finally:
        await second.stop()
        await first.stop()
